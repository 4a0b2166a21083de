"""What a log record carries besides its payload: a key, headers and a timestamp (Kafka's
record model), and their checks.

- ``key``: bytes, or None. An empty key is a key (``b""``), unlike None.
- ``headers``: ordered (name, value) pairs, names str and values bytes, as Kafka's headers: a
  name may repeat. Given as such pairs or as a mapping; stored and read back as a tuple of
  pairs. No headers (None or empty) read back as None.
- ``timestamp``: milliseconds since the Unix epoch, an int from 0 to 2^63-1, or None (the
  writer's clock then gives one, unless the client was connected with ``wall_clock=None``).

Pure code: the writer checks what an append was given here, before it queues the record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final, TypeAlias, final

import attrs

from walkit.errors import InvalidArgumentError

__all__ = [
    "MAX_HEADERS",
    "MAX_HEADER_NAME",
    "MAX_TIMESTAMP",
    "Extras",
    "Headers",
    "Record",
    "check_headers",
    "check_key",
    "check_timestamp",
    "extras_of",
]

#: A record's headers: (name, value) pairs, in order.
Headers: TypeAlias = tuple[tuple[str, bytes], ...]
#: (key, headers, timestamp) of a record that has at least one of them.
Extras: TypeAlias = tuple[bytes | None, Headers | None, int | None]

#: The greatest timestamp (ms): a signed 64-bit integer.
MAX_TIMESTAMP: Final = 2**63 - 1
#: Most headers per record, and the longest header name in UTF-8 bytes (u16 in the format).
MAX_HEADERS: Final = 0xFFFF
MAX_HEADER_NAME: Final = 0xFFFF


def check_key(key: object) -> bytes:
    """The key as bytes; InvalidArgumentError unless it is bytes-like."""
    if type(key) is bytes:
        return key
    if isinstance(key, bytes | bytearray | memoryview):
        return bytes(key)
    raise InvalidArgumentError(f"a record key must be bytes, not {type(key).__name__}")


def check_timestamp(timestamp: object) -> int:
    """The timestamp; InvalidArgumentError unless it is an int of milliseconds from 0 to
    2^63-1."""
    if type(timestamp) is not int:
        raise InvalidArgumentError(
            f"a record timestamp is an int of milliseconds since the epoch, not "
            f"{type(timestamp).__name__}"
        )
    if not 0 <= timestamp <= MAX_TIMESTAMP:
        raise InvalidArgumentError(f"a record timestamp must be 0 .. 2^63-1 ms, not {timestamp}")
    return timestamp


def check_headers(headers: object) -> Headers | None:
    """Headers as a tuple of (str, bytes) pairs (None when there are none);
    InvalidArgumentError for anything else."""
    if isinstance(headers, Mapping):
        items: Iterable[object] = headers.items()
    elif isinstance(headers, str | bytes | bytearray | memoryview) or not isinstance(
        headers, Iterable
    ):
        raise InvalidArgumentError(
            f"record headers are (name, value) pairs or a mapping, not {type(headers).__name__}"
        )
    else:
        items = headers
    pairs: list[tuple[str, bytes]] = []
    for item in items:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise InvalidArgumentError(f"a record header is a (name, value) pair, not {item!r}")
        name, value = item
        if not isinstance(name, str):
            raise InvalidArgumentError(f"a header name must be str, not {type(name).__name__}")
        try:
            size = len(name.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidArgumentError(f"header name {name!r} is not valid Unicode") from None
        if size > MAX_HEADER_NAME:
            raise InvalidArgumentError(f"header name {name[:40]!r}... is over 65535 bytes")
        if type(value) is not bytes:
            if not isinstance(value, bytes | bytearray | memoryview):
                hint = " (encode it)" if isinstance(value, str) else ""
                raise InvalidArgumentError(
                    f"header {name!r}: a value must be bytes, not {type(value).__name__}{hint}"
                )
            value = bytes(value)
        pairs.append((name, value))
    if len(pairs) > MAX_HEADERS:
        raise InvalidArgumentError(f"{len(pairs)} headers: at most {MAX_HEADERS} per record")
    return tuple(pairs) or None


def extras_of(key: object, headers: object, timestamp: object) -> Extras | None:
    """What an append was given besides the payload, checked (None: nothing)."""
    k = None if key is None else check_key(key)
    h = None if headers is None else check_headers(headers)
    t = None if timestamp is None else check_timestamp(timestamp)
    if k is None and h is None and t is None:
        return None
    return k, h, t


def _headers(value: object) -> Headers | None:
    return None if value is None else check_headers(value)


def _key(value: object) -> bytes | None:
    return None if value is None else check_key(value)


def _timestamp(value: object) -> int | None:
    return None if value is None else check_timestamp(value)


def _payload(value: object) -> bytes:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise InvalidArgumentError(f"a record must be bytes, not {type(value).__name__}")


@final
@attrs.frozen
class Record:
    """A record to append with its key, headers or timestamp:
    ``await writer.append_batch([walkit.Record(b"...", key=b"user-7"), b"plain"])``; on a
    typed log (``Log.open(..., schema=T)``), the value instead of the payload:
    ``walkit.Record(value=T(...), key=b"user-7")``.

    Checked when made (InvalidArgumentError); ``headers`` may be given as a mapping and are
    kept as a tuple of (name, value) pairs (None when empty). The value is checked by the
    typed writer it is given to.
    """

    payload: bytes = attrs.field(default=b"", converter=_payload)
    key: bytes | None = attrs.field(default=None, kw_only=True, converter=_key)
    headers: Headers | None = attrs.field(default=None, kw_only=True, converter=_headers)
    timestamp: int | None = attrs.field(default=None, kw_only=True, converter=_timestamp)
    #: A typed log's value (None: the record is ``payload``).
    value: object = attrs.field(default=None, kw_only=True)

    @value.validator
    def _one_of(self, _attribute: attrs.Attribute[object], value: object) -> None:
        if value is not None and self.payload:
            raise InvalidArgumentError("a record has a payload or a value, not both")

    @property
    def extras(self) -> Extras | None:
        """(key, headers, timestamp), or None when the record has none of them."""
        if self.key is None and self.headers is None and self.timestamp is None:
            return None
        return self.key, self.headers, self.timestamp
