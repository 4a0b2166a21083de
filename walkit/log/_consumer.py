"""``log.consumer(name)``: a durable named reader (Pulsar's managed cursor, DistributedLog's
subscription). Its position lives in the metadata store (``walkit.log._consumers``): it reads
from there, ``commit(position)`` moves it forward with a compare-and-set, and retention keeps
what it has not committed (within the log's backlog quota).

It reads with ``skip_truncated=False``: records it had not committed that are gone (retention
released it, or the writer truncated past it) raise ConsumerBackloggedError instead of being
skipped; ``skip_lost()`` accepts the loss and goes on at the log's first record.
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Generic, final

import anyio

from walkit._core.consumers import ConsumerState, DeliveryCount, check_consumer_name, resume_after
from walkit._core.log_position import LogPosition, position
from walkit._logging import get_logger
from walkit.errors import ConsumerBackloggedError, InvalidArgumentError, LogTruncatedError
from walkit.log._consumers import commit_consumer, create_consumer, touch_log, wall_ms
from walkit.log._reader import LogReader, LogRecord, latest_position
from walkit.log._store import fetch_log
from walkit.log._values import V

if TYPE_CHECKING:
    from walkit.log._handle import LogHandle

log = get_logger(__name__)

__all__ = ["LogConsumer"]


@final
class LogConsumer(Generic[V]):
    """A durable named reader of a log (from :meth:`walkit.Log.consumer`).

    ``async for rec in consumer`` yields the records after its committed position (see
    :meth:`commit`), in order; with ``follow`` (default) it waits for new ones. The first use
    registers it (creates its node at ``start`` if it has none): ``await consumer.register()``
    or ``async with`` does it up front. Several consumers of one name (processes) share its
    position: each commit moves it forward, never back.
    """

    def __init__(
        self, owner: LogHandle, name: str, start: LogPosition, *, follow: bool = True
    ) -> None:
        self._log = owner
        self.name = check_consumer_name(name)
        self._start = start
        self._follow = follow
        self._state: ConsumerState | None = None
        self._reader: LogReader[V] | None = None
        self._lock = anyio.Lock()
        metrics = owner._services.context.metrics
        #: Records handed out and committed (for the commit-lag metric), when metrics are on.
        self._count = DeliveryCount() if metrics is not None else None
        if metrics is not None:
            metrics.track_consumer(owner.name, self.name, self)

    def __repr__(self) -> str:
        return f"LogConsumer(log={self._log.name!r}, name={self.name!r})"

    # --- position ----------------------------------------------------------------------------

    @property
    def committed(self) -> LogPosition | None:
        """Where the consumer resumes, as this object last stored or read it: every record
        before it is committed (None before registration)."""
        return None if self._state is None else self._state.position

    @property
    def position(self) -> LogPosition | None:
        """Where the next record will be looked for (None before registration)."""
        if self._reader is not None:
            return self._reader.position
        return self.committed

    @property
    def commit_lag(self) -> int:
        """Records handed out by this object and not committed yet (0 without metrics)."""
        return 0 if self._count is None else self._count.lag

    def reader_lag(self) -> int:
        """:meth:`LogReader.lag_records` of its reader (0 before it reads)."""
        return 0 if self._reader is None else self._reader.lag_records()

    # --- registration ------------------------------------------------------------------------

    async def register(self) -> LogPosition:
        """Create the consumer at ``start`` unless it exists; returns where it resumes. Once
        this returns, retention keeps every record from there (within the quota)."""
        if self._state is None:
            async with self._lock:
                if self._state is None:
                    self._state = await self._register()
        return self._state.position

    async def _register(self) -> ConsumerState:
        owner = self._log
        context = owner._services.context
        md, _version = await fetch_log(context, owner.name)
        start = self._start
        if start == LogPosition.LATEST:
            start = await latest_position(owner, md)
        else:
            md.check_not_future(start, "start a consumer at")
        now_ms = wall_ms(context)
        fresh = ConsumerState(self.name, max(start, md.truncated), now_ms, now_ms)
        state, created = await create_consumer(context, owner.name, fresh)
        # The log's version moves, then the truncation point is read: see _consumers.
        md = await touch_log(context, owner.name)
        if created and state.position < md.truncated:
            state = await commit_consumer(context, owner.name, self.name, md.truncated)
        return state

    # --- reading -----------------------------------------------------------------------------

    def __aiter__(self) -> LogConsumer[V]:
        return self

    async def __anext__(self) -> LogRecord[V]:
        record = await self.next()
        if record is None:
            raise StopAsyncIteration
        return record

    async def next(self, *, timeout: float | None = None) -> LogRecord[V] | None:
        """The next record; None when not following and nothing more is readable now, or after
        ``timeout`` seconds without a record. Raises ConsumerBackloggedError when records it
        had not committed are gone."""
        reader = self._reader
        if reader is None:
            reader = await self._open_reader()
        try:
            record = await reader.next(timeout=timeout)
        except LogTruncatedError as exc:
            raise await self._backlogged(exc) from None
        if record is not None and self._count is not None:
            self._count.handed_out(record[0], record[1], record[2])
        return record

    def _buffered(self) -> LogRecord[V] | None:
        """The next record if its reader has it at hand (no wait; for walkit.sync's chunks)."""
        reader = self._reader
        record = None if reader is None else reader._buffered()
        if record is not None and self._count is not None:
            self._count.handed_out(record[0], record[1], record[2])
        return record

    async def _open_reader(self) -> LogReader[V]:
        await self.register()
        assert self._state is not None
        # (Made here, not by Log.reader: its lag is the consumer's in the metrics.)
        reader: LogReader[V] = LogReader(
            self._log, self._state.position, None, follow=self._follow, skip_truncated=False
        )
        self._reader = reader
        return reader

    async def _backlogged(self, exc: LogTruncatedError) -> ConsumerBackloggedError:
        owner = self._log
        md, _version = await fetch_log(owner._services.context, owner.name)
        at = self.position or LogPosition.EARLIEST
        log.warning(
            "log_consumer_behind",
            log=owner.name,
            consumer=self.name,
            position=str(at),
            truncated=str(md.truncated),
        )
        metrics = owner._services.context.metrics
        if metrics is not None:
            metrics.consumer_behind(owner.name, self.name)
        return ConsumerBackloggedError(
            f"consumer {self.name} of log {owner.name} is behind: the records from {at} up to "
            f"{md.truncated} were deleted before it committed them ({exc}); "
            "consumer.skip_lost() goes on from there",
            position=at,
            truncated=md.truncated,
        )

    # --- commits -----------------------------------------------------------------------------

    async def commit(self, pos: LogPosition | str) -> None:
        """Commit every record up to ``pos`` (inclusive: the position of the last record
        processed): a restarted consumer of this name starts after it, and retention may
        delete it. A position at or before the committed one changes nothing. Raises
        InvalidArgumentError (not a record's position, or past the log's end),
        NoSuchConsumerError (the consumer was deleted)."""
        await self._commit(resume_after(position(pos)))

    async def skip_lost(self) -> LogPosition:
        """After ConsumerBackloggedError: accept the loss, commit up to the log's truncation
        point, and read on from there. Returns the new position."""
        owner = self._log
        md, _version = await fetch_log(owner._services.context, owner.name)
        await self.register()
        await self._commit(md.truncated)
        self._reader = None
        assert self._state is not None
        return self._state.position

    async def _commit(self, resume: LogPosition) -> None:
        owner = self._log
        context = owner._services.context
        await self.register()
        read = self.position
        if read is None or resume > read:  # not handed out by this object: check the log
            md, _version = await fetch_log(context, owner.name)
            if resume.ledger_seq >= md.next_seq:
                raise InvalidArgumentError(
                    f"cannot commit {resume} for consumer {self.name}: log {owner.name} has no "
                    f"ledger {resume.ledger_seq} yet"
                )
        self._state = await commit_consumer(context, owner.name, self.name, resume)
        if self._count is not None:
            self._count.commit(self._state.position)

    # --- lifetime ----------------------------------------------------------------------------

    async def __aenter__(self) -> LogConsumer[V]:
        await self.register()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._reader = None
