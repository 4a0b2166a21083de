"""Autorecovery: a lost bookie's ledgers are rereplicated with nobody's help (docs/autorecovery.md).

The words (the glossary of docs/architecture.md): *autorecovery* is this service, *rereplication*
copies a fragment's entries to a replacement bookie, and *recovery* fences and closes one ledger.

- :class:`Auditor`: one per cluster (elected); marks the ledgers of lost bookies.
- :class:`ReplicationWorker`: copies the lost copies to replacement bookies.
- :func:`run_autorecovery`: both; :func:`run_bookie_autorecovery`: the same, as a bookie runs it.
- :func:`rereplicate_bookie`, :func:`decommission_bookie`: the operator commands' engines.
"""

from __future__ import annotations

import warnings
from typing import Any

from walkit.autorecovery._auditor import Auditor
from walkit.autorecovery._bookie_rereplication import (
    RereplicationReport,
    decommission_bookie,
    ledgers_listing,
    rereplicate_bookie,
)
from walkit.autorecovery._copy import LocalCopies
from walkit.autorecovery._metrics import AutorecoveryMetrics
from walkit.autorecovery._options import AutorecoveryOptions
from walkit.autorecovery._rereplicator import RereplicationOutcome, Rereplicator
from walkit.autorecovery._run import run_autorecovery
from walkit.autorecovery._service import run_bookie_autorecovery
from walkit.autorecovery._worker import ReplicationWorker
from walkit.metadata import (
    AutorecoveryClusterSettings,
    UnderreplicatedLedger,
    UnderreplicationManager,
    collect_overreplicated,
)

__all__ = [
    "Auditor",
    "AutorecoveryClusterSettings",
    "AutorecoveryMetrics",
    "AutorecoveryOptions",
    "LocalCopies",
    "ReplicationWorker",
    "RereplicationOutcome",
    "RereplicationReport",
    "Rereplicator",
    "UnderreplicatedLedger",
    "UnderreplicationManager",
    "collect_overreplicated",
    "decommission_bookie",
    "ledgers_listing",
    "rereplicate_bookie",
    "run_autorecovery",
    "run_bookie_autorecovery",
]

#: Names this package had before the words were settled -> their names now. Deprecated: the
#: old names warn, and go in the next release.
_RENAMED = {
    "AutorecoverySettings": "AutorecoveryClusterSettings",
    "HealOutcome": "RereplicationOutcome",
    "Healer": "Rereplicator",
    "RecoveryReport": "RereplicationReport",
    "recover_bookie": "rereplicate_bookie",
}


def __getattr__(name: str) -> Any:
    new = _RENAMED.get(name)
    if new is None:
        raise AttributeError(f"module 'walkit.autorecovery' has no attribute {name!r}")
    warnings.warn(
        f"walkit.autorecovery.{name} is deprecated: use walkit.autorecovery.{new}",
        DeprecationWarning,
        stacklevel=2,
    )
    return globals()[new]
