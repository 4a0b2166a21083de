"""Compaction passes over a bookie's entry logs: remove the logs with nothing live, and copy
the live entries out of those below a threshold (the order that keeps every live entry
readable across a crash is in ``_compaction_plan``). The storage (``_storage.DiskStorage``) owns
the index and the entry logs; it hands them over while it is open, and None once closed."""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable
from typing import final

import anyio
import anyio.to_thread

from walkit.shared import get_logger
from walkit_bookie._config import BookieConfig
from walkit_bookie.storage._compaction_plan import CompactionResult, EntryLogUsage, batches, choose
from walkit_bookie.storage._entrylog import EntryLogger
from walkit_bookie.storage._index import Index, entry_of_key, location_bytes

__all__ = ["Compactor"]

log = get_logger(__name__)


@final
class Compactor:
    """Compaction of one storage's entry logs; one pass at a time."""

    def __init__(
        self,
        config: BookieConfig,
        files: Callable[[], tuple[Index | None, EntryLogger | None]],
        *,
        checkpoint_lock: anyio.Lock,
        read_lock: threading.Lock,
        on_done: Callable[[CompactionResult], None],
    ) -> None:
        self._config = config
        #: The storage's index and entry logs (None once it is closed).
        self._files = files
        #: Taken with the storage's checkpoints: moves and removals never overlap one.
        self._checkpoint_lock = checkpoint_lock
        #: Held by the storage's reads from an index lookup to their file reads, and by the
        #: removal of an entry log: a reader never finds the log it was pointed at gone.
        self._read_lock = read_lock
        self._on_done = on_done
        self._lock = anyio.Lock()

    def usage(self) -> list[EntryLogUsage]:
        """Every entry log's size and live bytes (none once the storage is closed)."""
        index, entrylog = self._files()
        if index is None or entrylog is None:
            return []
        usage = index.usage
        sizes = entrylog.sizes
        out = []
        for log_id in entrylog.log_ids():
            per_ledger = usage.get(log_id, {})
            out.append(
                EntryLogUsage(
                    log_id,
                    sizes.get(log_id, 0),
                    sum(per_ledger.values()),
                    len(per_ledger),
                    entrylog.headers.get(log_id, 0),
                )
            )
        return out

    async def compact(self, threshold: float) -> CompactionResult:
        result = CompactionResult(threshold)
        async with self._lock:
            index, entrylog = self._files()
            if index is None or entrylog is None:
                return result
            empty, low = choose(self.usage(), threshold, entrylog.current_id)
            for log_id in empty:
                size = await self._remove_log(log_id)
                if size is not None:
                    result.logs_removed += 1
                    result.bytes_reclaimed += size
            if low:
                log.info(
                    "compaction_started",
                    threshold=threshold,
                    entry_logs=len(low),
                    live_bytes=sum(sum(index.usage.get(i, {}).values()) for i in low),
                )
                ledgers = {lid for log_id in low for lid in index.usage.get(log_id, {})}
                found = await anyio.to_thread.run_sync(index.entries_in_logs, low, ledgers)
                for log_id in low:
                    await self._compact_log(log_id, found.pop(log_id, []), result)
            self._on_done(result)
        if low or empty:
            log.info("compaction_done", **result.to_dict())
        return result

    async def _compact_log(
        self, log_id: int, entries: list[tuple[bytes, bytes]], result: CompactionResult
    ) -> None:
        rate = self._config.compaction_max_rate
        moved_bytes = 0
        unreadable = 0
        for batch in batches(entries, self._config.compaction_batch_bytes, location_bytes):
            records, bad = await anyio.to_thread.run_sync(self._read, batch)
            unreadable += bad
            async with self._checkpoint_lock:
                if self._files()[0] is None:
                    return  # closing
                moved, copied = await anyio.to_thread.run_sync(self._move_sync, records)
            result.entries_moved += moved
            result.bytes_moved += copied
            moved_bytes += copied
            log.info("compaction_batch_moved", entry_log=log_id, entries=moved, bytes=copied)
            if rate:
                await anyio.sleep(copied / rate)
        index = self._files()[0]
        if index is None:
            return
        left = sum(index.usage.get(log_id, {}).values())
        if left or unreadable:
            result.logs_kept += 1
            log.error(
                "compaction_left_entry_log",
                entry_log=log_id,
                live_bytes=left,
                unreadable_entries=unreadable,
            )
            return
        size = await self._remove_log(log_id)
        if size is not None:
            result.logs_compacted += 1
            result.bytes_reclaimed += max(0, size - moved_bytes)
            log.info("entry_log_compacted", entry_log=log_id, size=size, moved_bytes=moved_bytes)

    def _read(
        self, batch: list[tuple[bytes, bytes]]
    ) -> tuple[list[tuple[int, int, bytes, bytes, bytes]], int]:
        """(ledger, entry, packet, key, old location) of a batch; and how many failed."""
        entrylog = self._files()[1]
        if entrylog is None:
            raise OSError(errno.EBADF, "bookie storage is closed")
        records = []
        bad = 0
        with self._read_lock:
            for key, location in batch:
                lid, eid = entry_of_key(key)
                packet = entrylog.read(location, lid, eid)
                if packet is None:
                    bad += 1
                    log.error("compaction_unreadable_entry", ledger_id=lid, entry_id=eid)
                    continue
                records.append((lid, eid, packet, key, location))
        return records, bad

    def _move_sync(self, records: list[tuple[int, int, bytes, bytes, bytes]]) -> tuple[int, int]:
        index, entrylog = self._files()
        if index is None or entrylog is None:
            raise OSError(errno.EBADF, "bookie storage is closed")
        if not records:
            return 0, 0
        # 1. the copies, durable; 2. the index, in one synced transaction (see _compaction_plan).
        appended = entrylog.write([(lid, eid, packet) for lid, eid, packet, _, _ in records])
        moves = [
            (key, old, new)
            for (_, _, _, key, old), (_, new) in zip(records, appended.locations, strict=True)
        ]
        return index.move(moves)

    async def _remove_log(self, log_id: int) -> int | None:
        """Remove an entry log once nothing in it is live; its size (None if it was kept)."""
        async with self._checkpoint_lock:
            index, entrylog = self._files()
            if index is None or entrylog is None:
                return None
            if index.usage.get(log_id) or log_id == entrylog.current_id:
                return None
            return await anyio.to_thread.run_sync(self._remove_log_sync, log_id)

    def _remove_log_sync(self, log_id: int) -> int:
        entrylog = self._files()[1]
        assert entrylog is not None
        with self._read_lock:  # no read is between its index lookup and its file read
            size = entrylog.remove(log_id)
        log.info("entry_log_removed", entry_log=log_id, size=size)
        return size
