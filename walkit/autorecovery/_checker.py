"""Finding copies missing on live bookies (BookKeeper's LedgerChecker).

For each fragment of a closed ledger, each bookie of its ensemble is asked for the first and
the last entry it should hold there. A bookie that answers "no such entry" or "no such ledger"
lost its copy (a wiped disk under the same address, a bad restore) and is reported; one that
does not answer is left to the registration check (it is down, not empty).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

import trio

from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.rereplication import gaps_for
from walkit._core.types import BookieId
from walkit._core.wire import ReadRequest, StatusCode
from walkit._logging import get_logger
from walkit.errors import WalkitError

if TYPE_CHECKING:
    from walkit.ledger._core import ClientCore

log = get_logger(__name__)

__all__ = ["bookies_missing_entries"]

_MISSING = (StatusCode.NO_SUCH_ENTRY, StatusCode.NO_SUCH_LEDGER)


async def bookies_missing_entries(
    core: ClientCore, md: LedgerMetadata, live: Collection[BookieId]
) -> set[BookieId]:
    """The live bookies of closed ledger ``md`` that lack an entry they should hold."""
    missing: set[BookieId] = set()
    probes: list[tuple[BookieId, int]] = []
    for gap in gaps_for(md, set(live) & md.all_bookies()):
        entries = list(gap.entries(md.ensemble_size, md.write_quorum))
        for entry_id in {entries[0], entries[-1]} if entries else ():
            probes.append((gap.bookie, entry_id))

    async def probe(bookie: BookieId, entry_id: int) -> None:
        try:
            answer = await core.call(bookie, lambda rid: ReadRequest(rid, md.ledger_id, entry_id))
        except WalkitError:
            return  # unreachable: not evidence of a lost copy
        if answer.status in _MISSING:
            if bookie not in missing:
                log.warning(
                    "ledger_copy_missing_on_live_bookie",
                    ledger_id=md.ledger_id,
                    entry_id=entry_id,
                    bookie_id=str(bookie),
                )
            missing.add(bookie)

    async with trio.open_nursery() as nursery:
        for bookie, entry_id in probes:
            nursery.start_soon(probe, bookie, entry_id)
    return missing
