"""Run an auditor candidate and a replication worker through one client."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from walkit.autorecovery._auditor import Auditor
from walkit.autorecovery._copy import LocalCopies
from walkit.autorecovery._metrics import AutorecoveryMetrics
from walkit.autorecovery._options import AutorecoveryOptions
from walkit.autorecovery._remote_copy import FragmentCopier
from walkit.autorecovery._rereplicator import Rereplicator
from walkit.autorecovery._worker import ReplicationWorker
from walkit.client import client_services
from walkit.metadata import UnderreplicationManager

if TYPE_CHECKING:
    from walkit.client import Client

__all__ = ["run_autorecovery"]


async def run_autorecovery(
    client: Client,
    *,
    name: str,
    options: AutorecoveryOptions | None = None,
    registry: Any = None,
    rng: random.Random | None = None,
    lost_bookie_delay: float | None = None,
    local: LocalCopies | None = None,
    background: bool = True,
    fragment_copies: bool = True,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run an auditor candidate and a replication worker through ``client`` until cancelled.

    ``lost_bookie_delay`` is stored as the cluster's delay unless one is stored already
    (change it at run time with ``walkit autorecovery delay SECONDS``). ``registry``: a
    prometheus registry for the metrics. ``local``: the bookie this runs in, which then takes
    copies itself where its rack allows (see :class:`~walkit.autorecovery.Rereplicator`), and,
    with ``fragment_copies``, answers the COPY_FRAGMENT requests of rereplicators elsewhere.
    ``background``: False runs no auditor candidate or worker (only those answers).
    """
    rng = rng or random.Random()
    options = options or AutorecoveryOptions()
    metrics = AutorecoveryMetrics(registry)
    urm = UnderreplicationManager(client.metadata_store, rng=client_services(client).context.rng)
    await urm.ensure_paths()
    if lost_bookie_delay is not None:
        await urm.init_settings(lost_bookie_delay)
    try:
        async with anyio.create_task_group() as tasks:
            rereplicator: Rereplicator | None = None
            if background:
                auditor = Auditor(client, name=name, options=options, metrics=metrics, rng=rng)
                worker = ReplicationWorker(
                    client, name=name, options=options, metrics=metrics, rng=rng, local=local
                )
                await tasks.start(auditor.run)
                await tasks.start(worker.run)
                rereplicator = worker.rereplicator
            if local is not None and fragment_copies:
                # The bookie copies fragments asked of it through this client.
                rereplicator = rereplicator or Rereplicator(client, options, metrics, local=local)
                copier = FragmentCopier(
                    client,
                    local,
                    password_for=rereplicator.password_for,
                    window=options.window,
                    metrics=metrics,
                )
                local.serve_fragment_copies(copier)
                tasks.start_soon(anyio.sleep_forever)
            task_status.started()
    finally:
        if local is not None and fragment_copies:
            local.serve_fragment_copies(None)
