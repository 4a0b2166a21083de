"""A writer's ensemble changes: one at a time, in a task of the writer's, backing off when they
follow each other without progress.

When a bookie of the write set fails, the writer replaces it (BookKeeper's protocol document,
"Ensemble changes"): :class:`walkit._core.add_tracker.AddTracker` decides from which entry and
for which slots, the writer commits the new fragment to the ledger's metadata, and the entries
the failed bookies did not acknowledge are sent again to their replacements. Changes that
follow each other with no entry acknowledged in between back off
(:func:`walkit._core.ensemble_change.change_backoff`), with jitter from the injected generator.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from typing import final

import anyio
import anyio.abc

from walkit._core.add_tracker import AddTracker
from walkit._core.ensemble_change import change_backoff
from walkit._logging import get_logger
from walkit.errors import ClientClosedError, WalkitError

log = get_logger(__name__)

__all__ = ["EnsembleChanges"]

#: Entries to send again, per slot of the ensemble: (entry id, packet).
Resend = list[list[tuple[int, bytes]]]


@final
class EnsembleChanges:
    """The ensemble changes of one ledger writer (see the module docs).

    ``commit(first_entry, slots)`` writes the new fragment to the metadata and points the
    writer's slots at their replacements; ``resend(per_slot, lac)`` queues entries again;
    ``fail(error)`` stops the writer and ``failed()`` says it has stopped."""

    def __init__(
        self,
        ledger_id: int,
        tracker: AddTracker,
        rng: random.Random,
        *,
        slots: int,
        commit: Callable[[int, frozenset[int]], Awaitable[None]],
        resend: Callable[[Resend, int], None],
        fail: Callable[[WalkitError], None],
        failed: Callable[[], bool],
    ) -> None:
        self._ledger_id = ledger_id
        self._tracker = tracker
        self._rng = rng
        self._slots = slots
        self._commit = commit
        self._resend = resend
        self._fail = fail
        self._failed = failed
        self.changing = False
        #: Set while no change runs (a close waits for it).
        self.done = anyio.Event()
        self.done.set()
        #: LAC when the last change committed (None: none yet), and the last pause.
        self._lac_at_last_change: int | None = None
        self._pause = 0.0

    def start(self, tasks: anyio.abc.TaskGroup | None) -> None:
        """A bookie failed and the tracker wants a change: run one in ``tasks`` unless one
        runs already (it goes on while the tracker wants more)."""
        if self.changing:
            return
        if tasks is None:  # pragma: no cover - background not started
            self._fail(ClientClosedError("the writer's background tasks are not running"))
            return
        self.changing = True
        self.done = anyio.Event()
        tasks.start_soon(self._run)

    async def _run(self) -> None:
        tracker = self._tracker
        try:
            while not self._failed() and tracker.needs_change():
                await self._back_off()
                if self._failed() or not tracker.needs_change():
                    break
                first_entry, slots = tracker.start_ensemble_change()
                try:
                    await self._commit(first_entry, slots)
                except WalkitError as exc:
                    tracker.abort_ensemble_change()
                    self._fail(exc)
                    return
                per_slot: Resend = [[] for _ in range(self._slots)]
                carried = -1
                for pa, targets in tracker.finish_ensemble_change():
                    carried = max(carried, pa.lac)
                    for slot in targets:
                        per_slot[slot].append((pa.entry_id, pa.packet))
                self._resend(per_slot, carried)
                self._lac_at_last_change = tracker.last_add_confirmed
        except Exception as exc:  # a bug must not take the client down
            log.exception("ensemble_change_crashed", ledger_id=self._ledger_id)
            self._fail(WalkitError(f"ledger {self._ledger_id}: ensemble change failed: {exc!r}"))
        finally:
            self.changing = False
            self.done.set()

    async def _back_off(self) -> None:
        """Pause when changes follow each other without an entry acknowledged in between."""
        last = self._lac_at_last_change
        progressed = last is None or self._tracker.last_add_confirmed > last
        self._pause = change_backoff(self._pause, progressed)
        if self._pause > 0:
            pause = self._pause * (0.5 + self._rng.random())
            log.info("ensemble_change_backoff", ledger_id=self._ledger_id, seconds=round(pause, 3))
            await anyio.sleep(pause)
