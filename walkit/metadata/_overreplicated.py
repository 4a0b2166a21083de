"""The garbage collector's check for over-replicated copies, through the metadata store.

The decision is :func:`walkit._core.overreplication.overreplicated`; this reads what it needs.
The check takes the ledger's rereplication lock and reads the metadata again under it, so no
worker can copy to this bookie and CAS it in between the check and the deletion (BookKeeper's
GC takes the same lock).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.overreplication import overreplicated
from walkit._core.types import BookieId
from walkit._logging import get_logger
from walkit.errors import InvalidMetadataError, NoSuchLedgerError, WalkitError
from walkit.metadata._ledgers import LedgerManager
from walkit.metadata._store import MetadataStore
from walkit.metadata._underreplication import UnderreplicationManager

log = get_logger(__name__)

__all__ = ["collect_overreplicated"]


async def _metadata(ledgers: LedgerManager, ledger_id: int) -> LedgerMetadata | None:
    try:
        md, _version = await ledgers.read(ledger_id)
    except (NoSuchLedgerError, InvalidMetadataError):
        return None
    return md


async def collect_overreplicated(
    store: MetadataStore,
    bookie: BookieId,
    ledger_ids: Iterable[int],
    forget: Callable[[list[int]], Awaitable[None]],
) -> list[int]:
    """Forget (through ``forget``) the ledgers of ``ledger_ids`` that ``bookie`` holds
    over-replicated copies of (see :mod:`walkit._core.overreplication`); return them.
    Metadata errors skip a ledger."""
    ledgers = LedgerManager(store)
    urm = UnderreplicationManager(store)
    owner = f"gc:{bookie}"
    forgotten: list[int] = []
    for ledger_id in sorted(ledger_ids):
        try:
            if not overreplicated(await _metadata(ledgers, ledger_id), bookie):
                continue
            if not await urm.try_lock(ledger_id, owner):
                continue  # a worker is on it
            try:
                marked = await urm.read(ledger_id) is not None
                if not overreplicated(await _metadata(ledgers, ledger_id), bookie, marked=marked):
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
