"""Metadata stores: ZooKeeper (kazoo), sqlite (embedded default) and memory, and the cluster
layout on top of them (instance id, ledgers, bookie registration, cookies).

See docs/metadata.md.
"""

import warnings
from typing import Any

from walkit.metadata._bookies import (
    BookieList,
    cookie_path,
    delete_cookie,
    list_bookies,
    read_cookie,
    register_bookie,
    registration_path,
    set_bookie_read_only,
    watch_bookies,
    write_cookie,
)
from walkit.metadata._cas import Decision, cas_update, lost_race
from walkit.metadata._cluster import (
    BOOKIES_AVAILABLE_PATH,
    BOOKIES_COOKIES_PATH,
    BOOKIES_READONLY_PATH,
    INSTANCE_ID_PATH,
    LEDGERS_PATH,
    LOGS_PATH,
    ensure_cluster,
)
from walkit.metadata._dump import Export, export_metadata, import_metadata, migrate_metadata
from walkit.metadata._ledgers import LedgerManager, ledger_id_from_path, ledger_path
from walkit.metadata._memory import MemoryMetadataStore, forget_memory_tree
from walkit.metadata._open import open_metadata_store
from walkit.metadata._overreplicated import collect_overreplicated
from walkit.metadata._store import (
    MAX_VALUE_SIZE,
    MetadataStore,
    StoredNode,
    Versioned,
    WatchEvent,
    WatchEventKind,
)
from walkit.metadata._underreplication import (
    AutorecoveryClusterSettings,
    UnderreplicatedLedger,
    UnderreplicationManager,
)
from walkit.metadata._watch import WatchStream

__all__ = [
    "BOOKIES_AVAILABLE_PATH",
    "BOOKIES_COOKIES_PATH",
    "BOOKIES_READONLY_PATH",
    "INSTANCE_ID_PATH",
    "LEDGERS_PATH",
    "LOGS_PATH",
    "MAX_VALUE_SIZE",
    "AutorecoveryClusterSettings",
    "BookieList",
    "Decision",
    "Export",
    "LedgerManager",
    "MemoryMetadataStore",
    "MetadataStore",
    "StoredNode",
    "UnderreplicatedLedger",
    "UnderreplicationManager",
    "Versioned",
    "WatchEvent",
    "WatchEventKind",
    "WatchStream",
    "cas_update",
    "collect_overreplicated",
    "cookie_path",
    "delete_cookie",
    "ensure_cluster",
    "export_metadata",
    "forget_memory_tree",
    "import_metadata",
    "ledger_id_from_path",
    "ledger_path",
    "list_bookies",
    "lost_race",
    "migrate_metadata",
    "open_metadata_store",
    "read_cookie",
    "register_bookie",
    "registration_path",
    "set_bookie_read_only",
    "watch_bookies",
    "write_cookie",
]


def __getattr__(name: str) -> Any:
    # The cluster-wide settings were AutorecoverySettings, a name too close to the per-process
    # AutorecoveryOptions; the old name warns, and goes in the next release.
    if name == "AutorecoverySettings":
        warnings.warn(
            "walkit.metadata.AutorecoverySettings is deprecated: use "
            "walkit.metadata.AutorecoveryClusterSettings",
            DeprecationWarning,
            stacklevel=2,
        )
        return AutorecoveryClusterSettings
    raise AttributeError(f"module 'walkit.metadata' has no attribute {name!r}")
