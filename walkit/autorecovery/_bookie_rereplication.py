"""Rereplicating a whole bookie's ledgers now, for operators: ``walkit recover BOOKIE`` and ``walkit bookie decommission``.

``walkit recover`` is BookKeeper's ``shell recover`` (``recoverBookieData``): it rereplicates;
it is not the fencing recovery of one ledger (``walkit.ledger._recovery``).

``rereplicate_bookie`` marks every ledger that lists the bookie (so that, if this process dies,
the bookies' workers finish the job), then rereplicates them one by one under the same locks the
workers take. A ledger another worker holds is waited for.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, final

import anyio
import attrs

from walkit._core.types import BookieId
from walkit._logging import get_logger
from walkit.autorecovery._metrics import AutorecoveryMetrics
from walkit.autorecovery._options import AutorecoveryOptions
from walkit.autorecovery._rereplicator import RereplicationOutcome, Rereplicator
from walkit.client import client_services
from walkit.errors import (
    BookieUnavailableError,
    NoSuchLedgerError,
    NoSuchNodeError,
    RereplicationError,
    WalkitError,
)
from walkit.metadata import (
    UnderreplicationManager,
    delete_cookie,
    list_bookies,
    registration_path,
)

if TYPE_CHECKING:
    from walkit.client import Client

log = get_logger(__name__)

__all__ = ["RereplicationReport", "decommission_bookie", "ledgers_listing", "rereplicate_bookie"]


@final
@attrs.define
class RereplicationReport:
    bookie: BookieId
    ledgers: list[int] = attrs.Factory(list)
    rereplicated: list[int] = attrs.Factory(list)
    #: ledger id -> why it could not be rereplicated now (its marker stays)
    failed: dict[int, str] = attrs.Factory(dict)
    entries: int = 0
    bytes: int = 0
    #: Of ``entries``, those the replacements copied from the replicas themselves (the
    #: bytes did not pass through this process).
    entries_by_replacements: int = 0

    @property
    def ok(self) -> bool:
        return not self.failed

    @property
    def healed(self) -> list[int]:
        """Deprecated: :attr:`rereplicated` (goes in the next release)."""
        warnings.warn(
            "RereplicationReport.healed is deprecated: use .rereplicated",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.rereplicated


async def ledgers_listing(client: Client, bookie: BookieId) -> list[int]:
    """The ledgers whose metadata lists ``bookie`` in some fragment."""
    out = []
    for ledger_id in await client.list_ledgers():
        try:
            md = await client.ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            continue
        if bookie in md.all_bookies():
            out.append(ledger_id)
    return out


async def rereplicate_bookie(
    client: Client,
    bookie: BookieId,
    *,
    options: AutorecoveryOptions | None = None,
    owner: str = "walkit recover",
    on_ledger: Callable[[int, int, int], None] | None = None,
    on_entry: Callable[[int, int], None] | None = None,
    lock_wait: float = 60.0,
    parallel: int = 8,
) -> RereplicationReport:
    """Replace ``bookie`` in every ledger that lists it, now, in this task.

    ``parallel`` ledgers are rereplicated at once (the rate limits hold for all of them together).
    ``on_ledger(done, total, ledger_id)`` and ``on_entry(entries, bytes)`` report progress.
    Open ledgers are recovered (fenced and closed) at once: an operator asked for it.
    """
    opts = attrs.evolve(options or AutorecoveryOptions(), grace_period=0.0)
    metrics = AutorecoveryMetrics()
    rereplicator = Rereplicator(client, opts, metrics)
    urm = UnderreplicationManager(client.metadata_store, rng=client_services(client).context.rng)
    await urm.ensure_paths()
    report = RereplicationReport(bookie)
    report.ledgers = await ledgers_listing(client, bookie)
    for ledger_id in report.ledgers:
        await urm.mark(ledger_id, [bookie])
    total = len(report.ledgers)
    done = 0
    slots = anyio.Semaphore(max(1, parallel))

    async def rereplicate_one(ledger_id: int) -> None:
        nonlocal done
        async with slots:
            try:
                outcome = await _rereplicate_locked(
                    rereplicator, urm, ledger_id, owner, on_entry, lock_wait
                )
            except WalkitError as exc:
                report.failed[ledger_id] = str(exc)
            else:
                if outcome in (
                    RereplicationOutcome.NO_REPLACEMENT,
                    RereplicationOutcome.NEEDS_PASSWORD,
                ):
                    report.failed[ledger_id] = rereplicator.last_problem.get(
                        ledger_id, outcome.value
                    )
                else:
                    report.rereplicated.append(ledger_id)
            done += 1
            if on_ledger is not None:
                on_ledger(done, total, ledger_id)

    try:
        async with anyio.create_task_group() as tasks:
            for ledger_id in report.ledgers:
                tasks.start_soon(rereplicate_one, ledger_id)
    except BaseExceptionGroup as group:  # no group escapes a public call: its first leaf
        raise _first_leaf(group) from None
    report.rereplicated.sort()
    report.entries = metrics.entries_copied
    report.bytes = metrics.bytes_copied
    report.entries_by_replacements = metrics.entries_copied_by_replacements
    return report


def _first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


async def _rereplicate_locked(
    rereplicator: Rereplicator,
    urm: UnderreplicationManager,
    ledger_id: int,
    owner: str,
    on_entry: Callable[[int, int], None] | None,
    lock_wait: float,
) -> RereplicationOutcome:
    with anyio.move_on_after(lock_wait):
        while True:
            if await urm.try_lock(ledger_id, owner):
                try:
                    return await rereplicator.rereplicate(ledger_id, progress=on_entry)
                finally:
                    with anyio.CancelScope(shield=True):
                        await urm.unlock(ledger_id)
            # A worker holds it: it is rereplicating it now; wait until it lets go.
            if await urm.read(ledger_id) is None:
                return RereplicationOutcome.REREPLICATED
            await anyio.sleep(0.2)
    raise RereplicationError(
        f"ledger {ledger_id}: another worker held its lock for over {lock_wait:g} s"
    )


async def decommission_bookie(
    client: Client,
    bookie: BookieId,
    *,
    options: AutorecoveryOptions | None = None,
    on_ledger: Callable[[int, int, int], None] | None = None,
    on_entry: Callable[[int, int], None] | None = None,
) -> RereplicationReport:
    """Rereplicate everything ``bookie`` holds, then remove its cookie and registration.

    The bookie must be stopped or read-only (BookieUnavailableError otherwise: a writable
    bookie would keep receiving new ledgers). Its cookie stays if any ledger still lists it.
    """
    found = await list_bookies(client.metadata_store)
    if bookie in found.writable:
        raise BookieUnavailableError(
            f"bookie {bookie} is running and writable: stop it (or make it read-only) before "
            "decommissioning it"
        )
    report = await rereplicate_bookie(
        client, bookie, options=options, on_ledger=on_ledger, on_entry=on_entry
    )
    if report.failed or await ledgers_listing(client, bookie):
        return report
    store = client.metadata_store
    for path in (registration_path(bookie, read_only=True), registration_path(bookie)):
        try:
            await store.delete(path)
        except NoSuchNodeError:
            pass
    try:
        await delete_cookie(store, bookie)
    except NoSuchNodeError:
        pass
    log.info("bookie_decommissioned", bookie_id=str(bookie), ledgers=len(report.ledgers))
    return report
