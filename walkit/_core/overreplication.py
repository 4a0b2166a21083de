"""Over-replicated copies: whether a bookie may forget a ledger that no longer lists it.

After a bookie is replaced in a ledger while it was alive (a copy found missing by the
auditor's check, ``walkit recover`` of a live bookie, a worker that copied to one bookie and
then lost its CAS and chose another), it keeps entries nobody will read. Its garbage collector
asks, for each ledger it holds, whether the copy is over-replicated.

Only a CLOSED ledger qualifies: an open or recovering ledger may be about to list this bookie
(ensemble changes and recovery write to a replacement before they CAS it in). Only whole
ledgers: a bookie still listed in some fragment keeps the ledger's entries of the others. A
ledger marked under-replicated is about to be rereplicated, maybe onto this bookie, so it is kept
too (BookKeeper's GC skips the ledgers under its rereplication lock for the same reason).
"""

from __future__ import annotations

from walkit._core.ledger_metadata import LedgerMetadata, LedgerState
from walkit._core.types import BookieId

__all__ = ["overreplicated"]


def overreplicated(md: LedgerMetadata | None, bookie: BookieId, *, marked: bool = False) -> bool:
    """Whether ``bookie`` may forget its copy of the ledger ``md`` describes (None: no
    metadata, deleted or unreadable, which is the ordinary GC's business, not this one's)."""
    if md is None or marked:
        return False
    return md.state is LedgerState.CLOSED and bookie not in md.all_bookies()
