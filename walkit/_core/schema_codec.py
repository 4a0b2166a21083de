"""A typed log's values as bytes: MessagePack maps keyed by field name, through msgspec.

Why this encoding (measured on this project's machine, a record of five fields, ~100 bytes):
msgspec encodes a dataclass in ~0.7 µs and a Struct in ~0.4 µs, and decodes them in ~1.4 and
~0.8 µs; fastavro's Avro binary takes ~6 µs each way, more than a log append costs a record at
64 tasks and several times what the log reader spends on one. A map keyed by field names
resolves schemas by name without the writer's schema at hand (a reader's missing fields take
its defaults, unknown ones are skipped, an int is read as a float), which is exactly Avro's
resolution for the types a log schema allows (:mod:`walkit._core.schema`), at the price of
the field names in every record (about a fifth of a 100-byte record; compression, per entry,
takes most of it back).

:class:`ValueCodec` checks a value on the way in (its type, then a decode of what was encoded,
so that a field holding the wrong type fails the append with the field's name) and decodes on
the way out; :func:`decode_plain` reads a payload with no Python type (JSON-like builtins, the
schema's defaults filled in), for the command line and Spark.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar, final

import msgspec

from walkit._core.schema import RecordType
from walkit._core.schema_types import is_pydantic_model, schema_of, struct_of
from walkit.errors import InvalidArgumentError

__all__ = ["ValueCodec", "decode_plain", "error_field", "plain_decoder"]

T = TypeVar("T")

_AT: Final = re.compile(r" - at `\$\.?([^`]*)`$")
_MISSING: Final = re.compile(r"missing required field `([^`]*)`")


def error_field(message: str) -> str | None:
    """The field a msgspec validation message names (dotted), if any."""
    path = ""
    found = _AT.search(message)
    if found:
        path = found.group(1)
    missing = _MISSING.search(message)
    if missing:
        path = f"{path}.{missing.group(1)}" if path else missing.group(1)
    return path or None


@final
class ValueCodec(Generic[T]):
    """The values of one type: encode (checked) and decode."""

    __slots__ = ("_check", "_encode", "_from_plain", "decode", "name", "schema", "type")

    def __init__(self, tp: type[T]) -> None:
        self.type = tp
        self.schema: RecordType = schema_of(tp)
        self.name = tp.__name__
        encoder = msgspec.msgpack.Encoder()
        if is_pydantic_model(tp):
            model: Any = tp

            def dump(value: Any) -> bytes:
                return encoder.encode(value.model_dump(by_alias=True, warnings=False))

            self._encode: Callable[[Any], bytes] = dump
            check = msgspec.msgpack.Decoder(struct_of(self.schema))
            self._check: Callable[[bytes], Any] = check.decode
            plain = msgspec.msgpack.Decoder()

            def validate(payload: bytes) -> T:
                return model.model_validate(plain.decode(payload))  # type: ignore[no-any-return]

            #: payload -> value; raises msgspec's or pydantic's errors (the reader wraps them).
            self.decode: Callable[[bytes], T] = validate
        else:
            self._encode = encoder.encode
            decoder = msgspec.msgpack.Decoder(tp)
            self._check = decoder.decode
            self.decode = decoder.decode

    def encode(self, value: object) -> bytes:
        """``value`` as bytes; InvalidArgumentError (naming the field) when it is not a
        ``T`` or a field does not match its type. Nothing is kept."""
        if type(value) is not self.type and not isinstance(value, self.type):
            raise InvalidArgumentError(
                f"this log's records are {self.name} values, not {type(value).__name__}"
            )
        try:
            data = self._encode(value)
            self._check(data)
        except msgspec.ValidationError as exc:
            field = error_field(str(exc))
            where = f"{self.name}.{field}" if field else self.name
            text = _AT.sub("", str(exc))
            raise InvalidArgumentError(f"{where}: {text}") from None
        except (TypeError, ValueError, OverflowError) as exc:  # msgspec cannot encode it
            raise InvalidArgumentError(
                f"a {self.name} value that cannot be encoded: {exc}"
            ) from None
        return data


def plain_decoder(schema: RecordType) -> Callable[[bytes], dict[str, Any]]:
    """payload -> a dict of builtins (bytes stay bytes) resolved against ``schema``: its
    defaults for fields the writer did not write, without the fields it does not have.
    Raises msgspec's errors."""
    decoder = msgspec.msgpack.Decoder(struct_of(schema))

    def decode(payload: bytes) -> dict[str, Any]:
        found: dict[str, Any] = msgspec.to_builtins(decoder.decode(payload), builtin_types=(bytes,))
        return found

    return decode


def decode_plain(payload: bytes) -> Any:
    """A payload as written, without a schema (JSON-like builtins; bytes stay bytes)."""
    return msgspec.msgpack.decode(payload)
