"""walkit's bookie: the storage server of the replication protocol.

Run one with ``walkit-bookie --data-dir DIR --port 3181`` or embed it::

    bookie = Bookie(BookieConfig(data_dirs=["/var/lib/walkit/bookie"]))
    bookie_id = await nursery.start(bookie.run)

The package has three rooms whose imports run one way, ``lifecycle`` -> ``server`` ->
``storage``; all three read ``BookieConfig``. See docs/bookie.md.
"""

from walkit.shared import bookie_hint, missing_bookie_modules

if _missing := missing_bookie_modules():
    # A client install (no bookie extra): say what to install, not which import failed.
    raise ModuleNotFoundError(bookie_hint("walkit_bookie", _missing), name=_missing[0])

from walkit.errors import CookieError
from walkit_bookie._config import BookieConfig
from walkit_bookie.lifecycle import Bookie
from walkit_bookie.storage import (
    BookieStorage,
    DiskStorage,
    LedgerInfo,
    MemoryStorage,
    StorageStats,
)

__all__ = [
    "Bookie",
    "BookieConfig",
    "BookieStorage",
    "CookieError",
    "DiskStorage",
    "LedgerInfo",
    "MemoryStorage",
    "StorageStats",
]
