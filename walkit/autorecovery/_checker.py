"""Finding copies missing on live bookies (BookKeeper's LedgerChecker).

For each fragment of a closed ledger, each bookie of its ensemble is asked for the first and
the last entry it should hold there, and for a few more picked at random (``samples``). A bookie that answers "no such entry" or "no such ledger"
lost its copy (a wiped disk under the same address, a bad restore) and is reported; one that
does not answer is left to the registration check (it is down, not empty).
"""

from __future__ import annotations

import random
from collections.abc import Collection
from typing import TYPE_CHECKING

import anyio

from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.rereplication import gaps_for
from walkit._core.types import BookieId
from walkit._core.wire import ReadRequest, StatusCode
from walkit._logging import get_logger
from walkit.errors import WalkitError

if TYPE_CHECKING:
    from walkit.ledger._context import ClientContext

log = get_logger(__name__)

__all__ = ["bookies_missing_entries"]

_MISSING = (StatusCode.NO_SUCH_ENTRY, StatusCode.NO_SUCH_LEDGER)


async def bookies_missing_entries(
    context: ClientContext,
    md: LedgerMetadata,
    live: Collection[BookieId],
    *,
    samples: int = 0,
    rng: random.Random | None = None,
) -> set[BookieId]:
    """The live bookies of closed ledger ``md`` that lack an entry they should hold (probing
    the first, the last and ``samples`` random entries of each fragment on each bookie)."""
    missing: set[BookieId] = set()
    probes: list[tuple[BookieId, int]] = []
    for gap in gaps_for(md, set(live) & md.all_bookies()):
        entries = list(gap.entries(md.ensemble_size, md.write_quorum))
        chosen = {entries[0], entries[-1]} if entries else set()
        if samples > 0 and rng is not None and len(entries) > 2:
            chosen.update(rng.sample(entries[1:-1], min(samples, len(entries) - 2)))
        probes.extend((gap.bookie, entry_id) for entry_id in sorted(chosen))

    async def probe(bookie: BookieId, entry_id: int) -> None:
        try:
            answer = await context.call(
                bookie, lambda rid: ReadRequest(rid, md.ledger_id, entry_id)
            )
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

    async with anyio.create_task_group() as tasks:
        for bookie, entry_id in probes:
            tasks.start_soon(probe, bookie, entry_id)
    return missing
