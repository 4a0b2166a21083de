"""walkit's bookie: the storage server of the replication protocol.

Run one with ``walkit-bookie --data-dir DIR --port 3181`` or embed it::

    bookie = Bookie(BookieConfig(data_dirs=["/var/lib/walkit/bookie"]))
    bookie_id = await nursery.start(bookie.run)

See docs/bookie.md.
"""

from walkit_bookie._bookie import Bookie
from walkit_bookie._config import BookieConfig
from walkit_bookie._ledger import LedgerInfo
from walkit_bookie._memory import MemoryStorage
from walkit_bookie._storage import BookieStorage, DiskStorage, StorageStats

__all__ = [
    "Bookie",
    "BookieConfig",
    "BookieStorage",
    "DiskStorage",
    "LedgerInfo",
    "MemoryStorage",
    "StorageStats",
]
