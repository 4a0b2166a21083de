"""Autorecovery: ledgers heal by themselves when a bookie is lost (see docs/autorecovery.md).

- :class:`Auditor`: one per cluster (elected); marks the ledgers of lost bookies.
- :class:`ReplicationWorker`: copies the lost copies to replacement bookies.
- :func:`run_autorecovery`: both; :func:`run_bookie_autorecovery`: the same, as a bookie runs it.
- :func:`recover_bookie`, :func:`decommission_bookie`: the operator commands' engines.
"""

from __future__ import annotations

from walkit.autorecovery._auditor import Auditor
from walkit.autorecovery._copy import LocalCopies
from walkit.autorecovery._rereplicator import Healer, HealOutcome
from walkit.autorecovery._metrics import AutorecoveryMetrics
from walkit.autorecovery._options import AutorecoveryOptions
from walkit.autorecovery._bookie_rereplication import (
    RecoveryReport,
    decommission_bookie,
    ledgers_listing,
    recover_bookie,
)
from walkit.autorecovery._run import run_autorecovery
from walkit.autorecovery._service import run_bookie_autorecovery
from walkit.autorecovery._worker import ReplicationWorker
from walkit.metadata import (
    AutorecoverySettings,
    UnderreplicatedLedger,
    UnderreplicationManager,
    collect_overreplicated,
)

__all__ = [
    "Auditor",
    "AutorecoveryMetrics",
    "AutorecoveryOptions",
    "AutorecoverySettings",
    "HealOutcome",
    "Healer",
    "LocalCopies",
    "RecoveryReport",
    "ReplicationWorker",
    "UnderreplicatedLedger",
    "UnderreplicationManager",
    "collect_overreplicated",
    "decommission_bookie",
    "ledgers_listing",
    "recover_bookie",
    "run_autorecovery",
    "run_bookie_autorecovery",
]
