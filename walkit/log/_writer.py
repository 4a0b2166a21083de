"""The log writer: takeover, appends, rolls, truncation, close.

Takeover (DistributedLog / Pravega): read the log's ledger list, recover (fence) the last two
ledgers, create a new ledger, and list it last with a compare-and-set. A lost CAS means
someone else changed the list: start over (which fences whoever won), up to
``takeover_attempts`` rounds. Recovered ledgers that turn out empty leave the list in the same
CAS and are deleted after it.

Rolls: :mod:`walkit.log._roll` (a :class:`LedgerRoller` that the writer owns and delegates to).
The state both share (open, closing, closed, stopped by an error): :mod:`walkit.log._writer_state`.

Order: appends get positions in the order of the calls, across rolls too. An append that has
to wait (a roll is due or under way) queues on a FIFO lock; the lock is handed to the next
waiter on release, and each caller enters the ledger's append (which assigns the entry id
before its first checkpoint) right after releasing it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Generic, final

import anyio

from walkit._core.backoff import Backoff
from walkit._core.log_metadata import LogLedger, LogMetadata, Takeover, Truncation
from walkit._core.log_position import LogPosition, position
from walkit._core.producers import MAX_SEQUENCE
from walkit._core.record import MAX_TIMESTAMP, Record, extras_of
from walkit._core.record_set import TIMESTAMP_BYTES, ProducerTag, envelope_overhead
from walkit._logging import get_logger
from walkit._retry import pause
from walkit.errors import (
    IncompatibleSchemaError,
    InvalidArgumentError,
    InvalidMetadataError,
    LedgerClosedError,
    LedgerFencedError,
    LedgerInRecoveryError,
    NoSuchLedgerError,
    NoSuchLogError,
    WalkitError,
    WriterFencedError,
)
from walkit.ledger import LedgerWriter
from walkit.log._batches import RecordBatch, RecordBatcher
from walkit.log._producers import ProducerState, producer_tag, tail_start
from walkit.log._record_input import RecordInput
from walkit.log._recovery import recover_ledger
from walkit.log._registration import SchemaStep, schema_step
from walkit.log._roll import LedgerRoller
from walkit.log._store import fetch_log, update_log, write_log
from walkit.log._values import V
from walkit.log._writer_state import WriterState, fenced_error
from walkit.metadata import Decision, cas_update

if TYPE_CHECKING:
    from walkit.log._handle import LogHandle

log = get_logger(__name__)

__all__ = ["LogWriter", "take_over"]

#: Seconds a writer leaving ``async with`` on an error spends trying to close its ledger.
CLOSE_ON_ERROR_TIMEOUT: Final = 5.0
#: Pauses between takeover rounds lost to another writer (full jitter breaks the tie).
TAKEOVER_BACKOFF: Final = Backoff(first=0.05, cap=1.0)


def _clock_ms(clock: Callable[[], float]) -> int:
    """The wall clock in whole milliseconds, kept within what a record timestamp may be."""
    try:
        ms = int(clock() * 1000)
    except (ValueError, OverflowError, TypeError):  # NaN, infinity, not a number
        ms = 0
    return min(max(ms, 0), MAX_TIMESTAMP)


@final
class LogWriter(Generic[V]):
    """The single writer of a log (from :meth:`walkit.Log.writer`).

    ``append``/``append_batch`` return positions once the records are durable (acknowledged by
    an ack quorum of bookies). After another writer takes the log over, appends raise
    WriterFencedError (a LedgerFencedError); records acknowledged before are never lost.
    """

    def __init__(
        self,
        owner: LogHandle,
        ledger: LogLedger,
        lw: LedgerWriter,
        *,
        tail: LogPosition | None = None,
    ) -> None:
        self._log = owner
        #: The log's schema (a typed handle's): what appends encode their values with.
        self._typed = owner._typed
        #: Where this writer's records start: everything before it was written by earlier
        #: writers and is closed (a standby catches up to here before applying its own).
        self.first_position = LogPosition(ledger.seq, 0)
        self._state = WriterState(owner)
        opts = owner.options
        clock = owner._services.context.options.wall_clock
        self._batches = RecordBatcher(
            self._current,
            loop=owner._services.context.loop,
            batch_bytes=opts.batch_bytes,
            codec=opts.compression,
            spawn=self._spawn,
            clock_ms=None if clock is None else functools.partial(_clock_ms, clock),
        )
        max_entry = owner._services.context.options.max_entry_size
        stamp = 0 if clock is None else TIMESTAMP_BYTES
        self._input = RecordInput(
            max_entry - envelope_overhead(1, producers=1) - stamp,
            max_entry - envelope_overhead(1, producers=1, extras=True),
            trace=opts.trace_context,
        )
        scan = None
        if tail is not None:
            start, end = tail, self.first_position
            scan = lambda: owner.reader(start, end=end, follow=False)  # noqa: E731
        self._producers = ProducerState(owner.name, scan)
        self._batches.on_done = self._producers.done
        self._roller = LedgerRoller(owner, ledger, lw, self._state, self._batches, self._spawn)
        #: This log's append figures when the client keeps metrics (walkit.ledger._metrics).
        metrics = owner._services.context.metrics
        self._appends = None if metrics is None else metrics.appends(owner.name)
        self._clock = owner._services.context.loop.time

    def _current(self) -> tuple[int, LedgerWriter]:
        roller = self._roller
        return roller.ledger.seq, roller.lw

    def __repr__(self) -> str:
        return f"LogWriter(log={self._log.name!r}, ledger_seq={self.ledger_seq}, ledger_id={self.ledger_id})"

    # --- public ----------------------------------------------------------------------------

    @property
    def ledger_seq(self) -> int:
        """The sequence number of the ledger new records go to."""
        return self._roller.ledger.seq

    @property
    def ledger_id(self) -> int:
        return self._roller.lw.id

    @property
    def end_position(self) -> LogPosition:
        """The position just after the last acknowledged record of the current ledger."""
        roller = self._roller
        return LogPosition(roller.ledger.seq, roller.lw.last_add_confirmed + 1)

    @property
    def is_closed(self) -> bool:
        return self._state.closed

    async def append(
        self,
        payload: V,
        *,
        key: bytes | None = None,
        headers: Any = None,
        timestamp: int | None = None,
        producer_id: str | None = None,
        sequence: int | None = None,
    ) -> LogPosition:
        """Append one record; returns its position once it is durable.

        ``key`` (bytes), ``headers`` ((name, value) pairs of str and bytes, or a mapping) and
        ``timestamp`` (ms since the epoch; default: the writer's wall clock when it sends the
        record's entry, none from a client connected with ``wall_clock=None``) come back on the reader's
        :class:`LogRecord`.

        Records from concurrent tasks share entries (record sets, see ``batch_bytes``) and get
        positions in call order. With ``producer_id`` and ``sequence`` (growing with every
        record of that producer) the append is idempotent: a sequence number already in the
        log raises DuplicateRecordError with the first copy's ``position``, so a retry after
        an unknown outcome is stored once (see ``docs/log.md``).

        On a typed log (``Log.open(..., schema=T)``) ``payload`` is a ``T`` value, stored
        encoded (``docs/log.md``, "Typed records").

        Raises WriterFencedError (another writer took over; the record *may* be written),
        LedgerClosedError (after close), InvalidArgumentError (not bytes, too big, a bad key,
        header or timestamp; on a typed log, not a ``T`` or a field of the wrong type, named),
        and the ledger's errors (NotEnoughBookiesError ...).
        """
        # (The common case, a bytes record without a producer, is checked inline: this runs
        # once per record.)
        stats = self._appends
        t0 = self._clock() if stats is not None else 0.0
        typed = self._typed
        data: object = payload if typed is None else typed.encode(payload)
        if type(data) is bytes and len(data) <= self._input.max_record:
            record = data
        else:
            record = self._input.record(data)
        if key is None and headers is None and timestamp is None and not self._input.trace:
            extras = None
        else:
            extras = self._input.extras(
                record, extras_of(key, headers, timestamp), self._input.trace_headers()
            )
        if producer_id is None and sequence is None:
            tag = None
            if not self._ledger_ready():  # (_current_ledger without its coroutine)
                await self._roller.before_append()
        else:
            tag = producer_tag(producer_id, sequence)
            assert tag is not None  # (one of them given: a tag, or it raised)
            await self._admit(tag)
        batch, slot = self._batches.add(record, tag, extras)
        if tag is not None:
            self._producers.sent(tag, batch)
        self._batches.added()
        try:  # (_outcome inlined: one coroutine fewer per append)
            await batch.wait()
        except WalkitError as exc:
            raise await self._append_error(batch.lw, exc) from exc
        except BaseException:  # cancelled: the record was handed over, nobody will hear
            self._state.abandon([batch])
            raise
        if stats is not None:
            stats.observe(self._clock() - t0, 1, len(record))
        return LogPosition._of(batch.seq, batch.entry_id, slot)

    def _ledger_ready(self) -> bool:
        """The current ledger takes appends now: no roll due or under way, not broken (the
        common case, checked without a coroutine; otherwise see ``_current_ledger``)."""
        self._state.check()
        roller = self._roller
        return not (roller.broken or roller.gate.locked() or roller.due())

    def _spawn(self, fn: Callable[[], Coroutine[Any, Any, None]]) -> bool:
        """Start a background task in the client's task group (False: the client is closing)."""
        try:
            self._log._services.context.task_group.start_soon(fn)
        except RuntimeError:
            return False
        return True

    async def _admit(self, tag: ProducerTag) -> None:
        """Wait until ``tag`` may be appended; no checkpoint between the last check and the
        return (so no copy can slip in between)."""
        while True:
            await self._producers.ready()
            await self._current_ledger()
            earlier = self._producers.check(tag)
            if earlier is None:
                return
            await earlier.settled()  # a copy in flight: its outcome decides

    async def _current_ledger(self) -> None:
        """Roll first if one is due or under way (no checkpoint otherwise: call order is
        position order)."""
        if not self._ledger_ready():
            await self._roller.before_append()

    async def append_batch(
        self,
        payloads: Sequence[V | Record],
        *,
        producer_id: str | None = None,
        sequence: int | None = None,
        flush: bool = False,
    ) -> list[LogPosition]:
        """Append several records, in order, packed into as few entries as ``batch_bytes``
        allows and pipelined; returns their positions once all are durable. Each item is the
        payload (bytes), or a :class:`walkit.Record` with its key, headers or timestamp; on a
        typed log, a ``T`` value or a ``Record(value=...)``.

        ``flush=True`` sends the last of those entries at once, beside the entries in flight,
        where it would otherwise wait for them and take more records: for a caller that makes
        its own groups (a group commit) and wants them pipelined.

        With ``producer_id`` and ``sequence``, record ``i`` carries sequence number
        ``sequence + i`` and the batch is idempotent: retried after an unknown outcome, the
        records already in the log (a prefix of the batch: the first try stored part of it,
        or all) are not stored again, and their positions are those of their first copies.
        DuplicateRecordError only when such a record is older than the positions the writer
        remembers (see ``docs/log.md``). Raises as :meth:`append`.
        """
        typed = self._typed
        items = payloads if typed is None else typed.encode_batch(payloads)
        return await self._append_batch(
            items,  # type: ignore[arg-type]  # (bytes or Records: encoded when typed)
            producer_id,
            sequence,
            trace=self._input.trace,
            flush=flush,
        )

    async def _append_batch(
        self,
        payloads: Sequence[bytes | Record],
        producer_id: str | None,
        sequence: int | None,
        *,
        trace: bool,
        flush: bool = False,
    ) -> list[LogPosition]:
        """:meth:`append_batch`; ``trace``: add the current trace context to the records'
        headers (walkit.sync adds its callers' in their own threads)."""
        if isinstance(payloads, bytes | bytearray | memoryview | str):
            raise InvalidArgumentError("append_batch takes a sequence of payloads")
        stats = self._appends
        t0 = self._clock() if stats is not None else 0.0
        records, extras = self._input.batch(payloads, trace)
        first = producer_tag(producer_id, sequence)
        batcher = self._batches
        if first is None or not records:
            await self._current_ledger()
            known: list[LogPosition] = []
            if extras is None:
                added = [batcher.add(record) for record in records]
            else:
                added = [
                    batcher.add(record, None, ex)
                    for record, ex in zip(records, extras, strict=True)
                ]
        else:
            if first.sequence + len(records) - 1 > MAX_SEQUENCE:
                raise InvalidArgumentError(
                    f"sequence {first.sequence} + {len(records)} records passes 2^64-1"
                )
            tags = [ProducerTag(first.producer_id, first.sequence + i) for i in range(len(records))]
            known = await self._admit_batch(tags)
            added = []
            skip = len(known)
            rest = [None] * (len(records) - skip) if extras is None else extras[skip:]
            for record, tag, ex in zip(records[skip:], tags[skip:], rest, strict=True):
                batch, slot = batcher.add(record, tag, ex)
                self._producers.sent(tag, batch)
                added.append((batch, slot))
        batcher.added(flush=flush)
        batches = list(dict.fromkeys(b for b, _slot in added))
        for i, batch in enumerate(batches):
            try:
                await self._outcome(batch)
            except WalkitError:
                raise
            except BaseException:  # cancelled: the records were handed over
                self._state.abandon(batches[i:])
                raise
        if stats is not None and added:
            size = sum(map(len, records[len(known) :]))
            stats.observe(self._clock() - t0, len(added), size)
        return known + [batch.position(slot) for batch, slot in added]

    async def _admit_batch(self, tags: list[ProducerTag]) -> list[LogPosition]:
        """:meth:`_admit` for a batch: wait until no earlier copy of its sequence numbers may
        be in flight; return the positions of those already in the log (a prefix). No
        checkpoint between the last check and the return."""
        while True:
            await self._producers.ready()
            await self._current_ledger()
            earlier = self._producers.in_flight(tags[0])
            if earlier is None:
                return self._producers.durable_prefix(tags)
            await earlier.settled()  # a copy in flight: its outcome decides

    async def _outcome(self, batch: RecordBatch) -> None:
        try:
            await batch.wait()
        except WalkitError as exc:
            raise await self._append_error(batch.lw, exc) from exc

    async def truncate(self, pos: LogPosition | str) -> None:
        """Records before ``pos`` may be reclaimed: the truncation point moves to ``pos``
        (never back), readers starting before it start at it, and ledgers wholly before it are
        deleted (never the one holding ``pos``). ``pos`` may not be past the log's end."""
        pos = position(pos)
        self._state.check()
        if pos == LogPosition.LATEST:
            raise InvalidArgumentError("cannot truncate at LATEST: pass a record's position")
        if pos > self.end_position:
            raise InvalidArgumentError(
                f"cannot truncate log {self._log.name} at {pos}: its end is {self.end_position}"
            )

        def change(md: LogMetadata) -> tuple[LogMetadata, Truncation]:
            if not self._roller.owns(md):
                raise fenced_error(md.name, "another writer took over before the truncation")
            result = md.truncated_at(pos)
            return result.metadata, result

        try:
            _md, _version, result = await update_log(
                self._log._services.context, self._log.name, change
            )
        except WriterFencedError as exc:
            raise self._state.fenced(str(exc)) from None
        if result.dropped:
            log.info("log_truncated", log=self._log.name, at=str(pos), dropped=len(result.dropped))
            await self._log._ledger_cleanup.delete(
                [lg.ledger_id for lg in result.dropped], "truncated"
            )

    async def close(self) -> None:
        """Wait for pending appends and close the current ledger (its last acknowledged record
        is recorded). Idempotent.

        Closing a writer that another writer fenced, or whose log was deleted, succeeds (as
        trio's ``aclose`` does for a broken resource): every call that could not complete
        raised already. It raises only when records handed over could not be made durable and
        no call raised that (an append cancelled while it waited for them): WriterFencedError
        if another writer took over, else the append's error; once. A ledger that cannot be
        closed for another reason (no bookies, no metadata store) raises that error.
        """
        state, roller = self._state, self._roller
        if state.closed:
            await anyio.lowlevel.checkpoint()
            return
        state.closing = True
        async with roller.gate:  # a roll under way finishes first
            pass
        last = self._batches.flush()
        if last is not None:  # the records queued before close are sent and waited for
            await last.settled()
        await state.settle_abandoned(self._append_failed)
        await roller.old_closed.wait()
        lw = roller.lw
        if state.error is not None:
            # Fenced or failed: the ledger is another writer's to recover; just stop ours.
            with contextlib.suppress(WalkitError):
                await lw.close()
            self._mark_closed()
            state.raise_unreported()
            return
        try:
            await lw.close(custom_metadata=roller.record_count(lw))
        except (LedgerFencedError, LedgerInRecoveryError):
            self._mark_closed()
            await state.gone_or(state.fenced(f"ledger {lw.id} was recovered by another writer"))
            state.raise_unreported()
            return
        except NoSuchLedgerError as exc:  # deleted with its log?
            self._mark_closed()
            if not isinstance(await state.gone_or(exc), NoSuchLogError):
                raise
            state.raise_unreported()
            return
        self._mark_closed()
        log.debug("log_writer_closed", log=self._log.name, ledger_id=lw.id)
        state.raise_unreported()

    async def aclose(self) -> None:
        """:meth:`close` under the name every async handle closes with."""
        await self.close()

    async def __aenter__(self) -> LogWriter[V]:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc is None:
            await self.close()
            return
        # The body failed or was cancelled: close if that can be done quickly (readers then
        # move on at once); otherwise the next writer's takeover recovers the ledger.
        with anyio.CancelScope(shield=True), anyio.move_on_after(CLOSE_ON_ERROR_TIMEOUT):
            try:
                await self.close()
            except WalkitError as close_error:  # the body's error is the one to report
                log.warning("log_writer_close_failed", log=self._log.name, error=str(close_error))
        self._state.closing = True
        self._mark_closed()

    # --- internals -------------------------------------------------------------------------

    def _mark_closed(self) -> None:
        self._state.closed = True
        self._batches.stop()  # (its releaser task ends)
        self._roller.stop_timer()

    def _append_failed(self, lw: LedgerWriter | None, exc: WalkitError) -> WalkitError:
        """The error an append that failed with ``exc`` raises. A ledger that failed for good
        (no bookies to replace a failed one ...) is rolled away from at the next append."""
        if lw is None:  # never sent (record sets always are, or fail when sent)
            return exc
        roller = self._roller
        if isinstance(exc, LedgerFencedError) and lw is not roller.lw:
            # A ledger left by a roll, recovered by a reader while this append was pending:
            # its close (LedgerRoller.close_old) decides whether that was a takeover.
            return LedgerFencedError(
                f"log {self._log.name}: ledger {lw.id} was recovered while this append was "
                "pending (the record may be written)"
            )
        if isinstance(exc, LedgerFencedError):
            return self._state.fenced(f"ledger {lw.id} was fenced")
        if (
            not isinstance(exc, InvalidArgumentError | LedgerClosedError)
            and lw is roller.lw
            and not roller.broken
        ):
            roller.broken = True
            log.warning("log_ledger_failed", log=self._log.name, ledger_id=lw.id, error=str(exc))
        return exc

    # --- hooks of retention, deletion and stalled-ledger recovery (walkit.log._retention) ---

    async def _append_error(self, lw: LedgerWriter | None, exc: WalkitError) -> WalkitError:
        """:meth:`_append_failed`, and NoSuchLogError instead of a fence if the log is gone."""
        error = self._append_failed(lw, exc)
        if isinstance(error, WriterFencedError):
            return await self._state.gone_or(error)
        return error


# --- takeover ------------------------------------------------------------------------------


def _takeover_decision(
    taken_from: LogMetadata,
    recovered: Mapping[int, int],
    new_id: int,
    schema: SchemaStep,
    current: LogMetadata,
) -> Decision[LogMetadata, Takeover | None]:
    """Link the new ledger ``new_id`` to the log read as ``current`` (``taken_from`` at the
    start of the takeover, whose last two ledgers are ``recovered``); None when another writer
    moved the log on, so that the takeover starts over. ``schema`` registers the writer's
    schema in the same change (:func:`walkit._core.log_schema.writer_schema`)."""
    if current.last is not None and current.last.ledger_id == new_id:
        # Our CAS went through before the store reported a failure.
        dropped = taken_from.after_takeover(recovered, new_id).dropped
        return Decision(Takeover(current, current.last, dropped))
    if current.last != taken_from.last or any(
        lg.ledger_id not in recovered for lg in current.to_recover()
    ):
        return Decision(None)
    # Unchanged, or a snapshot or truncation meanwhile: link the new ledger to what is there.
    registered, version = schema(current)
    plan = registered.after_takeover(recovered, new_id, version)
    return Decision(plan, plan.metadata)


async def take_over(owner: LogHandle) -> LogWriter[Any]:
    """Become the log's writer (see the module docs)."""
    owner._check_open()
    context = owner._services.context
    name = owner.name
    schema = schema_step(owner)
    for attempt in range(owner.options.takeover_attempts):
        md, version = await fetch_log(context, name)
        schema(md)  # (IncompatibleSchemaError before anything is fenced)
        recovered: dict[int, int] = {}
        gone = False
        for lg in md.to_recover():
            try:
                recovered[lg.ledger_id] = await recover_ledger(owner, lg.ledger_id)
            except NoSuchLedgerError:
                again, _ = await fetch_log(context, name)
                if lg in again.ledgers:
                    raise InvalidMetadataError(
                        f"log {name} lists ledger {lg.ledger_id}, which does not exist"
                    ) from None
                gone = True  # truncated under us: look again
                break
        if gone:
            continue
        new_lw = await owner._create_ledger("data")
        try:
            _md, version, plan = await cas_update(
                f"log {name}: takeover",
                read=functools.partial(fetch_log, context, name),
                write=functools.partial(write_log, context),
                decide=functools.partial(_takeover_decision, md, recovered, new_lw.id, schema),
                rng=context.rng,
                current=(md, version),
            )
        except IncompatibleSchemaError:
            # Another writer registered a version meanwhile, and ours does not follow it.
            await owner._ledger_cleanup.discard(new_lw)
            raise
        if plan is None:
            await owner._ledger_cleanup.discard(new_lw)
            await pause(TAKEOVER_BACKOFF, attempt, context.rng)
            continue
        log.info(
            "log_taken_over",
            log=name,
            ledger_id=new_lw.id,
            seq=plan.ledger.seq,
            recovered={str(k): v for k, v in recovered.items()},
            dropped=[lg.ledger_id for lg in plan.dropped],
        )
        if plan.dropped:
            await owner._ledger_cleanup.delete([lg.ledger_id for lg in plan.dropped], "empty")
        tail = [lg.seq for lg in md.to_recover()]
        # Producers are learned from the recovered tail, at the first tagged append.
        writer: LogWriter[Any] = LogWriter(owner, plan.ledger, new_lw, tail=tail_start(tail))
        writer._roller.start_housekeeping(takeover=True)
        writer._roller.start_timer()
        return writer
    raise WriterFencedError(
        f"log {name}: could not take over: other writers kept taking it over "
        f"({owner.options.takeover_attempts} rounds)"
    )
