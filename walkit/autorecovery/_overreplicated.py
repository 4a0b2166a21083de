"""Over-replicated copies: ledgers a bookie holds that no longer list it (for its GC).

After a bookie is replaced in a ledger while it was alive (a copy found missing by the
auditor's check, ``walkit recover`` of a live bookie, a worker that copied to one bookie and
then lost its CAS and chose another), it keeps entries nobody will read. A bookie's garbage
collector calls :func:`collect_overreplicated` with the ledgers it holds; each one returned
may be forgotten.

A ledger qualifies only when it is CLOSED (an open or recovering ledger may be about to list
this bookie: ensemble changes and recovery write to a replacement before they CAS it in),
does not list this bookie in any fragment, and is neither marked nor locked. The check takes
the ledger's rereplication lock itself and reads the metadata again under it, so no worker can
copy to this bookie and CAS it in between the check and the deletion (BookKeeper's GC takes
the same lock). Only whole ledgers are collected; a bookie still listed in some fragment
keeps the ledger's entries of the others.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from walkit._core.ledger_metadata import LedgerState
from walkit._core.types import BookieId
from walkit._logging import get_logger
from walkit.errors import InvalidMetadataError, NoSuchLedgerError, WalkitError
from walkit.metadata import LedgerManager, MetadataStore, UnderreplicationManager

log = get_logger(__name__)

__all__ = ["collect_overreplicated"]


async def _unlisted(ledgers: LedgerManager, ledger_id: int, bookie: BookieId) -> bool:
    try:
        md, _version = await ledgers.read(ledger_id)
    except (NoSuchLedgerError, InvalidMetadataError):
        return False  # deleted ledgers are the ordinary GC's business
    return md.state is LedgerState.CLOSED and bookie not in md.all_bookies()


async def collect_overreplicated(
    store: MetadataStore,
    bookie: BookieId,
    ledger_ids: Iterable[int],
    forget: Callable[[list[int]], Awaitable[None]],
) -> list[int]:
    """Forget (through ``forget``) the ledgers of ``ledger_ids`` that no longer list
    ``bookie`` (see the module docs); return them. Metadata errors skip a ledger."""
    ledgers = LedgerManager(store)
    urm = UnderreplicationManager(store)
    owner = f"gc:{bookie}"
    forgotten: list[int] = []
    for ledger_id in sorted(ledger_ids):
        try:
            if not await _unlisted(ledgers, ledger_id, bookie):
                continue
            if not await urm.try_lock(ledger_id, owner):
                continue  # a worker is on it
            try:
                if await urm.read(ledger_id) is not None:
                    continue  # marked: it is about to be healed, maybe onto this bookie
                if not await _unlisted(ledgers, ledger_id, bookie):
                    continue
                await forget([ledger_id])
                forgotten.append(ledger_id)
            finally:
                await urm.unlock(ledger_id)
        except WalkitError as exc:
            log.warning("gc_overreplicated_check_failed", ledger_id=ledger_id, error=str(exc))
    if forgotten:
        log.info(
            "gc_overreplicated_ledgers_deleted",
            bookie_id=str(bookie),
            count=len(forgotten),
            first=forgotten[0],
            last=forgotten[-1],
        )
    return forgotten
