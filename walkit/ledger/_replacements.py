"""Which bookies replace the failed ones of a writer's ensemble (an ensemble change)."""

from __future__ import annotations

from collections.abc import Set

from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.types import BookieId
from walkit.errors import NotEnoughBookiesError
from walkit.ledger._context import ClientContext

__all__ = ["choose_replacements"]

#: Seconds during which a bookie that failed is not chosen as a replacement, if others can be.
AVOID_RECENTLY_FAILED = 10.0


def choose_replacements(
    context: ClientContext,
    md: LedgerMetadata,
    current: tuple[BookieId, ...],
    slots: Set[int],
    refused: Set[BookieId],
) -> dict[int, BookieId]:
    """A new bookie for each slot of ``current``, from the placement policy, never one of
    ``refused`` (they refuse this ledger's key). Bookies that failed in the last seconds are
    avoided while others are available. NotEnoughBookiesError when a slot has none."""
    now = context.loop.time()
    recent = {b for b, t in context.pool.failure_history.items() if now - t < AVOID_RECENTLY_FAILED}
    try:
        return _choose(context, md, current, slots, set(refused) | recent)
    except NotEnoughBookiesError:
        return _choose(context, md, current, slots, set(refused))


def _choose(
    context: ClientContext,
    md: LedgerMetadata,
    current: tuple[BookieId, ...],
    slots: Set[int],
    avoid: set[BookieId],
) -> dict[int, BookieId]:
    exclude = set(current) | avoid
    replacements: dict[int, BookieId] = {}
    for slot in sorted(slots):
        try:
            chosen = context.placement.replace_bookie(
                md.ensemble_size,
                md.write_quorum,
                md.ack_quorum,
                current,
                current[slot],
                frozenset(exclude),
                md.custom_metadata,
            )
        except NotEnoughBookiesError as exc:
            raise NotEnoughBookiesError(
                f"ledger {md.ledger_id}: no bookie to replace {current[slot]}: {exc}"
            ) from None
        replacements[slot] = chosen
        exclude.add(chosen)
    return replacements
