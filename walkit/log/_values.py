"""What a record read from a typed log carries to give its ``value``: :class:`RecordValues`.

A reader makes one per ledger (every record of a ledger was written with the same schema
version, see ``walkit._core.log_metadata``) and puts it in each :class:`~walkit.LogRecord` it
makes, which decodes its payload when ``record.value`` is asked for: reading costs nothing for
the records whose value is not wanted, and a record that does not decode raises SchemaError
with its position while its ``payload`` stays readable. Records of a log without a schema
carry none: their value is their payload.

No msgspec here: an untyped handle on a typed log hands out payloads, and knows each one's
version (``walkit._core.schema_codec`` decodes, in ``walkit.log._schema``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Protocol, final

from typing_extensions import TypeVar

from walkit.errors import ConfigurationError, SchemaError

__all__ = ["RecordValues", "V", "check_schema_extra", "raw_values"]

#: The type of a log's values: a typed log's schema type; bytes (the payload) without one.
V = TypeVar("V", default=bytes)

#: The errors a decoder raises for a payload that does not fit (msgspec's DecodeError and
#: ValidationError and pydantic's ValidationError are ValueErrors; a type's own checks in
#: ``__post_init__`` may raise TypeError).
_DECODE_ERRORS: Final = (ValueError, TypeError)


class _Record(Protocol):
    """What a RecordValues needs of a record (a LogRecord)."""

    @property
    def payload(self) -> bytes: ...

    @property
    def position(self) -> Any: ...


@final
class RecordValues:
    """How the records of one ledger give their value (see the module docs).

    ``version``: the schema version that wrote them (0: none). ``decode``: payload -> value
    (None: the value is the payload, or there is none: ``problem`` says why).
    """

    __slots__ = ("_key", "decode", "field_of", "log", "problem", "type_name", "version")

    def __init__(
        self,
        log: str,
        version: int,
        decode: Callable[[bytes], Any] | None,
        *,
        type_name: str = "",
        problem: str | None = None,
        field_of: Callable[[str], str | None] | None = None,
    ) -> None:
        self.log = log
        self.version = version
        self.decode = decode
        self.type_name = type_name
        self.problem = problem
        self.field_of = field_of
        self._key = (log, version, type_name, problem, decode is None)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RecordValues) and other._key == self._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return f"RecordValues(log={self.log!r}, version={self.version})"

    def value(self, record: _Record) -> Any:
        """The record's value; SchemaError (with its position) when it has none."""
        decode = self.decode
        if decode is None:
            if self.problem is None:
                return record.payload
            position = record.position
            raise SchemaError(
                f"log {self.log}: the record at {position} {self.problem}", position=position
            )
        try:
            return decode(record.payload)
        except _DECODE_ERRORS as exc:
            position = record.position
            field = None if self.field_of is None else self.field_of(str(exc))
            raise SchemaError(
                f"log {self.log}: the record at {position} (schema version {self.version}) does "
                f"not decode as {self.type_name}: {exc}",
                position=position,
                field=field,
            ) from None


def raw_values(log: str, version: int, cache: dict[int, RecordValues]) -> RecordValues:
    """The RecordValues of an untyped handle reading a typed log's ledger of ``version``:
    the value is the payload, and the record knows its version."""
    found = cache.get(version)
    if found is None:
        found = cache[version] = RecordValues(log, version, None)
    return found


def check_schema_extra() -> None:
    """ConfigurationError when msgspec is missing: a log with a schema needs it (the
    ``schema`` extra); here, apart from the modules that import it."""
    try:
        import msgspec  # noqa: F401
    except ImportError:
        raise ConfigurationError(
            "a log with a schema needs msgspec: pip install 'walkit[schema]'"
        ) from None
