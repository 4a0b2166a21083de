"""A writer's ensemble changes: one at a time, in a task of the writer's, backing off when they
follow each other without progress.

When a bookie of the write set fails, the writer replaces it (BookKeeper's protocol document,
"Ensemble changes"): :class:`walkit._core.add_tracker.AddTracker` decides from which entry and
for which slots, the writer commits the new fragment to the ledger's metadata, and the entries
the failed bookies did not acknowledge are sent again to their replacements. Changes that
follow each other with no entry acknowledged in between back off
(:func:`walkit._core.ensemble_change.change_backoff`), with jitter from the injected generator.

Which failed adds call for a change at all is :func:`walkit._core.ensemble_change.on_add_failure`'s
decision: a fenced writer or an error no other bookie would fix stops the writer instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import final

import anyio
import anyio.abc

from walkit._core.add_tracker import AddTracker
from walkit._core.ensemble_change import AddFailure, change_backoff, on_add_failure
from walkit._core.types import BookieId
from walkit._logging import get_logger
from walkit.errors import (
    BookieTimeoutError,
    ClientClosedError,
    UnauthorizedAccessError,
    WalkitError,
    WriterFencedError,
)
from walkit.ledger._context import ClientContext
from walkit.ledger._replacements import choose_replacements
from walkit.ledger._writer_metadata import WriterMetadata

#: The writer's events (ledger_closed, ensemble_change_backoff...) keep the writer's logger name,
#: which applications filter on.
log = get_logger("walkit.ledger._writer")

__all__ = ["EnsembleChanges"]

#: Entries to send again, per slot of the ensemble: (entry id, packet).
Resend = list[list[tuple[int, bytes]]]


@final
class EnsembleChanges:
    """The ensemble changes of one ledger writer (see the module docs).

    ``ensemble`` is the writer's list of bookies by slot; ``repoint(replacements)`` points the
    writer's slots at their replacements once the new fragment is in the metadata;
    ``resend(per_slot, lac)`` queues entries again; ``fail(error)`` stops the writer and
    ``failed()`` says it has stopped."""

    def __init__(
        self,
        context: ClientContext,
        md: WriterMetadata,
        tracker: AddTracker,
        ensemble: list[BookieId],
        *,
        repoint: Callable[[Mapping[int, BookieId]], None],
        resend: Callable[[Resend, int], None],
        fail: Callable[[WalkitError], None],
        failed: Callable[[], bool],
    ) -> None:
        self._context = context
        self._md = md
        self._ledger_id = md.ledger_id
        self._tracker = tracker
        self._ensemble = ensemble
        self._rng = context.rng
        self._slots = len(ensemble)
        self._repoint = repoint
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
        #: Bookies that refused this ledger's key (UNAUTHORIZED): never a replacement.
        self._refused: set[BookieId] = set()

    def write_failed(
        self, slot: int, error: WalkitError, tasks: anyio.abc.TaskGroup | None
    ) -> None:
        """An add to ``slot``'s bookie failed: stop the writer, or replace the bookie (in a
        change run in ``tasks``)."""
        action = on_add_failure(error)
        if action is AddFailure.WRITER_FENCED:
            self._fail(
                WriterFencedError(
                    f"ledger {self._ledger_id} was fenced by another client; entries after "
                    f"{self._tracker.last_add_confirmed} may or may not be written"
                )
            )
            return
        if action is AddFailure.STOP:
            self._fail(error)
            return
        bookie = self._ensemble[slot]
        # UNAUTHORIZED: the ledger id was claimed on this bookie with another key, or (with
        # authentication on) this client's principal may not add there. Either way it will
        # never take this ledger's adds, so it is never chosen again as a replacement for it.
        if isinstance(error, UnauthorizedAccessError) and bookie not in self._refused:
            self._refused.add(bookie)
            log.warning(
                "ledger_key_refused",
                ledger_id=self._ledger_id,
                bookie=str(bookie),
                error=str(error),
                detail=(
                    "the bookie refuses this ledger's adds: the ledger id holds another key "
                    "there, or this client's principal is not authorized to add (the bookie's "
                    "log says which); replacing the bookie"
                ),
            )
        if self._tracker.is_blocked(slot):
            return
        log.info(
            "bookie_write_failed",
            ledger_id=self._ledger_id,
            bookie=str(bookie),
            slot=slot,
            error=str(error),
            timeout=isinstance(error, BookieTimeoutError),
        )
        if self._tracker.on_bookie_failure(slot):
            self.start(tasks)

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
                    await self._commit_new_fragment(first_entry, slots)
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

    async def _commit_new_fragment(self, first_entry: int, slots: frozenset[int]) -> None:
        context = self._context
        current = tuple(self._ensemble)
        replacements = choose_replacements(context, self._md.current, current, slots, self._refused)
        await self._md.add_fragment(current, first_entry, replacements)
        self._repoint(replacements)
        if context.metrics is not None:
            context.metrics.ensemble_changes += 1
        log.info(
            "ensemble_changed",
            ledger_id=self._ledger_id,
            first_entry=first_entry,
            replaced={str(current[s]): str(b) for s, b in replacements.items()},
        )

    async def _back_off(self) -> None:
        """Pause when changes follow each other without an entry acknowledged in between."""
        last = self._lac_at_last_change
        progressed = last is None or self._tracker.last_add_confirmed > last
        self._pause = change_backoff(self._pause, progressed)
        if self._pause > 0:
            pause = self._pause * (0.5 + self._rng.random())
            log.info("ensemble_change_backoff", ledger_id=self._ledger_id, seconds=round(pause, 3))
            await anyio.sleep(pause)
