"""Whether a log writer may go on: open, closing, closed, or stopped by an error.

The writer and its ledger roller (:mod:`walkit.log._roll`) share one state: the first error
that stops the writer (fenced by another writer's takeover, the log deleted, a ledger closed
short) is kept and raised again, as a fresh copy, by every later call.

Closing follows trio's ``aclose`` contract (closing a broken resource succeeds): ``close``
raises only for records the application handed over that could not be made durable and that
no call reported (:attr:`WriterState.unreported`), e.g. an append cancelled while it waited.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, final

from walkit._logging import get_logger
from walkit.errors import LedgerClosedError, NoSuchLogError, WalkitError, WriterFencedError
from walkit.log._store import fetch_log

if TYPE_CHECKING:
    from walkit.ledger import LedgerWriter
    from walkit.log._batches import RecordBatch
    from walkit.log._context import LogContext

#: The writer's events (log_writer_fenced, log_rolled...) keep the writer's logger name, which
#: applications filter on.
log = get_logger("walkit.log._writer")

__all__ = ["WriterState", "fenced_error"]


def fenced_error(name: str, why: str) -> WriterFencedError:
    return WriterFencedError(f"log {name}: this writer was fenced ({why}); another writer owns it")


def _copy(error: WalkitError) -> WalkitError:
    return type(error)(*error.args)


@final
class WriterState:
    """The state of one log writer (see the module docs)."""

    __slots__ = ("_abandoned", "_log", "closed", "closing", "error", "unreported")

    def __init__(self, owner: LogContext) -> None:
        self._log = owner
        #: What stopped the writer (None: nothing yet).
        self.error: WalkitError | None = None
        self.closing = False
        self.closed = False
        #: Why records handed over were not made durable, when no call raised it (an append
        #: cancelled while it waited, a thread interrupted): ``close`` raises it, once.
        self.unreported: WalkitError | None = None
        #: Record sets whose appending call stopped waiting (cancelled): close looks at them.
        self._abandoned: list[RecordBatch] = []

    def stopped(self) -> bool:
        """Closing, closed, fenced or failed."""
        return self.closing or self.closed or self.error is not None

    def check(self) -> None:
        """Raise what stopped the writer, or LedgerClosedError once it closes."""
        if self.error is not None:
            raise _copy(self.error)
        if self.closing or self.closed:
            raise LedgerClosedError(f"the writer of log {self._log.name} is closed")

    def stop(self, error: WalkitError) -> WalkitError:
        """Stop the writer with ``error`` (it replaces an earlier one); a copy to raise."""
        self.error = error
        return _copy(error)

    def fail(self, error: WalkitError) -> None:
        """Stop the writer with ``error`` unless something stopped it already."""
        if self.error is None:
            self.error = error

    def lost(self, error: WalkitError) -> None:
        """Records handed over failed with ``error`` and no call will raise it."""
        if self.unreported is None:
            self.unreported = self.error if self.error is not None else error

    def abandon(self, batches: list[RecordBatch]) -> None:
        """Record sets whose appending call stopped waiting: ``close`` looks at their outcome."""
        if len(self._abandoned) >= 64:  # (the acknowledged ones need no look)
            self._abandoned = [b for b in self._abandoned if not b.acked]
        self._abandoned += batches

    async def settle_abandoned(
        self, failed: Callable[[LedgerWriter | None, WalkitError], WalkitError]
    ) -> None:
        """Wait for the record sets no caller waits for; note the first that failed (as
        ``failed`` says an append would have raised it)."""
        abandoned, self._abandoned = self._abandoned, []
        for batch in abandoned:
            try:
                await batch.wait()
            except WalkitError as exc:
                self.lost(failed(batch.lw, exc))

    def raise_unreported(self) -> None:
        """Raise (a copy of) what no call reported, once."""
        error, self.unreported = self.unreported, None
        if error is not None:
            raise _copy(error)

    def fenced(self, why: str) -> WalkitError:
        """Another writer took the log over (the first reason is kept); the error to raise."""
        if self.error is None:
            self.error = fenced_error(self._log.name, why)
            log.warning("log_writer_fenced", log=self._log.name, why=why)
        return _copy(self.error)

    async def gone_or(self, error: WalkitError) -> WalkitError:
        """NoSuchLogError (kept as this writer's error) if the log was deleted, else ``error``."""
        try:
            await fetch_log(self._log._services.context, self._log.name)
        except NoSuchLogError:
            gone = self.stop(NoSuchLogError(f"log {self._log.name!r} was deleted"))
            log.warning("log_writer_log_deleted", log=self._log.name)
            return gone
        except WalkitError:
            pass
        return error
