"""The auditor: one per cluster, elected through the metadata store; it marks ledgers.

While it leads it:

- follows the bookie registrations; a bookie that has been gone for the lost-bookie delay
  (``walkit autorecovery delay``; set at run time, stored in the metadata) gets every ledger
  that lists it marked under-replicated;
- every ``check_interval`` seconds (and when it takes office) checks every ledger: fragments
  listing bookies that are not registered, and (``check_entries``) copies missing on live
  bookies (see :mod:`walkit.autorecovery._checker`);
- publishes the number of marked ledgers as a metric.

Nothing is marked while autorecovery is disabled (``walkit autorecovery disable``).
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any, final

import anyio
import anyio.abc

from walkit._core.ledger_metadata import LedgerState
from walkit._core.rereplication import LostBookies
from walkit._core.types import BookieId
from walkit._logging import get_logger
from walkit.autorecovery._checker import bookies_missing_entries
from walkit.autorecovery._metrics import AutorecoveryMetrics
from walkit.autorecovery._options import AutorecoveryOptions
from walkit.client import client_services
from walkit.errors import InvalidMetadataError, NoSuchLedgerError, WalkitError
from walkit.metadata import UnderreplicationManager, WatchEvent, list_bookies, watch_bookies
from walkit.metadata._underreplication import AUDITOR_PATH
from walkit.recipes import LeaderElection

if TYPE_CHECKING:
    from walkit.client import Client

log = get_logger(__name__)

__all__ = ["Auditor"]


@final
class Auditor:
    """A candidate for the cluster's auditor (see module docs); run until cancelled."""

    def __init__(
        self,
        client: Client,
        *,
        name: str,
        options: AutorecoveryOptions | None = None,
        metrics: AutorecoveryMetrics | None = None,
        rng: random.Random | None = None,
        store_options: dict[str, Any] | None = None,
    ) -> None:
        self.client = client
        #: The client's internals (metadata store, pool, randomness).
        self._context = client_services(client).context
        self.name = name
        self.options = options or AutorecoveryOptions()
        self.metrics = metrics or AutorecoveryMetrics()
        self.urm = UnderreplicationManager(client.metadata_store, rng=self._context.rng)
        self.rng = rng or random.Random()
        self.election = LeaderElection(
            client.url,
            AUDITOR_PATH,
            advertise=name,
            lease_timeout=self.options.election_lease,
            rng=self.rng,
            store_options=store_options,
        )
        self.lost = LostBookies()
        #: Bookies already handled (their ledgers marked) since they went away.
        self._marked: set[BookieId] = set()
        self._wake = anyio.Event()
        #: Completed checks (for tests).
        self.checks = 0
        #: The bookies the last check marked ledgers for.
        self._marked_for: set[BookieId] = set()

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        async with anyio.create_task_group() as tasks:
            await tasks.start(self.election.run)
            task_status.started()
            while True:
                generation = self.election.generation
                if self.election.is_leader:
                    log.info("auditor_elected", auditor=self.name)
                    with anyio.CancelScope() as scope:
                        tasks.start_soon(self._step_down_watch, generation, scope)
                        await self._audit()
                    log.info("auditor_stepped_down", auditor=self.name)
                else:
                    await self.election.wait_changed(generation)

    async def _step_down_watch(self, generation: int, scope: anyio.CancelScope) -> None:
        await self.election.wait_changed(generation)
        scope.cancel()

    async def _follow(self, events: AsyncIterator[WatchEvent]) -> None:
        try:
            async for _ in events:
                self._wake.set()
        except WalkitError as exc:
            log.info("auditor_watch_ended", error=str(exc))
        finally:
            aclose: Any = getattr(events, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()

    async def _audit(self) -> None:
        await self.urm.ensure_paths()
        self.lost = LostBookies()
        self._marked = set()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._follow, watch_bookies(self.client.metadata_store))
            tasks.start_soon(self._follow, self.urm.watch_settings())
            next_check = anyio.current_time()
            registered_before: set[BookieId] = set()
            while True:
                self._wake = anyio.Event()
                wait = self.options.poll_interval
                try:
                    found = await list_bookies(self.client.metadata_store)
                    registered = set(found.writable) | set(found.readonly)
                    now = anyio.current_time()
                    self.lost.update(registered, registered_before - registered, now)
                    self._marked &= set(self.lost.since)
                    registered_before = registered
                    settings = await self.urm.settings()
                    due = self.lost.due(now, settings.lost_bookie_delay)
                    full = now >= next_check
                    if settings.enabled and (full or due - self._marked):
                        await self.check(
                            registered,
                            due,
                            entries=full and self.options.check_entries,
                            delay=settings.lost_bookie_delay,
                        )
                        self._marked |= due | self._marked_for
                        if full:
                            next_check = now + self.options.check_interval
                    deadline = self.lost.next_deadline(
                        anyio.current_time(), settings.lost_bookie_delay
                    )
                    wait = next_check - anyio.current_time()
                    if deadline is not None:
                        wait = min(wait, deadline - anyio.current_time())
                    # A check finds bookies gone that no watch reported (this auditor just
                    # took office, say, after the last one died with its bookie): with a delay
                    # shorter than the check they are due already, and have no deadline left.
                    now = anyio.current_time()
                    if settings.enabled and self.lost.due(now, settings.lost_bookie_delay) - (
                        self._marked
                    ):
                        wait = 0.0
                except WalkitError as exc:
                    log.warning("auditor_check_failed", auditor=self.name, error=str(exc))
                with anyio.move_on_after(max(0.0, wait)):
                    await self._wake.wait()

    async def check(
        self,
        registered: set[BookieId],
        due: set[BookieId],
        *,
        entries: bool = False,
        delay: float | None = None,
    ) -> int:
        """Check every ledger: mark those listing a bookie in ``due``; remember the other
        unregistered bookies they list (their delay starts now). With ``delay`` (the
        lost-bookie delay), a bookie this check finds gone is marked in it too once that delay
        is over: with a delay of 0, a new auditor marks a bookie lost before it took office in
        its first check, not in a second pass over every ledger. Returns the ledgers marked."""
        context = self._context
        marked = 0
        marked_for: set[BookieId] = set()
        now = anyio.current_time()
        for ledger_id in await context.ledgers.list_ids():
            try:
                md, _version = await context.read_metadata(ledger_id)
            except NoSuchLedgerError:
                continue
            except InvalidMetadataError as exc:
                log.warning("auditor_ledger_unreadable", ledger_id=ledger_id, error=str(exc))
                continue
            listed = md.all_bookies()
            gone = listed - registered
            self.lost.update(registered, gone, now)
            to_mark = gone & due
            if delay is not None and gone:
                to_mark |= gone & self.lost.due(now, delay)
            if entries and md.state is LedgerState.CLOSED:
                to_mark |= await bookies_missing_entries(
                    context,
                    md,
                    listed & registered,
                    samples=self.options.check_samples,
                    rng=self.rng,
                )
            if to_mark and await self.urm.mark(ledger_id, to_mark):
                marked += 1
            marked_for |= to_mark
        self.checks += 1
        self._marked_for = marked_for
        self.metrics.underreplicated(len(await self.urm.list_ids()))
        log.info("auditor_check_done", auditor=self.name, newly_marked=marked)
        return marked
