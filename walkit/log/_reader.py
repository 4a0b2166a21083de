"""The log reader: every record from a start position, in order, across ledgers; tails.

A reader reads a closed ledger to its end and an open one up to its LAC, then:

- when its ledger is closed, it moves to the next listed ledger (the first with a higher
  sequence number), waiting on a watch of the log's node until one is listed;
- when its ledger is open, it long-polls (``wait_for_entry``) for the next entry.

A roll lists the new ledger before closing the old one, and a takeover recovers (closes) the
last two ledgers before listing its own, so a reader never skips a record and never needs more
than "closed, and a later one exists". Ledgers that vanish under a reader (truncated, or
dropped as empty) send it back to the log's node: it starts again at the first listed ledger at
or after its position, and never before the truncation point.

A writer that dies in the middle of a roll lists the next ledger but never closes the old one,
whose last acknowledged entries then lie beyond the LAC the bookies know. A reader that sees a
later ledger listed while its own makes no progress for ``stalled_ledger_timeout`` seconds
recovers the ledger itself (fences and closes it, as a takeover would) and reads it to its true
end (the decision: :func:`walkit._core.log_tail.check_tail`).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import AsyncIterator
from itertools import repeat
from typing import TYPE_CHECKING, Final, Generic, final

import anyio

from walkit._core.backoff import Backoff
from walkit._core.lake import LakeLedger
from walkit._core.log_metadata import LogLedger, LogMetadata
from walkit._core.log_position import LogPosition
from walkit._core.log_tail import TailAction, check_tail
from walkit._core.record import Headers
from walkit._core.record_set import ProducerTag, entry_records, uses_record_sets
from walkit._core.types import Entry
from walkit._logging import get_logger
from walkit._retry import pause
from walkit.errors import (
    ClientClosedError,
    LedgerClosedError,
    LogTruncatedError,
    NoSuchEntryError,
    NoSuchLedgerError,
    WalkitError,
)
from walkit.ledger import LedgerReader
from walkit.log._store import fetch_log, log_path
from walkit.log._values import RecordValues, V
from walkit.metadata import WatchEvent

if TYPE_CHECKING:
    from walkit.lake._read import LakeCursor
    from walkit.log._context import LogContext

log = get_logger(__name__)

__all__ = ["LogReader", "LogRecord", "latest_position"]

#: Seconds one ``wait_for_entry`` round waits before the reader looks at the log again.
TAIL_ROUND: Final = 5.0
#: Buffered records a reader returns between two checkpoints.
CHECKPOINT_EVERY: Final = 64
#: Bytes of entries one range read aims at (with ``read_batch`` entries at most).
RANGE_BYTES: Final = 4 * 1024 * 1024
#: Transient read failures (all replicas unavailable ...) retried before raising.
READ_RETRIES: Final = 5
#: Pauses between tries of a failed read.
READ_BACKOFF: Final = Backoff(first=0.1, cap=2.0)


_Fields = tuple[
    int,
    int,
    int,
    bytes,
    "ProducerTag | None",
    "bytes | None",
    "Headers | None",
    "int | None",
    "RecordValues | None",
]


@final
class LogRecord(_Fields, Generic[V]):
    """One record: its ``position`` and ``payload``, its ``producer`` tag (when it was
    appended by an idempotent producer), its ``key``, ``headers`` and ``timestamp`` (ms since
    the epoch), each None when the record has none; its ``value`` (a typed log's ``T``, else
    the payload) and ``schema_version``. Immutable, hashable, equal when all fields are (a
    typed record holds how to decode its value, not the value).

    A tuple underneath, so that a reader makes one small object per record (a reader's cost
    per record is mostly object creation); ``position`` is built when asked for, and ``value``
    decoded when asked for.
    """

    __slots__ = ()

    def __new__(
        cls,
        position: LogPosition,
        payload: bytes,
        producer: ProducerTag | None = None,
        *,
        key: bytes | None = None,
        headers: Headers | None = None,
        timestamp: int | None = None,
    ) -> LogRecord[bytes]:
        return _new_record(  # type: ignore[return-value]  # (made without a schema: bytes)
            cls,
            (
                position.ledger_seq,
                position.entry_id,
                position.slot,
                payload,
                producer,
                key,
                headers,
                timestamp,
                None,
            ),
        )

    @property
    def position(self) -> LogPosition:
        return LogPosition._of(self[0], self[1], self[2])

    @property
    def payload(self) -> bytes:
        return self[3]

    @property
    def producer(self) -> ProducerTag | None:
        return self[4]

    @property
    def key(self) -> bytes | None:
        return self[5]

    @property
    def headers(self) -> Headers | None:
        """(name, value) pairs, in the order they were given (None: none)."""
        return self[6]

    @property
    def timestamp(self) -> int | None:
        """Milliseconds since the epoch: given to the append, or the writer's clock when it
        sent the record (None: neither; see ``docs/log.md``)."""
        return self[7]

    @property
    def value(self) -> V:
        """The record's value: a ``T`` decoded from the payload for a reader of a log opened
        with ``schema=T`` (each time it is asked for), the payload otherwise. SchemaError
        (with the position) when the payload does not decode as ``T``, was written with a
        version the log's metadata lacks, or without a schema."""
        values = self[8]
        if values is None:
            return self[3]  # type: ignore[return-value]  # (an untyped log's V is bytes)
        found: V = values.value(self)
        return found

    @property
    def schema_version(self) -> int | None:
        """The version of the log's schema the record was written with (None: none)."""
        values = self[8]
        return None if values is None or not values.version else values.version

    def __repr__(self) -> str:
        extra = "".join(
            f", {name}={value!r}"
            for name, value in (("key", self[5]), ("headers", self[6]), ("timestamp", self[7]))
            if value is not None
        )
        return (
            f"LogRecord(position={self.position!r}, payload={self.payload!r}, "
            f"producer={self.producer!r}{extra}"
            f"{'' if self[8] is None else f', schema_version={self.schema_version!r}'})"
        )


_new_record = tuple.__new__
_make_record = functools.partial(_new_record, LogRecord)


@final
class LogReader(Generic[V]):
    """Async iterator over a log's records (from :meth:`walkit.Log.reader`).

    ``async for rec in reader`` yields :class:`LogRecord` in position order; with
    ``follow=True`` it waits for new records forever (cancel it, or ``break``), otherwise it
    stops at the end of what is readable now. ``end`` (exclusive) stops it there in any case.
    Records before the log's truncation point are skipped (the reader goes on at the point),
    or with ``skip_truncated=False`` raise LogTruncatedError: for readers that must not miss
    a record, such as a replica rebuilding its state.
    """

    def __init__(
        self,
        owner: LogContext,
        start: LogPosition,
        end: LogPosition | None,
        *,
        follow: bool,
        skip_truncated: bool = True,
    ) -> None:
        self._log = owner
        self._skip_truncated = skip_truncated
        self._start = start
        self._end = end
        #: ``end`` as a tuple, to compare with a record's first three fields (its position).
        self._end_key = None if end is None else (end.ledger_seq, end.entry_id, end.slot)
        self._follow = follow
        #: The position of the next record to return (before the first call: the start asked).
        self._pos = start
        self._resolved = False
        self._ledger: LogLedger | None = None
        self._reader: LedgerReader | None = None
        #: How the records of the ledger being read give their value (None: the payload).
        self._values: RecordValues | None = None
        #: Reading an offloaded ledger from the lake (``walkit.lake``) instead of the bookies.
        self._lake: LakeCursor | None = None
        self._lake_record: LakeLedger | None = None
        self._buffer: collections.deque[LogRecord[V]] = collections.deque()
        #: Ranges being read ahead, in order (see :class:`_ReadAhead`).
        self._ahead: collections.deque[_ReadAhead] = collections.deque()
        #: Entries per range read, from the sizes seen so far (RANGE_BYTES, read_batch).
        self._range_entries = owner.options.read_batch
        self._since_checkpoint = 0
        #: When a later ledger was first seen listed while this one made no progress.
        self._later_seen_at: float | None = None
        #: Entries read and the records they held (for lag_records' average).
        self._entries_read = 0
        self._records_read = 0

    def __repr__(self) -> str:
        return f"LogReader(log={self._log.name!r}, position={self._pos})"

    @property
    def position(self) -> LogPosition:
        """Where the next record will be looked for (every earlier record was returned or lies
        before the start)."""
        return self._buffer[0].position if self._buffer else self._pos

    def lag_records(self) -> int:
        """Records known to be readable and not handed out yet: those fetched, and the
        confirmed entries of its ledger not fetched yet, at the average records per entry
        seen so far (what the client's reader-lag metric reports)."""
        buffered = len(self._buffer)
        reader = self._reader
        if reader is None:
            return buffered
        unread = reader.last_add_confirmed - self._pos.entry_id + 1
        if unread <= 0:
            return buffered
        entries = self._entries_read
        return buffered + (unread * self._records_read // entries if entries else unread)

    def __aiter__(self) -> LogReader[V]:
        return self

    async def aclose(self) -> None:
        """Stop reading: drop the ledger being read and its reads ahead (the iterator then
        ends). Idempotent; ``async with log.reader(...) as reader:`` calls it at the end."""
        reader = self._reader
        self._drop_ledger()
        pos = self._pos
        self._end, self._end_key = pos, (pos.ledger_seq, pos.entry_id, pos.slot)
        self._buffer.clear()
        if reader is not None:
            await reader.aclose()
        else:
            await anyio.lowlevel.checkpoint()

    async def __aenter__(self) -> LogReader[V]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def __anext__(self) -> LogRecord[V]:
        record = self._buffered()
        if record is None:
            record = await self._next()
            if record is None:
                raise StopAsyncIteration
        else:
            await self._checkpoint_now_and_then()
        return record

    async def next(self, *, timeout: float | None = None) -> LogRecord[V] | None:
        """The next record; None at ``end``, when not following and nothing more is readable
        now, or after ``timeout`` seconds without a record."""
        record = self._buffered()
        if record is not None:
            await self._checkpoint_now_and_then()
            return record
        if timeout is None:
            return await self._next()
        with anyio.move_on_after(timeout):
            return await self._next()
        return None

    def _buffered(self) -> LogRecord[V] | None:
        """The next record if it is buffered and before ``end`` (the hot path: most records
        come from an entry already read)."""
        buffer = self._buffer
        if not buffer:
            return None
        record = buffer[0]
        end = self._end_key
        if end is not None and record[:3] >= end:
            return None
        buffer.popleft()
        return record

    async def _checkpoint_now_and_then(self) -> None:
        """A checkpoint every CHECKPOINT_EVERY buffered records: other tasks (heartbeats,
        acknowledgements) run while a reader drains a big buffer, at a fraction of the cost of
        one per record."""
        self._since_checkpoint += 1
        if self._since_checkpoint >= CHECKPOINT_EVERY:
            self._since_checkpoint = 0
            await anyio.lowlevel.checkpoint()

    async def _next(self) -> LogRecord[V] | None:
        failures = 0
        while True:
            if self._buffer:
                record = self._buffer[0]
                if self._end_key is not None and record[:3] >= self._end_key:
                    return None
                self._buffer.popleft()
                return record
            if self._end is not None and self._pos >= self._end:
                await anyio.lowlevel.checkpoint()
                return None
            try:
                more = await self._step()
            except LogTruncatedError:
                raise
            except (NoSuchLedgerError, NoSuchEntryError):
                # Fine if the ledger left the log (truncated, or dropped as empty): look again.
                ledger = self._ledger
                self._drop_ledger()
                md = await self._read_metadata()
                listed = ledger is not None and md.ledger_with_seq(ledger.seq) == ledger
                offloaded = ledger is not None and md.lake_ledger(ledger.ledger_id) is not None
                if listed and not offloaded and self._pos >= md.truncated:
                    raise
                continue
            except WalkitError as exc:
                failures += 1
                if not exc.retryable or failures > READ_RETRIES:
                    raise
                log.info("log_read_retry", log=self._log.name, error=str(exc))
                self._drop_ledger()
                await pause(READ_BACKOFF, failures - 1, self._log._services.context.rng)
                continue
            failures = 0
            if not more:
                return None

    # --- steps -----------------------------------------------------------------------------

    async def _step(self) -> bool:
        """Fill the buffer or make progress; False when not following and nothing more is
        readable now."""
        if self._lake is not None:
            return await self._lake_step()
        if self._reader is None:
            return await self._locate()
        reader, ledger = self._reader, self._ledger
        assert ledger is not None
        entry_id = self._pos.entry_id
        lac = reader.last_add_confirmed
        if entry_id <= lac:
            entries = await self._read_range(reader, entry_id, lac)
            for got in entries:
                self._add_entry(ledger, reader, got)
            self._pos = LogPosition(ledger.seq, entries[-1].entry_id + 1)
            self._later_seen_at = None
            return True
        if reader.is_closed:
            self._move_past(ledger)
            return True
        if not self._follow:
            # Caught up with an open ledger: look once more (a fresh LAC and metadata).
            await self._reopen(ledger)
            assert self._reader is not None
            return self._reader.is_closed or self._reader.last_add_confirmed >= entry_id
        return await self._tail(reader, ledger, entry_id)

    async def _read_range(self, reader: LedgerReader, first: int, lac: int) -> list[Entry]:
        """The next range of entries from ``first`` (up to ``lac``): the range read ahead if
        there is one, else read now; then more ranges are started ahead (``read_ahead``), so
        that the bookies send the next ones while the caller hands these out."""
        ahead = self._ahead
        entries: list[Entry] | None = None
        if ahead and ahead[0].reader is reader and ahead[0].first == first:
            head = ahead.popleft()
            await head.done.wait()
            if head.error is not None:
                ahead.clear()
                raise head.error
            entries = head.entries
        if entries is None:
            ahead.clear()  # another ledger, reader or place: what was read ahead is not it
            last = min(lac, first + self._range_entries - 1)
            entries = await reader.read(first, last)
        size = sum(len(entry.payload) for entry in entries)
        self._range_entries = max(
            1, min(self._log.options.read_batch, RANGE_BYTES * len(entries) // max(size, 1))
        )
        self._start_reads_ahead(reader, entries[-1].entry_id + 1)
        return entries

    def _start_reads_ahead(self, reader: LedgerReader, first: int) -> None:
        ahead = self._ahead
        if ahead:
            first = ahead[-1].last + 1
        lac = reader.last_add_confirmed
        tasks = self._log._services.context.task_group
        while len(ahead) < self._log.options.read_ahead and first <= lac:
            last = min(lac, first + self._range_entries - 1)
            read = _ReadAhead(reader, first, last)
            try:
                tasks.start_soon(read.run)
            except RuntimeError:  # the client is closing
                return
            ahead.append(read)
            first = last + 1

    async def _tail(self, reader: LedgerReader, ledger: LogLedger, entry_id: int) -> bool:
        """Wait for ``entry_id`` of an open ledger, or for the ledger to end before it.

        ``wait_for_entry`` watches the ledger's metadata (armed before a fresh read), so a close
        by a roll or a takeover is seen at once and the reader's metadata is current after it.
        """
        try:
            entry = await reader.wait_for_entry(entry_id, timeout=self._tail_round())
        except LedgerClosedError:
            return True  # it ended before that entry: the next step moves on
        if entry is not None:
            self._later_seen_at = None
            self._add_entry(ledger, reader, entry)
            self._pos = LogPosition(ledger.seq, entry.entry_id + 1)
            return True
        # A quiet spell: is the ledger still the log's (truncation), or stalled behind a later
        # one (its writer died in the middle of a roll)?
        await self._check_stalled(ledger)
        return True

    def _add_entry(self, ledger: LogLedger, reader: LedgerReader, entry: Entry) -> None:
        """Buffer the records of one entry, from the slot the position names."""
        record_set = entry_records(entry.payload, uses_record_sets(reader.metadata.custom_metadata))
        pos = self._pos
        first = pos.slot if pos.ledger_seq == ledger.seq and pos.entry_id == entry.entry_id else 0
        records = record_set.records
        tags = record_set.producers
        self._entries_read += 1
        self._records_read += len(records)
        keys = record_set.keys
        headers = record_set.headers
        times = record_set.timestamps
        # One record tuple per record, made in C: (seq, entry id, slot, payload, producer,
        # key, headers, timestamp, values).
        self._buffer.extend(
            map(
                _make_record,
                zip(
                    repeat(ledger.seq),
                    repeat(entry.entry_id),
                    range(first, len(records)),
                    records[first:] if first else records,
                    repeat(None) if tags is None else tags[first:],
                    repeat(None) if keys is None else keys[first:],
                    repeat(None) if headers is None else headers[first:],
                    repeat(record_set.timestamp) if times is None else times[first:],
                    repeat(self._values),
                ),
            )
        )

    # --- stalled ledgers (walkit._core.log_tail) ---------------------------------------------

    def _tail_round(self) -> float:
        timeout = self._log.options.stalled_ledger_timeout
        return TAIL_ROUND if timeout is None else min(TAIL_ROUND, max(timeout / 2, 0.01))

    async def _check_stalled(self, ledger: LogLedger) -> None:
        log_md = await self._read_metadata()
        check = check_tail(
            now=anyio.current_time(),
            still_listed=log_md.ledger_with_seq(ledger.seq) == ledger,
            later_listed=log_md.ledger_at_or_after(ledger.seq + 1) is not None,
            later_seen_at=self._later_seen_at,
            stalled_timeout=self._log.options.stalled_ledger_timeout,
        )
        self._later_seen_at = check.later_seen_at
        if check.action is TailAction.RELOCATE:
            self._drop_ledger()
        elif check.action is TailAction.RECOVER:
            log.warning(
                "log_reader_recovers_stalled_ledger",
                log=self._log.name,
                ledger_id=ledger.ledger_id,
                position=str(self._pos),
            )
            self._reader = await self._log.client.open_ledger(
                ledger.ledger_id, password=self._log.options.password, recovery=True
            )
            self._later_seen_at = None

    async def _reopen(self, ledger: LogLedger) -> None:
        self._reader = await self._log.client.open_ledger(
            ledger.ledger_id, password=self._log.options.password
        )

    async def _locate(self) -> bool:
        """Open the ledger holding the position (or the next one); False when there is none
        yet and the reader does not follow."""
        events = None
        store = self._log._services.context.store
        if self._follow:
            events = store.watch(log_path(self._log.name))
        try:
            while True:
                md = await self._read_metadata()
                if not self._resolved:
                    await self._resolve(md)
                if self._pos < md.truncated:
                    if not self._skip_truncated:
                        raise LogTruncatedError(
                            f"log {self._log.name} is truncated at {md.truncated}: the records "
                            f"from {self._pos} up to it are gone"
                        )
                    self._pos = md.truncated
                ledger = md.ledger_at_or_after(self._pos.ledger_seq)
                if ledger is not None:
                    if ledger.seq > self._pos.ledger_seq:
                        self._pos = LogPosition(ledger.seq, 0)
                    self._values = self._log._record_values(md, ledger)
                    lake = md.lake_ledger(ledger.ledger_id)
                    if lake is not None:
                        self._open_lake(ledger, lake)
                        return True
                    try:
                        self._reader = await self._log.client.open_ledger(
                            ledger.ledger_id, password=self._log.options.password
                        )
                    except NoSuchLedgerError:
                        continue  # removed since we read the list: read it again
                    self._ledger = ledger
                    return True
                if events is None:
                    return False
                async for _event in events:  # wait for a new ledger to be listed
                    break
                else:
                    raise ClientClosedError(f"log {self._log.name}: the metadata watch ended")
        finally:
            if events is not None:
                with anyio.CancelScope(shield=True):
                    await _close_watch(events)

    async def _resolve(self, md: LogMetadata) -> None:
        """Turn LATEST into the position after the last readable record."""
        self._resolved = True
        if self._pos == LogPosition.LATEST:
            self._pos = await latest_position(self._log, md)

    async def _read_metadata(self) -> LogMetadata:
        context = self._log._services.context
        md, _version = await fetch_log(context, self._log.name)
        return md

    # --- offloaded ledgers (walkit.lake) ---------------------------------------------------

    def _open_lake(self, ledger: LogLedger, lake: LakeLedger) -> None:
        from walkit.lake._read import LakeCursor, lake_io_of
        from walkit.lake._table import lake_of

        opts = self._log.options
        here = lake_of(self._log.name, opts.offload_to, opts.offload_catalog)
        io = lake_io_of(here, lake.files[0]) if lake.files else None
        tasks = self._log._services.context.task_group
        self._ledger = ledger
        metrics = self._log._services.context.metrics
        observe = None
        if metrics is not None:
            stats = metrics.lake(self._log.name)

            def observe(seconds: float, size: int) -> None:
                stats.reads.observe(seconds, 1, size)

        self._lake_record = lake
        self._lake = LakeCursor(io, lake, ledger.seq, self._pos, tasks.start_soon, observe)

    async def _lake_step(self) -> bool:
        cursor, ledger = self._lake, self._ledger
        assert cursor is not None and ledger is not None
        try:
            batch = await cursor.next_batch(self._values)
        except Exception as exc:
            found = self._lake_error(exc, ledger)
            if found is exc:
                raise
            raise found from None
        if batch is None:
            self._move_past(ledger)
            return True
        self._buffer.extend(map(_make_record, batch.rows))
        self._pos = LogPosition(ledger.seq, batch.last_entry_id, batch.last_slot + 1)
        return True

    def _lake_error(self, exc: Exception, ledger: LogLedger) -> BaseException:
        """A failed read of an offloaded ledger as a walkit error naming the log, the
        ledger and its file (``walkit.lake._errors``)."""
        from walkit.lake._errors import lake_error

        opts = self._log.options
        md_lake = self._lake_record
        files = md_lake.files if md_lake is not None else ()
        return lake_error(
            exc,
            log=self._log.name,
            action="reading",
            ledger_id=ledger.ledger_id,
            file=", ".join(files) if files else None,
            reading=True,
            properties=opts.offload_catalog,
        )

    def _move_past(self, ledger: LogLedger) -> None:
        self._pos = LogPosition(ledger.seq + 1, 0)
        self._drop_ledger()

    def _drop_ledger(self) -> None:
        self._lake = None
        self._values = None
        self._ahead.clear()
        self._reader = None
        self._ledger = None
        self._later_seen_at = None


async def latest_position(owner: LogContext, md: LogMetadata) -> LogPosition:
    """The position just after the last record readable now (what LATEST means to a reader
    that starts)."""
    last = md.last
    if last is None:
        return LogPosition(md.next_seq, 0)
    try:
        reader = await owner.client.open_ledger(last.ledger_id, password=owner.options.password)
    except NoSuchLedgerError:
        return LogPosition(md.next_seq, 0)
    return LogPosition(last.seq, reader.last_add_confirmed + 1)


@final
class _ReadAhead:
    """Entries ``first..last`` of a ledger, read in the background (in the client's task group)
    while the log reader hands out earlier ones. A reader that drops it (it moved elsewhere,
    or was abandoned) leaves the read to finish and its entries to the garbage collector."""

    __slots__ = ("done", "entries", "error", "first", "last", "reader")

    def __init__(self, reader: LedgerReader, first: int, last: int) -> None:
        self.reader = reader
        self.first = first
        self.last = last
        self.done = anyio.Event()
        self.entries: list[Entry] | None = None
        self.error: WalkitError | None = None

    async def run(self) -> None:
        try:
            self.entries = await self.reader.read(self.first, self.last)
        except WalkitError as exc:
            self.error = exc
        finally:  # (cancelled with the client: neither is set, the reader reads it itself)
            self.done.set()


async def _close_watch(events: AsyncIterator[WatchEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        try:
            await aclose()
        except WalkitError:
            pass
