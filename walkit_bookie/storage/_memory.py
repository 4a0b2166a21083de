"""An in-memory BookieStorage for deterministic simulations."""

from __future__ import annotations

import errno
from collections.abc import Sequence
from typing import final

import anyio
import anyio.lowlevel

from walkit._core.types import BookieId
from walkit._core.wire import AddRequest, Request
from walkit.errors import CookieError
from walkit_bookie.storage._ledger import LedgerInfo, apply_request
from walkit_bookie.storage._storage import BookieStorage, StorageStats


@final
class MemoryStorage(BookieStorage):
    """Bookie storage in memory, with a crash that loses exactly what was not synced.

    Made for ``walkit.testing``'s simulations on trio's MockClock (it runs on any loop):

    - **Durable state** (``entries``, ``ledgers``, the cookie) is what a real disk would still
      hold after a power cut. It changes only when a group commit's sync completes.
    - **Written, not yet synced** records (``unsynced``) are those of the group commit in
      progress. Group commit behaves as on disk (the bookie groups whatever arrives while a sync
      is running), but the sync is ``await anyio.sleep(sync_latency)``, so it runs on the mock
      clock and costs no real time.
    - :meth:`crash` discards everything not yet synced and keeps the durable state. To simulate
      a restart, cancel the old :class:`~walkit_bookie.Bookie`'s ``run`` (before or after
      ``crash()``; a sync that completes after the crash is discarded too) and start a new
      ``Bookie`` on the same storage object: it recovers from the durable state.
    - ``usage`` is what :meth:`disk_usage` reports (raise it past the bookie's threshold to make
      it read-only) and ``fail_writes``, when set, is raised by every commit (e.g.
      ``OSError(errno.ENOSPC, ...)`` for a full disk).

    One storage object belongs to one bookie id (its cookie): opening it for another refuses,
    as a disk would.
    """

    def __init__(self, *, sync_latency: float = 0.0005) -> None:
        self.sync_latency = sync_latency
        self.stats = StorageStats()
        #: Durable entries: (ledger, entry) -> packet.
        self.entries: dict[tuple[int, int], bytes] = {}
        #: Durable ledger states.
        self.ledgers: dict[int, LedgerInfo] = {}
        #: Records written but not yet synced (the group commit in progress).
        self.unsynced: list[Request] = []
        self.usage = 0.0
        self.fail_writes: OSError | None = None
        self.bookie_id: BookieId | None = None
        self.instance_id: str | None = None
        self.crashes = 0
        self._epoch = 0

    def crash(self) -> None:
        """Lose everything not yet synced; keep the durable state for a restart."""
        self.unsynced.clear()
        self._epoch += 1
        self.crashes += 1

    def recorded_bookie_id(self) -> BookieId | None:
        return self.bookie_id

    async def open(
        self, bookie_id: BookieId, instance_id: str, *, instance_id_is_known: bool
    ) -> dict[int, LedgerInfo]:
        await anyio.lowlevel.checkpoint()
        if self.bookie_id is None:
            self.bookie_id, self.instance_id = bookie_id, instance_id
        elif self.bookie_id != bookie_id:
            raise CookieError(
                f"this storage belongs to bookie {self.bookie_id}, not to {bookie_id}"
            )
        elif instance_id_is_known and self.instance_id != instance_id:
            raise CookieError(
                f"this storage belongs to cluster {self.instance_id}, not to {instance_id}"
            )
        self._epoch += 1  # a previous incarnation's late syncs must not land
        return {lid: info.copy() for lid, info in self.ledgers.items()}

    async def commit(self, bodies: Sequence[bytes], requests: Sequence[Request]) -> None:
        if self.fail_writes is not None:
            raise self.fail_writes
        epoch = self._epoch
        self.unsynced.extend(requests)
        try:
            await anyio.sleep(self.sync_latency)
        finally:
            if epoch == self._epoch:
                del self.unsynced[: len(requests)]
        if epoch != self._epoch:
            raise OSError(errno.EIO, "the storage crashed during this sync")
        for request in requests:
            apply_request(self.ledgers, request)
            if type(request) is AddRequest:
                self.entries[(request.ledger_id, request.entry_id)] = request.packet
        self.stats.journal_syncs += 1
        self.stats.journal_records += len(requests)
        self.stats.journal_bytes += sum(len(b) for b in bodies)

    def cached_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        return self.entries.get((ledger_id, entry_id))

    async def read_entries(self, keys: Sequence[tuple[int, int]]) -> list[bytes | None]:
        await anyio.lowlevel.checkpoint()
        return [self.entries.get(key) for key in keys]

    async def checkpoint_due(self) -> None:
        await anyio.sleep_forever()

    async def checkpoint(self) -> None:
        await anyio.lowlevel.checkpoint()
        self.stats.checkpoints += 1

    def disk_usage(self) -> float:
        return self.usage

    async def delete_ledger(self, ledger_id: int) -> None:
        await anyio.lowlevel.checkpoint()
        self.ledgers.pop(ledger_id, None)
        for key in [k for k in self.entries if k[0] == ledger_id]:
            del self.entries[key]

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()
