"""What a log writer takes as a record, checked before anything is queued.

A record is bytes (or a bytearray or memoryview, copied), or a :class:`walkit.Record` with a
key, headers or a timestamp. Each must fit one entry with the record set's envelope: a plain
record counts its payload (and the entry's timestamp, when the client stamps entries); one with
extras counts its key and headers too. With the log option ``trace_context``, the current
OpenTelemetry context joins every record's headers (:mod:`walkit.otel`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast, final

from walkit._core.record import Extras, Headers, Record
from walkit._core.record_set import extras_size
from walkit.errors import InvalidArgumentError

__all__ = ["RecordInput"]


@final
class RecordInput:
    """The checks of one writer's records (see the module docs)."""

    __slots__ = ("max_record", "max_with_extras", "trace")

    def __init__(self, max_record: int, max_with_extras: int, *, trace: bool) -> None:
        #: The largest plain record, and the largest record with its key and headers.
        self.max_record = max_record
        self.max_with_extras = max_with_extras
        #: Put the current trace context in every record's headers.
        self.trace = trace

    def record(self, payload: object) -> bytes:
        """``payload`` as bytes, checked (InvalidArgumentError: not bytes, or too big)."""
        if isinstance(payload, bytes):
            record = payload
        elif isinstance(payload, bytearray | memoryview):
            record = bytes(payload)
        else:
            raise InvalidArgumentError(f"a record must be bytes, not {type(payload).__name__}")
        if len(record) > self.max_record:
            raise InvalidArgumentError(
                f"record of {len(record)} bytes is larger than the maximum {self.max_record}"
            )
        return record

    def batch(
        self, payloads: Sequence[bytes | Record], trace: bool
    ) -> tuple[list[bytes], list[Extras | None] | None]:
        """The payloads of a batch, checked, and each one's extras (None: no record has any)."""
        limit = self.max_record
        items = payloads if isinstance(payloads, list) else list(payloads)
        if not trace and all(type(p) is bytes and len(p) <= limit for p in items):
            return cast("list[bytes]", items), None  # (all bytes: checked just above)
        context = self.trace_headers() if trace else None
        records: list[bytes] = []
        extras: list[Extras | None] = []
        for item in items:
            if isinstance(item, Record):
                if item.value is not None:
                    raise InvalidArgumentError(
                        "Record(value=...) is for a log opened with schema=T; this one takes "
                        "bytes payloads"
                    )
                record, ex = item.payload, item.extras
            else:
                record, ex = self.record(item), None
            if ex is not None or context is not None:
                ex = self.extras(record, ex, context)
            elif len(record) > limit:
                self.record(record)  # (raises: too big)
            records.append(record)
            extras.append(ex)
        return records, extras if any(ex is not None for ex in extras) else None

    def trace_headers(self) -> Headers | None:
        """The current trace context as headers, when the log carries it (else None)."""
        if not self.trace:
            return None
        from walkit.otel import current_headers

        return current_headers()

    def extras(
        self, record: bytes, extras: Extras | None, context: Headers | None
    ) -> Extras | None:
        """A record's extras with the trace ``context`` headers merged in; InvalidArgumentError
        if the record with its key and headers is too big for an entry."""
        if context is not None:
            from walkit.otel import merge

            key, headers, timestamp = extras or (None, None, None)
            extras = (key, merge(headers, context), timestamp)
        if extras is None:
            return None
        size = len(record) + extras_size(extras)
        if size > self.max_with_extras:
            raise InvalidArgumentError(
                f"record of {size} bytes with its key and headers is larger than the maximum "
                f"{self.max_with_extras}"
            )
        return extras
