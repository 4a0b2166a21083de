"""Garbage collection: forget ledgers deleted in the metadata store, and schedule compaction.

A ledger's metadata is created before any bookie sees an entry of it, and deleted by the
application when it is done with it. A round (like BookKeeper's ScanAndCompareGarbageCollector):

1. take the ledgers this bookie knows *before* listing the store, so a ledger created while the
   listing runs is never a candidate;
2. check that the store is still this bookie's cluster (its instance id), then list its ledgers;
3. a known ledger missing from the listing is looked up once more, alone; only if it is still
   absent is it forgotten (its index entries and state go; entry logs follow at compaction).

Any metadata error skips the ledger part of the round (never "no answer, so delete"). Then
entry logs with nothing live are removed, and a minor or major compaction runs when due.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Any, final

import anyio
import attrs

from walkit._core.types import BookieId
from walkit.errors import WalkitError
from walkit.metadata import (
    INSTANCE_ID_PATH,
    LedgerManager,
    MetadataStore,
    collect_overreplicated,
)
from walkit.shared import get_logger
from walkit_bookie._config import BookieConfig
from walkit_bookie.storage._compaction_plan import CompactionResult
from walkit_bookie.storage._storage import BookieStorage

log = get_logger(__name__)
#: Up to this many ledgers missing from the listing are checked once more one by one.
_CHECK_ALONE = 64

COMPACTIONS = ("minor", "major")


@final
@attrs.define
class GcReport:
    """What one garbage collection round did."""

    #: "minor", "major" or None (no compaction, only removal of empty entry logs).
    compaction: str | None
    #: Ledgers forgotten because the metadata store no longer has them (or, with
    #: autorecovery, they are closed and no longer list this bookie).
    ledgers_deleted: list[int] = attrs.field(factory=list)
    #: Why the ledger part was skipped (None: it ran).
    skipped: str | None = None
    result: CompactionResult | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "compaction": self.compaction,
            "ledgers_deleted": list(self.ledgers_deleted),
            "skipped": self.skipped,
            "entry_logs": None if self.result is None else self.result.to_dict(),
        }


@final
class GarbageCollector:
    """Runs rounds on a schedule (``run``) or on demand (``collect``), one at a time.

    ``ledger_ids()`` lists the ledgers the bookie holds state for, ``forget(ids)`` drops
    ledgers from it and from ``storage``; ``store()`` and ``instance_id()`` give the metadata
    session (None: no ledger part in a round), ``bookie_id()`` this bookie's id once it serves
    (for the cleanup of ledgers rereplicated away from it).
    """

    def __init__(
        self,
        config: BookieConfig,
        storage: BookieStorage,
        *,
        ledger_ids: Callable[[], list[int]],
        forget: Callable[[list[int]], Awaitable[None]],
        store: Callable[[], MetadataStore | None],
        instance_id: Callable[[], str | None],
        bookie_id: Callable[[], BookieId | None] = lambda: None,
    ) -> None:
        self._config = config
        self._storage = storage
        self._ledger_ids = ledger_ids
        self._forget = forget
        self._store = store
        self._instance_id = instance_id
        self._bookie_id = bookie_id
        self._lock = anyio.Lock()
        self.rounds = 0
        self.skipped = 0
        self.ledgers_deleted = 0
        self.minor_compactions = 0
        self.major_compactions = 0
        #: The loop's time of the last round of each kind (None: not yet).
        self.last: dict[str, float | None] = {"gc": None, "minor": None, "major": None}
        self.last_report: GcReport | None = None

    async def run(self) -> None:
        """Rounds every ``gc_interval``; compactions when their intervals are due."""
        config = self._config
        now = anyio.current_time()
        due = {
            "gc": now + config.gc_interval,
            "minor": now + config.minor_compaction_interval
            if config.minor_compaction_enabled
            else math.inf,
            "major": now + config.major_compaction_interval
            if config.major_compaction_enabled
            else math.inf,
        }
        intervals = {
            "gc": config.gc_interval,
            "minor": config.minor_compaction_interval,
            "major": config.major_compaction_interval,
        }
        while True:
            await anyio.sleep_until(min(due.values()))
            now = anyio.current_time()
            kind = next((k for k in ("major", "minor") if due[k] <= now), None)
            try:
                await self.collect(kind)
            except (OSError, WalkitError) as exc:
                log.error("gc_round_failed", error=str(exc))
            now = anyio.current_time()
            for name, at in due.items():
                if at <= now or (name == "minor" and kind == "major"):
                    # A major compaction covers the minor one that was due.
                    due[name] = now + intervals[name]

    async def collect(self, compaction: str | None = None) -> GcReport:
        """One round now: deleted ledgers, empty entry logs, and ``compaction`` ("minor",
        "major" or None) with its configured threshold."""
        if compaction is not None and compaction not in COMPACTIONS:
            raise ValueError(f"compaction must be 'minor', 'major' or None, not {compaction!r}")
        async with self._lock:
            report = GcReport(compaction)
            await self._collect_ledgers(report)
            threshold = 0.0
            if compaction == "major":
                threshold = self._config.major_compaction_threshold
                self.major_compactions += 1
            elif compaction == "minor":
                threshold = self._config.minor_compaction_threshold
                self.minor_compactions += 1
            report.result = await self._storage.compact(threshold)
            self.rounds += 1
            now = anyio.current_time()
            self.last["gc"] = now
            if compaction is not None:
                self.last[compaction] = now
            self.last_report = report
            log.info(
                "gc_round",
                compaction=compaction,
                ledgers_deleted=len(report.ledgers_deleted),
                skipped=report.skipped,
                entry_logs_removed=report.result.logs_removed,
                entry_logs_compacted=report.result.logs_compacted,
                bytes_reclaimed=report.result.bytes_reclaimed,
            )
            return report

    async def _collect_ledgers(self, report: GcReport) -> None:
        store = self._store()
        instance_id = self._instance_id()
        if store is None or instance_id is None:
            report.skipped = "no metadata store"
            return
        known = set(self._ledger_ids())  # before the listing starts
        if not known:
            return
        gone: list[int] = []
        try:
            found = (await store.get(INSTANCE_ID_PATH)).value.decode("ascii", "replace").strip()
            if found != instance_id:
                report.skipped = f"the store's cluster instance id is {found!r}, not ours"
            else:
                ledgers = LedgerManager(store)
                listed = set(await ledgers.list_ids())
                missing = sorted(known - listed)
                if len(missing) <= _CHECK_ALONE:
                    for ledger_id in missing:
                        if not await ledgers.exists(ledger_id):  # once more, alone
                            gone.append(ledger_id)
                else:
                    # Many (say, fenced under ids nobody created): one more listing, not one
                    # read each (100,000 reads took minutes).
                    again = set(await ledgers.list_ids())
                    gone = [ledger_id for ledger_id in missing if ledger_id not in again]
        except WalkitError as exc:
            report.skipped = f"metadata store error: {exc}"
        if report.skipped is not None:
            self.skipped += 1
            log.warning("gc_ledgers_skipped", reason=report.skipped)
            return
        if gone:
            await self._forget(gone)
            report.ledgers_deleted = gone
            self.ledgers_deleted += len(gone)
            log.info("gc_ledgers_deleted", count=len(gone), first=gone[0], last=gone[-1])
        bookie_id = self._bookie_id()
        if self._config.autorecovery and bookie_id is not None:
            # Closed ledgers rereplicated away from this bookie (walkit.autorecovery).
            extra = await collect_overreplicated(store, bookie_id, known - set(gone), self._forget)
            report.ledgers_deleted += extra
            self.ledgers_deleted += len(extra)
