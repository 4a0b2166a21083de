"""Fencing and recovering one of a log's ledgers, retried while that is retryable.

A takeover recovers the log's last two ledgers, a writer whose old ledger was fenced under it
recovers that one to learn where it closed, and linking staged ledgers recovers them
(BookKeeper's protocol document, "Fencing" and "Recovery").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from walkit._core.backoff import Backoff
from walkit._logging import get_logger
from walkit._retry import retry
from walkit.client import client_services
from walkit.errors import NoSuchLedgerError, WalkitError

if TYPE_CHECKING:
    from walkit.log._context import LogContext

#: log_recovery_retry keeps the writer's logger name, which applications filter on.
log = get_logger("walkit.log._writer")

__all__ = ["LOG_BACKOFF", "RECOVERY_ATTEMPTS", "recover_ledger"]

#: Attempts at recovering one ledger during a takeover (recovery is retryable).
RECOVERY_ATTEMPTS: Final = 5
#: Pauses between tries of closing an old ledger or recovering one.
LOG_BACKOFF: Final = Backoff(first=0.1, cap=2.0)


async def recover_ledger(owner: LogContext, ledger_id: int) -> int:
    """Fence and recover one ledger; its last entry id (-1: empty)."""
    client = owner.client

    async def recover() -> int:
        reader = await client.open_ledger(ledger_id, password=owner.options.password, recovery=True)
        return reader.last_add_confirmed

    def retry_on(exc: Exception) -> bool:
        return (
            isinstance(exc, WalkitError)
            and not isinstance(exc, NoSuchLedgerError)
            and (exc.retryable)
        )

    def logged(exc: Exception, attempt: int, seconds: float) -> None:
        log.info(
            "log_recovery_retry",
            log=owner.name,
            ledger_id=ledger_id,
            error=str(exc),
            retry_in=round(seconds, 3),
        )

    return await retry(
        recover,
        attempts=RECOVERY_ATTEMPTS,
        backoff=LOG_BACKOFF,
        rng=client_services(client).context.rng,
        retry_on=retry_on,
        on_retry=logged,
    )
