"""Adaptive batching of log records into record sets (one ledger entry each).

Records join the newest unsent record set in call order. A record set is sent when it is full
(``batch_bytes``), or at once when the writer has no record set in flight: a lone append is
sent immediately (latency of one entry), and under load the records that arrive during one
round trip share the next entry (Nagle without a timer, as DistributedLog and Pulsar batch).
Nothing ever waits on a timer while the ledger is idle.

The ledger writer wakes a record set (``set()``) when its entry is acknowledged or the ledger
fails; that also sends the next one, from the task that saw the acknowledgement. When the
acknowledged entry woke several tasks, they are about to append again: the next record set is
then held until each of them has (the last one sends it), or for one scheduling round at most
(no timer), so that their records join it, instead of the first one going alone and the others
waiting a whole round trip.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any, Final, final

from walkit._core.log_position import LogPosition
from walkit._core.record import Extras
from walkit._core.record_set import (
    EXTRAS_PER_RECORD,
    Codec,
    ProducerTag,
    encode_record_set,
    envelope_overhead,
    extras_size,
)
from walkit._core.time_search import TimeRange, entry_time_range, widen
from walkit._loop import EventLoop, current_loop
from walkit.errors import WalkitError
from walkit.ledger import LedgerWriter

__all__ = ["RecordBatch", "RecordBatcher"]

#: Per-record envelope bytes (its length), counted against the size bound.
_PER_RECORD: Final = 4


@final
class RecordBatch:
    """Records that share one entry; the tasks waiting for them are woken once the entry is
    acknowledged or failed."""

    __slots__ = (
        "_settled", "_waiters", "acked", "batcher", "entry_id", "error", "extras", "lw",
        "records", "seq", "size", "tags", "time_range",
    )  # fmt: skip

    def __init__(self, batcher: RecordBatcher) -> None:
        self.batcher = batcher
        self.records: list[bytes] = []
        self.tags: list[ProducerTag | None] | None = None
        #: Each record's (key, headers, timestamp), or None: only once a record has one.
        self.extras: list[Extras | None] | None = None
        #: The timestamps of its records, once sent (None: none has one).
        self.time_range: TimeRange | None = None
        self.size = batcher.empty_size
        #: Whether the outcome is known; the tasks parked until it is.
        self._settled = False
        self._waiters: list[Any] = []
        self.seq = 0
        self.entry_id = -1
        self.lw: LedgerWriter | None = None
        self.error: WalkitError | None = None
        #: The entry was acknowledged (known when the waiters wake).
        self.acked = False

    def add(self, record: bytes, tag: ProducerTag | None, extras: Extras | None = None) -> int:
        slot = len(self.records)
        self.records.append(record)
        self.size += len(record) + _PER_RECORD
        if tag is not None:
            if self.tags is None:
                self.tags = [None] * slot
            self.tags.append(tag)
        elif self.tags is not None:
            self.tags.append(None)
        if extras is not None:
            if self.extras is None:
                self.extras = [None] * slot
            self.extras.append(extras)
            self.size += extras_size(extras) + EXTRAS_PER_RECORD
        elif self.extras is not None:
            self.extras.append(None)
        return slot

    def set(self) -> None:
        """The ledger writer's wake-up: the entry was acknowledged, or the ledger failed."""
        self.batcher._entry_done(self, self._settle())

    def _settle(self) -> int:
        """Wake the waiting tasks; how many there were."""
        self._settled = True
        waiters, self._waiters = self._waiters, []
        wake = self.batcher.loop.wake
        for handle in waiters:
            wake(handle)
        return len(waiters)

    async def settled(self) -> None:
        """Wait for the outcome (acknowledged or failed), raising nothing."""
        with contextlib.suppress(WalkitError):
            await self.wait()

    def position(self, slot: int) -> LogPosition:
        return LogPosition._of(self.seq, self.entry_id, slot)

    async def wait(self) -> None:
        """Wait for the outcome; raises the ledger's error if the entry was not acknowledged."""
        # (an Event's wait, inlined: one object and coroutine fewer per append)
        loop = self.batcher.loop
        if self._settled:
            await loop.checkpoint()
        else:
            await loop.park(self._waiters)
        if self.acked:
            return
        if self.error is not None:
            raise type(self.error)(*self.error.args)  # one object per raising task
        assert self.lw is not None
        self.lw.check_acknowledged(self.entry_id)


@final
class RecordBatcher:
    """The queue of record sets of one log writer (see the module docs).

    ``current`` gives the ledger to send to and its sequence number at the moment a record set
    is sent (a roll switches it; record sets not sent yet go to the new ledger). ``clock_ms``
    (None: no clock) stamps each record set when it is sent: the timestamp of its records that
    were given none; never earlier than the one before.
    """

    def __init__(
        self,
        current: Callable[[], tuple[int, LedgerWriter]],
        *,
        loop: EventLoop | None = None,
        batch_bytes: int,
        codec: Codec,
        spawn: Callable[[Callable[[], Coroutine[Any, Any, None]]], bool] | None = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self._current = current
        self._clock_ms = clock_ms
        #: The timestamp of the last record set sent (they never go back).
        self._last_stamp = 0
        #: What an empty record set counts against ``batch_bytes``.
        self.empty_size = envelope_overhead(0) + (8 if clock_ms is not None else 0)
        self.loop = loop if loop is not None else current_loop()
        #: Starts a background task (False when it cannot): the releaser, which ends holds.
        self._spawn = spawn
        #: The open record set waits for the tasks an acknowledgement woke (see the module).
        self._holding = False
        #: Appends still expected from the tasks the hold waits for; which hold it is.
        self._awaited = 0
        self._hold = 0
        #: The releaser: started at the first hold, parked between holds (a task started per
        #: hold cost ~1 % of the writer's time at 64 appenders); whether it was started and has
        #: not ended; whether it must end.
        self._releaser: list[Any] = []
        self._releaser_started = False
        self._stopped = False
        self._limit = batch_bytes
        self._codec = codec
        #: Record sets not sent yet, oldest first; only the last one takes more records.
        self._queue: deque[RecordBatch] = deque()
        self._open: RecordBatch | None = None
        #: Record sets sent and not yet acknowledged or failed.
        self.in_flight = 0
        #: Told each record set's outcome, in log order (acknowledged or not).
        self.on_done: Callable[[RecordBatch, bool], None] | None = None
        #: Acknowledged records per ledger id (what a close records as ``walkit.records``).
        self.records_acked: dict[int, int] = {}
        #: The timestamps of the acknowledged records per ledger id (``walkit.timestamps``).
        self.time_ranges: dict[int, TimeRange] = {}

    def add(
        self, record: bytes, tag: ProducerTag | None = None, extras: Extras | None = None
    ) -> tuple[RecordBatch, int]:
        """Queue one record (call order is position order); returns its record set and slot.
        Call :meth:`pump` after adding."""
        batch = self._open
        size = len(record) + _PER_RECORD
        if extras is not None:
            size += extras_size(extras) + EXTRAS_PER_RECORD
        if batch is not None and batch.size + size > self._limit:
            self._open = batch = None  # full: it goes as it is
        if batch is None:
            batch = self._open = RecordBatch(self)
            self._queue.append(batch)
        slot = batch.add(record, tag, extras)
        if batch.size >= self._limit:
            self._open = None
        return batch, slot

    def flush(self) -> RecordBatch | None:
        """Send whatever is queued as soon as room allows (close, roll); returns the last
        record set, if any."""
        self._open = None
        self.pump()
        return self._queue[-1] if self._queue else None

    def pump(self) -> None:
        """Send the record sets that are due: the full ones while the ledger has room, and the
        one taking records when nothing is in flight."""
        queue = self._queue
        while queue:
            batch = queue[0]
            if batch is self._open and (self.in_flight or self._holding):
                return
            seq, lw = self._current()
            if not lw.has_room:
                return  # the next acknowledgement pumps again
            queue.popleft()
            if batch is self._open:
                self._open = None
            self._send(batch, seq, lw)

    def _stamp(self) -> int | None:
        """The timestamp of a record set sent now (None: no clock)."""
        if self._clock_ms is None:
            return None
        stamp = self._clock_ms()
        if stamp < self._last_stamp:
            stamp = self._last_stamp  # a clock stepped back: never before the last one
        self._last_stamp = stamp
        return stamp

    def _send(self, batch: RecordBatch, seq: int, lw: LedgerWriter) -> None:
        batch.seq, batch.lw = seq, lw
        stamp = self._stamp()
        if stamp is not None or batch.extras is not None:
            batch.time_range = entry_time_range(stamp, batch.extras)
        try:
            entry = encode_record_set(
                batch.records,
                producers=batch.tags,
                codec=self._codec,
                timestamp=stamp,
                extras=batch.extras,
            )
            batch.entry_id = lw.submit(entry, batch)
        except WalkitError as exc:
            self._failed(batch, exc)
            return
        self.in_flight += 1

    def _failed(self, batch: RecordBatch, error: WalkitError) -> None:
        batch.error = error
        batch._settle()
        if self.on_done is not None:
            self.on_done(batch, False)

    def added(self) -> None:
        """One caller's records are queued (an append or a batch): send what is due. The
        caller that was the last of the tasks a hold waits for ends the hold."""
        if self._holding:
            self._awaited -= 1
            if self._awaited <= 0:
                self._holding = False
        self.pump()

    def _entry_done(self, batch: RecordBatch, woken: int) -> None:
        self.in_flight -= 1
        lw = batch.lw
        acknowledged = lw is not None and lw.last_add_confirmed >= batch.entry_id
        if acknowledged:
            batch.acked = True  # (before its waiters run: set() wakes them, they run later)
            assert lw is not None
            self.records_acked[lw.id] = self.records_acked.get(lw.id, 0) + len(batch.records)
            if batch.time_range is not None:
                known = widen(self.time_ranges.get(lw.id), batch.time_range)
                if known is not None:
                    self.time_ranges[lw.id] = known
        if self.on_done is not None:
            self.on_done(batch, acknowledged)
        if acknowledged and woken > 1 and not self._holding and self._wake_releaser():
            # (full record sets still go at once)
            self._holding, self._hold, self._awaited = True, self._hold + 1, woken
        self.pump()

    def stop(self) -> None:
        """The writer is closed: its releaser task ends, and no hold starts again."""
        self._stopped = True
        self._holding = False
        self._wake_releaser()

    def _wake_releaser(self) -> bool:
        """Have the releaser look at the holds: False if there is none (no way to start it)."""
        if self._releaser:
            self.loop.wake(self._releaser.pop())
            return True
        if self._releaser_started:
            return True  # it looks at the holds before it parks again
        if self._stopped or self._spawn is None or not self._spawn(self._release):
            return False
        self._releaser_started = True
        return True

    async def _release(self) -> None:
        """The releaser: ends a hold one scheduling round after the woken tasks ran, if they
        did not all append again (then the last one ended it)."""
        try:
            rounds = 1
            while not self._stopped:
                hold = self._hold
                for _ in range(rounds):
                    await self.loop.checkpoint()
                if self._holding and self._hold == hold:
                    self._holding = False
                    self.pump()
                if self._holding:
                    # A hold that began while this task ran, maybe in this very round: two
                    # rounds, so that its woken tasks surely ran.
                    rounds = 2
                    continue
                rounds = 1
                await self.loop.park(self._releaser)
        finally:
            self._releaser.clear()
            self._releaser_started = False
            if self._holding and not self._stopped:  # (cancelled: the client is closing)
                self._holding = False
                self.pump()
