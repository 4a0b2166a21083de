"""The replication worker: takes one marked ledger at a time, rereplicates it, lets it go.

Every bookie runs one (unless ``--no-autorecovery``). A worker locks a ledger with an
ephemeral node of its client's metadata session, so a worker that crashes mid-copy loses its
lock with its session and another worker takes the ledger over; copies are idempotent, so the
second worker simply copies again.
"""

from __future__ import annotations

import random
import warnings
from collections import deque
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, final

import anyio
import anyio.abc

from walkit._logging import get_logger
from walkit.autorecovery._copy import LocalCopies
from walkit.autorecovery._metrics import AutorecoveryMetrics
from walkit.autorecovery._options import AutorecoveryOptions
from walkit.autorecovery._rereplicator import RereplicationOutcome, Rereplicator
from walkit.client import client_services
from walkit.errors import WalkitError
from walkit.metadata import UnderreplicationManager, WatchEvent, watch_bookies

if TYPE_CHECKING:
    from walkit.client import Client

log = get_logger(__name__)

__all__ = ["ReplicationWorker"]


async def _close(events: AsyncIterator[WatchEvent]) -> None:
    aclose: Any = getattr(events, "aclose", None)
    if aclose is not None:
        with anyio.CancelScope(shield=True):
            await aclose()


@final
class ReplicationWorker:
    """Rereplicates marked ledgers through ``client`` until cancelled (see module docs).

    ``local``: the bookie the worker runs in (see :class:`Rereplicator`)."""

    def __init__(
        self,
        client: Client,
        *,
        name: str,
        options: AutorecoveryOptions | None = None,
        metrics: AutorecoveryMetrics | None = None,
        rng: random.Random | None = None,
        local: LocalCopies | None = None,
    ) -> None:
        self.name = name
        self.options = options or AutorecoveryOptions()
        self.rereplicator = Rereplicator(client, self.options, metrics, local=local)
        self.urm = UnderreplicationManager(
            client.metadata_store, rng=client_services(client).context.rng
        )
        self.rng = rng or random.Random()
        self._wake = anyio.Event()
        #: Outcomes so far, for tests and status.
        self.outcomes: dict[RereplicationOutcome, int] = {}

    @property
    def healer(self) -> Rereplicator:
        """Deprecated: :attr:`rereplicator` (goes in the next release)."""
        warnings.warn(
            "ReplicationWorker.healer is deprecated: use .rereplicator",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.rereplicator

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        await self.urm.ensure_paths()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._follow, self.urm.watch())
            tasks.start_soon(self._follow, self.urm.watch_settings())
            # A bookie joining may be the replacement a marked ledger was waiting for.
            tasks.start_soon(self._follow, watch_bookies(self.urm.store))
            task_status.started()
            while True:
                self._wake = anyio.Event()
                try:
                    await self.run_once()
                except WalkitError as exc:
                    log.warning("replication_worker_pass_failed", worker=self.name, error=str(exc))
                with anyio.move_on_after(self.options.poll_interval):
                    await self._wake.wait()

    async def _follow(self, events: AsyncIterator[WatchEvent]) -> None:
        try:
            async for _ in events:
                self._wake.set()
        except WalkitError as exc:
            log.info("replication_worker_watch_ended", worker=self.name, error=str(exc))
        finally:
            await _close(events)

    async def run_once(self) -> int:
        """One pass over the markers; returns how many ledgers were rereplicated.

        A worker in a bookie first rereplicates the ledgers whose copies can go to its own bookie
        (stored without the network), then the ones it left (``RereplicationOutcome.DEFERRED``), unless
        another worker has rereplicated them meanwhile. Every pass also sets this bookie's
        under-replicated gauge (so every bookie exports it, not only the auditor's): passes
        follow the markers' watch, so it stays current.
        """
        ids = await self.urm.list_ids()
        self.rereplicator.forget_unmarked(ids)
        metrics = self.rereplicator.metrics
        metrics.underreplicated(len(ids))
        settings = await self.urm.settings()
        if not settings.enabled:
            return 0
        self.rng.shuffle(ids)  # workers of several bookies spread over the markers
        local_first = self.rereplicator.local is not None
        rereplicated = 0
        deferred: list[int] = []
        queue = deque((ledger_id, local_first) for ledger_id in ids)
        while queue or deferred:
            if not queue:
                queue.extend((ledger_id, False) for ledger_id in deferred)
                deferred.clear()
            ledger_id, local_only = queue.popleft()
            outcome = await self._take(ledger_id, local_only)
            if outcome is None:
                continue
            if outcome is RereplicationOutcome.DEFERRED:
                deferred.append(ledger_id)
                continue
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
            metrics.outcome(outcome.value)
            if outcome is RereplicationOutcome.REREPLICATED:
                rereplicated += 1
            settings = await self.urm.settings()
            if not settings.enabled:
                break
        if rereplicated:
            metrics.underreplicated(len(await self.urm.list_ids()))
        return rereplicated

    async def _take(self, ledger_id: int, local_only: bool) -> RereplicationOutcome | None:
        """Lock and rereplicate one ledger; None if another worker holds it or the attempt failed."""
        if not await self.urm.try_lock(ledger_id, self.name):
            return None
        try:
            return await self.rereplicator.rereplicate(ledger_id, local_only=local_only)
        except WalkitError as exc:
            said = self.rereplicator.last_problem.get(ledger_id) == str(exc)
            (log.debug if said else log.warning)(
                "rereplication_failed", worker=self.name, ledger_id=ledger_id, error=str(exc)
            )
            self.rereplicator.last_problem[ledger_id] = str(exc)
            self.rereplicator.metrics.outcome("failed")
            return None
        finally:
            with anyio.CancelScope(shield=True):
                try:
                    await self.urm.unlock(ledger_id)
                except WalkitError as exc:  # the session ended: the lock went with it
                    log.info("rereplication_unlock_failed", ledger_id=ledger_id, error=str(exc))
