"""The bookie's storage room: journal and group commit, entry logs, index, compaction, garbage
collection, the per-ledger state, and the data dirs' cookie.

Nothing here imports :mod:`walkit_bookie.server` or :mod:`walkit_bookie.lifecycle`; the rooms
above reach storage through the names below.
"""

from walkit_bookie.storage._compaction_plan import CompactionResult, EntryLogUsage
from walkit_bookie.storage._cookie import LAYOUT_VERSION
from walkit_bookie.storage._gc import GarbageCollector, GcReport
from walkit_bookie.storage._journal import GroupCommit
from walkit_bookie.storage._ledger import (
    LedgerInfo,
    StoredEntry,
    apply_request,
    stored_entry_decision,
)
from walkit_bookie.storage._memory import MemoryStorage
from walkit_bookie.storage._storage import BookieStorage, DiskStorage, StorageStats

__all__ = [
    "LAYOUT_VERSION",
    "BookieStorage",
    "CompactionResult",
    "DiskStorage",
    "EntryLogUsage",
    "GarbageCollector",
    "GcReport",
    "GroupCommit",
    "LedgerInfo",
    "MemoryStorage",
    "StorageStats",
    "StoredEntry",
    "apply_request",
    "stored_entry_decision",
]
