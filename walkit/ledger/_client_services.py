"""What walkit's own layers above the ledger API get from a client: :class:`ClientServices`.

The log, autorecovery, Spark and the lake need more of a client than its public methods: the
bookie connection pool, the metadata store, the placement policy, the options, the injected
random generator and clock, the task group, and deleting ledgers that left a log. They get
them through this one declared interface, which the client builds once
(``walkit.client.client_services(client)`` hands it out), never by reaching into the client's
private attributes; ``tests/structure/test_client_internals.py`` holds them to that.

Applications do not use it: it is private, and may change in any release.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING, Protocol, final

import anyio
import attrs

from walkit._logging import get_logger
from walkit.errors import NoSuchLedgerError, WalkitError
from walkit.ledger._context import ClientContext

if TYPE_CHECKING:
    from walkit.ledger._writer import LedgerWriter

__all__ = ["ClientServices", "DeleteLedger", "LedgerCleanup"]

#: The clean-up's events are the log's (``log_ledger_deleted``), under its logger's name.
log = get_logger("walkit.log")

#: How long a discard may take before it gives up (it runs shielded from cancellation).
_DISCARD_TIMEOUT = 10.0


class DeleteLedger(Protocol):
    """The client's ``delete_ledger``: checks the password, refuses once the client closed."""

    def __call__(self, ledger_id: int, *, password: bytes = b"") -> Awaitable[None]: ...


@final
@attrs.frozen(eq=False)
class ClientServices:
    """One client's internals, as the layers above its ledger API use them.

    - ``context``: the :class:`~walkit.ledger.ClientContext` its ledger handles share: the
      metadata store (``store``, ``ledgers``, ``retry_metadata``), the connection pool
      (``pool``, ``call``, ``read_order``), ``placement``, ``options`` (with the wall clock),
      ``rng``, ``loop``, ``task_group`` and ``metrics``.
    - ``delete_ledger``: the client's own deletion (password checked), and
      :meth:`ledger_cleanup`, the same bound to one log (a :class:`LedgerCleanup`).
    """

    context: ClientContext
    delete_ledger: DeleteLedger

    def ledger_cleanup(self, log_name: str, password: bytes) -> LedgerCleanup:
        """Deletion of log ``log_name``'s ledgers (``password``: the log's ledgers')."""
        return LedgerCleanup(self.delete_ledger, log_name, password)


@final
@attrs.frozen(eq=False)
class LedgerCleanup:
    """One log's clean-up of its ledgers: those that left its metadata (:meth:`delete`) and
    those that never made it in (:meth:`discard`). Both are best effort: a ledger left behind
    is garbage for the collector, never a hole in the log."""

    delete_ledger: DeleteLedger
    log_name: str
    password: bytes = attrs.field(repr=False)

    async def delete(self, ledger_ids: Sequence[int], why: str) -> None:
        """Delete ledgers that left the log's metadata (``why`` goes into the log event)."""
        for ledger_id in ledger_ids:
            try:
                await self.delete_ledger(ledger_id, password=self.password)
                log.info("log_ledger_deleted", log=self.log_name, ledger_id=ledger_id, why=why)
            except NoSuchLedgerError:
                pass
            except WalkitError as exc:
                log.warning(
                    "log_ledger_delete_failed",
                    log=self.log_name,
                    ledger_id=ledger_id,
                    error=str(exc),
                )

    async def discard(self, lw: LedgerWriter) -> None:
        """Close and delete a ledger that never made it into the log (shielded: it runs while
        the caller is being cancelled too)."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(_DISCARD_TIMEOUT):
            with contextlib.suppress(WalkitError):
                await lw.close()
            with contextlib.suppress(NoSuchLedgerError, WalkitError):
                await self.delete_ledger(lw.id, password=self.password)
