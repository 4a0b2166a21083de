"""Autorecovery: ledgers heal by themselves when a bookie is lost (see docs/autorecovery.md).

- :class:`Auditor`: one per cluster (elected); marks the ledgers of lost bookies.
- :class:`ReplicationWorker`: copies the lost copies to replacement bookies.
- :func:`run_autorecovery`: both; :func:`run_bookie_autorecovery`: the same, as a bookie runs it.
- :func:`recover_bookie`, :func:`decommission_bookie`: the operator commands' engines.
"""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import trio

from walkit.autorecovery._auditor import Auditor
from walkit.autorecovery._heal import Healer, HealOutcome
from walkit.autorecovery._metrics import AutorecoveryMetrics
from walkit.autorecovery._options import AutorecoveryOptions
from walkit.autorecovery._overreplicated import collect_overreplicated
from walkit.autorecovery._recover import (
    RecoveryReport,
    decommission_bookie,
    ledgers_listing,
    recover_bookie,
)
from walkit.autorecovery._service import run_bookie_autorecovery
from walkit.autorecovery._worker import ReplicationWorker
from walkit.metadata import AutorecoverySettings, UnderreplicatedLedger, UnderreplicationManager

if TYPE_CHECKING:
    from walkit.client import Client

__all__ = [
    "Auditor",
    "AutorecoveryMetrics",
    "AutorecoveryOptions",
    "AutorecoverySettings",
    "HealOutcome",
    "Healer",
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


async def run_autorecovery(
    client: Client,
    *,
    name: str,
    options: AutorecoveryOptions | None = None,
    registry: Any = None,
    rng: random.Random | None = None,
    lost_bookie_delay: float | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run an auditor candidate and a replication worker through ``client`` until cancelled.

    ``lost_bookie_delay`` is stored as the cluster's delay unless one is stored already
    (change it at run time with ``walkit autorecovery delay SECONDS``). ``registry``: a
    prometheus registry for the metrics.
    """
    rng = rng or random.Random()
    options = options or AutorecoveryOptions()
    metrics = AutorecoveryMetrics(registry)
    urm = UnderreplicationManager(client.metadata_store)
    await urm.ensure_paths()
    if lost_bookie_delay is not None:
        await urm.init_settings(lost_bookie_delay)
    async with trio.open_nursery() as nursery:
        auditor = Auditor(client, name=name, options=options, metrics=metrics, rng=rng)
        worker = ReplicationWorker(client, name=name, options=options, metrics=metrics, rng=rng)
        await nursery.start(auditor.run)
        await nursery.start(worker.run)
        task_status.started()
