"""A log writer's ledger rolls (DistributedLog's log segment rolling).

Roll: create the new ledger, CAS the list (only while ours is still last: otherwise we were
taken over), switch new appends to it, then close the old one in the background. The next roll
waits for that close, so at most two ledgers of a log are ever open, and only the last one
takes new records.

A roll is due when the current ledger is full (``roll_entries``, ``roll_bytes``), old
(``roll_interval``, :mod:`walkit.log._roll_timer`) or failed. It runs behind a gate that
appends queue on, so that records keep their call order across it. After each roll, and when a
quiet log's ledger ages, retention runs in the background; after a takeover, orphan
collection too.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final, final

import anyio

from walkit._core.log_metadata import LogLedger, LogMetadata, should_roll
from walkit._core.log_tail import CloseOutcome, close_outcome
from walkit._core.retention import RECORDS_KEY
from walkit._core.time_search import time_range_tag
from walkit._logging import get_logger
from walkit._retry import pause
from walkit.errors import (
    LedgerClosedError,
    LedgerFencedError,
    LedgerInRecoveryError,
    NoSuchLogError,
    WalkitError,
    WriterFencedError,
)
from walkit.ledger import LedgerWriter
from walkit.log._batches import RecordBatcher
from walkit.log._recovery import LOG_BACKOFF, recover_ledger
from walkit.log._retention import housekeeping
from walkit.log._roll_timer import roll_by_time
from walkit.log._store import fetch_log, update_log
from walkit.log._writer_state import WriterState

if TYPE_CHECKING:
    from walkit.log._context import LogContext

#: The writer's events (log_rolled, log_roll_failed...) keep the writer's logger name, which
#: applications filter on.
log = get_logger("walkit.log._writer")

__all__ = ["CLOSE_ATTEMPTS", "ROLL_RETRY_DELAY", "LedgerRoller"]

#: After a failed roll (no bookies, store unreachable), appends go on in the current ledger
#: and the roll is tried again this many seconds later.
ROLL_RETRY_DELAY: Final = 1.0
#: Attempts at closing the old ledger after a roll.
CLOSE_ATTEMPTS: Final = 5


@final
class LedgerRoller:
    """The ledger a log writer appends to, and its rolls (see the module docs).

    ``spawn(fn)`` starts a background task of the writer (False: the client is closing).
    """

    def __init__(
        self,
        owner: LogContext,
        ledger: LogLedger,
        lw: LedgerWriter,
        state: WriterState,
        batches: RecordBatcher,
        spawn: Callable[[Callable[[], Coroutine[Any, Any, None]]], bool],
    ) -> None:
        self._log = owner
        self._state = state
        self._batches = batches
        self._spawn = spawn
        #: The ledger new records go to.
        self.ledger = ledger
        self.lw = lw
        #: The id of the ledger a roll is listing (between its creation and the listing).
        self.rolling_to: int | None = None
        #: Appends queue on it while a roll is due or under way.
        self.gate = anyio.Lock()
        #: Set once the ledger the last roll left is closed.
        self.old_closed = anyio.Event()
        self.old_closed.set()
        self.retry_at = -math.inf
        #: The current ledger failed (its appends all fail now): roll at the next append.
        self.broken = False
        #: A roll by time is due; the loop time the current ledger's age counts from.
        self.aged = False
        self.roll_clock_from = anyio.current_time()
        self._timer_scope = anyio.CancelScope()
        self._housekeeping_running = False

    def record_count(self, lw: LedgerWriter) -> Callable[[], dict[str, bytes]]:
        """The ``walkit.records`` tag a close gives ``lw`` (read when its appends are done):
        retention counts records by it."""
        acked = self._batches.records_acked
        times = self._batches.time_ranges
        return lambda: {
            RECORDS_KEY: str(acked.get(lw.id, 0)).encode(),
            **time_range_tag(times.get(lw.id)),
        }

    def owns(self, md: LogMetadata) -> bool:
        """Whether the log read as ``md`` is still this writer's: its last ledger is the
        current one, or the one a roll is listing right now (its CAS may land first)."""
        last = md.last
        rolling = last is not None and last.ledger_id == self.rolling_to
        return md.owned_by(self.ledger) or rolling

    async def before_append(self) -> None:
        """Roll first if one is due or under way; after a failed ledger whose roll must wait,
        check the log is still ours."""
        if self.gate.locked() or self.due():
            await self.through_gate()
            self._state.check()
        elif self.broken:
            await self.check_owner()

    async def check_owner(self) -> None:
        md, _version = await fetch_log(self._log._services.context, self._log.name)
        if not md.owned_by(self.ledger):
            raise self._state.fenced("another writer took over")

    def due(self) -> bool:
        state = self._state
        if state.error is not None or state.closing:
            return False
        opts = self._log.options
        lw = self.lw
        due = (
            self.broken
            or self.aged
            or should_roll(
                lw.last_add_confirmed + 1,
                lw.length,
                roll_entries=opts.roll_entries,
                roll_bytes=opts.roll_bytes,
            )
        )
        # The clock only when a roll is due (not on every append): after a failed roll,
        # the next waits ROLL_RETRY_DELAY.
        return due and anyio.current_time() >= self.retry_at

    async def through_gate(self) -> None:
        # Acquire and release explicitly: the caller must enter the ledger's append right after
        # the release, with no checkpoint in between, to keep positions in call order.
        await self.gate.acquire()
        try:
            if self.due():
                await self._roll()
        finally:
            self.gate.release()

    async def _roll(self) -> None:
        await self.old_closed.wait()
        owner = self._log
        current = self.ledger
        try:
            new_lw = await owner._create_ledger("data")
        except WalkitError as exc:
            self._roll_failed(exc)
            return

        def change(md: LogMetadata) -> tuple[LogMetadata, LogLedger]:
            last = md.last
            if last is not None and last.ledger_id == new_lw.id:  # our earlier try got through
                return md, last
            return md.after_roll(current, new_lw.id)

        self.rolling_to = new_lw.id
        try:
            _md, _version, new_ledger = await update_log(
                owner._services.context, owner.name, change
            )
        except WriterFencedError as exc:
            self.rolling_to = None
            await owner._ledger_cleanup.discard(new_lw)
            raise self._state.fenced(str(exc)) from None
        except NoSuchLogError as exc:
            self.rolling_to = None
            await owner._ledger_cleanup.discard(new_lw)
            raise self._state.stop(exc) from None
        except WalkitError as exc:
            self.rolling_to = None
            await owner._ledger_cleanup.discard(new_lw)
            self._roll_failed(exc)
            return
        old = self.lw
        self.lw, self.ledger = new_lw, new_ledger
        self.rolling_to = None
        self.broken = self.aged = False
        self.roll_clock_from = anyio.current_time()
        self.old_closed = anyio.Event()
        self._batches.pump()  # record sets queued meanwhile go to the new ledger
        log.info(
            "log_rolled",
            log=owner.name,
            old_ledger=old.id,
            old_last_entry=old.last_add_confirmed,
            new_ledger=new_lw.id,
            seq=new_ledger.seq,
        )
        done = self.old_closed
        if not self._spawn(functools.partial(self.close_old, old, done)):
            await self.close_old(old, done)  # the client is closing: close it here

    def _roll_failed(self, exc: WalkitError) -> None:
        log.warning("log_roll_failed", log=self._log.name, error=str(exc))
        self.retry_at = anyio.current_time() + ROLL_RETRY_DELAY

    async def close_old(self, old: LedgerWriter, done: anyio.Event) -> None:
        """Close the ledger a roll left (waits for its pending appends). Never raises."""
        try:
            for attempt in range(CLOSE_ATTEMPTS):
                try:
                    await old.close(custom_metadata=self.record_count(old))
                    self.start_housekeeping(takeover=False)
                    return
                except (LedgerFencedError, LedgerInRecoveryError):
                    await self._closed_by_other(old)
                    return
                except WalkitError as exc:
                    if not exc.retryable or attempt == CLOSE_ATTEMPTS - 1:
                        # The ledger stays open until the next takeover recovers it; this
                        # writer stops so that a new one can take over.
                        log.warning("log_old_ledger_close_failed", ledger_id=old.id, error=str(exc))
                        self._state.fail(exc)
                        return
                await pause(LOG_BACKOFF, attempt, self._log._services.context.rng)
        except Exception:  # pragma: no cover - a bug must not take the client down
            log.exception("log_old_ledger_close_crashed", ledger_id=old.id)
        finally:
            done.set()

    async def _closed_by_other(self, old: LedgerWriter) -> None:
        """The close of ``old`` (left by a roll) found it fenced: by a reader that recovered it
        (harmless when it kept every acknowledged entry and the log is still ours), or by
        another writer's takeover."""
        state = self._state
        why = f"ledger {old.id} was recovered by another writer"
        try:
            closed_at = await recover_ledger(self._log, old.id)
            md, _version = await fetch_log(self._log._services.context, self._log.name)
            outcome = close_outcome(
                acknowledged=old.last_add_confirmed,
                closed_at=closed_at,
                still_owner=md.owned_by(self.ledger),
            )
        except NoSuchLogError:
            await state.gone_or(state.fenced(why))
            return
        except WalkitError:
            outcome = CloseOutcome.FENCED
        if outcome is CloseOutcome.CLOSED:
            log.info("log_old_ledger_closed_by_reader", log=self._log.name, ledger_id=old.id)
        elif outcome is CloseOutcome.SHORT:
            log.error(
                "log_old_ledger_closed_short",
                log=self._log.name,
                ledger_id=old.id,
                acknowledged=old.last_add_confirmed,
            )
            state.fail(
                LedgerClosedError(
                    f"log {self._log.name}: ledger {old.id} was closed before entries this "
                    "writer acknowledged"
                )
            )
        else:
            await state.gone_or(state.fenced(why))

    # --- retention and orphan collection (walkit.log._retention) ------------------------------

    def start_housekeeping(self, *, takeover: bool) -> None:
        """Retention (and after a takeover, orphan collection) in the background."""
        if not self._housekeeping_running:
            self._housekeeping_running = self._spawn(
                functools.partial(self._housekeeping, takeover)
            )

    async def _housekeeping(self, takeover: bool) -> None:
        try:
            await housekeeping(self._log, takeover=takeover)
        finally:
            self._housekeeping_running = False

    # --- rolls by time (walkit.log._roll_timer's TimedWriter) ---------------------------------

    def start_timer(self) -> None:
        interval = self._log.options.roll_interval
        if interval is not None:
            self._spawn(functools.partial(self._roll_timer, interval))

    def stop_timer(self) -> None:
        self._timer_scope.cancel()

    async def _roll_timer(self, interval: float) -> None:
        with self._timer_scope:
            await roll_by_time(self, interval, ROLL_RETRY_DELAY)

    def stopped(self) -> bool:
        return self._state.stopped()

    @property
    def holds_records(self) -> bool:
        return self.lw.last_add_confirmed >= 0

    async def roll_aged(self) -> None:
        self.aged = True
        await self.through_gate()

    def quiet(self) -> None:
        if self._log.options.retain_age is not None:
            self.start_housekeeping(takeover=False)
