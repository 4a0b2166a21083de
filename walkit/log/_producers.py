"""The log writer's idempotent producers: what is durable, what is in flight, and the tail scan.

A new writer learns the producers from the tail it recovered at takeover (the last two ledgers
before its own), on the first tagged append: records of a producer older than that tail are
not looked at, so a retry is recognised as long as its first copy is in that tail or was
written by this writer (retries come seconds after a failure, ledgers roll every 64 MiB).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, final

import anyio

from walkit._core.log_position import LogPosition
from walkit._core.producers import MAX_SEQUENCE, ProducerTable
from walkit._core.record_set import MAX_PRODUCER_ID, ProducerTag
from walkit._logging import get_logger
from walkit.errors import DuplicateRecordError, InvalidArgumentError
from walkit.log._batches import RecordBatch

if TYPE_CHECKING:
    from walkit.log._reader import LogReader

log = get_logger(__name__)

__all__ = ["ProducerState", "producer_tag"]


def producer_tag(producer_id: object, sequence: object) -> ProducerTag | None:
    """The tag of an append (None without a producer); InvalidArgumentError for bad values."""
    if producer_id is None and sequence is None:
        return None
    if producer_id is None or sequence is None:
        raise InvalidArgumentError("give both producer_id and sequence, or neither")
    if not isinstance(producer_id, str) or not producer_id:
        raise InvalidArgumentError(f"producer_id must be a non-empty str, not {producer_id!r}")
    if len(producer_id.encode()) > MAX_PRODUCER_ID:
        raise InvalidArgumentError(f"producer_id is longer than {MAX_PRODUCER_ID} bytes")
    if isinstance(sequence, bool) or not isinstance(sequence, int):
        raise InvalidArgumentError(f"sequence must be an int, not {sequence!r}")
    if not 0 <= sequence <= MAX_SEQUENCE:
        raise InvalidArgumentError(f"sequence {sequence} is outside 0 .. 2^64-1")
    return ProducerTag(producer_id, sequence)


@final
class ProducerState:
    """Producers of one log writer."""

    def __init__(self, log_name: str, scan: Callable[[], LogReader] | None) -> None:
        self._log_name = log_name
        #: Reads the recovered tail (None: nothing to learn, a fresh log).
        self._scan = scan
        self._ready = scan is None
        self._lock = anyio.Lock()
        self.table = ProducerTable()
        #: Per producer: the highest sequence number sent and not yet durable, and its set.
        self._in_flight: dict[str, tuple[int, RecordBatch]] = {}

    async def ready(self) -> None:
        """Learn the recovered tail's producers (once, at the first tagged append)."""
        if not self._ready:
            await self._learn_tail()

    def check(self, tag: ProducerTag) -> RecordBatch | None:
        """Raise DuplicateRecordError if ``tag`` is durable already; return the record set to
        wait for if an earlier copy may be in flight (then check again); None: append it."""
        duplicate, position = self.table.duplicate_of(tag.producer_id, tag.sequence)
        if duplicate:
            raise self._duplicate(tag, position)
        return self.in_flight(tag)

    def in_flight(self, tag: ProducerTag) -> RecordBatch | None:
        """The record set to wait for if a copy of ``tag``'s sequence number, or of a later one
        of its producer, may be in flight; None if none may be."""
        sent = self._in_flight.get(tag.producer_id)
        if sent is not None and tag.sequence <= sent[0]:
            return sent[1]
        return None

    def durable_prefix(self, tags: Sequence[ProducerTag]) -> list[LogPosition]:
        """The first copies' positions of the leading ``tags`` already durable (a batch retried
        after an unknown outcome; ask once none of them is in flight). DuplicateRecordError if
        one of them is durable but older than the positions remembered."""
        positions: list[LogPosition] = []
        table = self.table
        for tag in tags:
            duplicate, position = table.duplicate_of(tag.producer_id, tag.sequence)
            if not duplicate:
                break
            if position is None:
                raise self._duplicate(tag, None)
            positions.append(position)
        return positions

    def _duplicate(self, tag: ProducerTag, position: LogPosition | None) -> DuplicateRecordError:
        return DuplicateRecordError(
            f"log {self._log_name}: producer {tag.producer_id!r} sequence {tag.sequence} "
            f"is already in the log"
            + (f" at {position}" if position is not None else " (an older record)"),
            position=position,
        )

    def sent(self, tag: ProducerTag, batch: RecordBatch) -> None:
        self._in_flight[tag.producer_id] = (tag.sequence, batch)

    def done(self, batch: RecordBatch, acknowledged: bool) -> None:
        """A record set's outcome (in log order): its tagged records become durable."""
        tags = batch.tags
        if tags is None:
            return
        for slot, tag in enumerate(tags):
            if tag is None:
                continue
            if acknowledged:
                self.table.durable(tag.producer_id, tag.sequence, batch.position(slot))
            sent = self._in_flight.get(tag.producer_id)
            if sent is not None and sent[1] is batch:
                del self._in_flight[tag.producer_id]

    async def _learn_tail(self) -> None:
        async with self._lock:
            if self._ready or self._scan is None:
                return
            records = 0
            async for record in self._scan():
                tag = record.producer
                if tag is not None:
                    self.table.durable(tag.producer_id, tag.sequence, record.position)
                    records += 1
            self._ready = True
            log.info(
                "log_producers_learned",
                log=self._log_name,
                producers=len(self.table),
                tagged_records=records,
            )


def tail_start(seqs: list[int]) -> LogPosition | None:
    """Where the scan of a recovered tail starts (None: nothing recovered)."""
    return LogPosition(min(seqs), 0) if seqs else None
