"""The storage interface of a bookie, and the disk implementation.

:class:`BookieStorage` is what :class:`~walkit_bookie.Bookie` needs from durable state: commit a
group of journal records (one write + one sync), read entries, checkpoint, and recover after a
restart. :class:`DiskStorage` is the real one (journal + write cache + entry logs + LMDB index,
the layout of BookKeeper's DbLedgerStorage); ``MemoryStorage`` is the one for simulations.
"""

from __future__ import annotations

import abc
import errno
import shutil
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import final

import anyio
import anyio.lowlevel
import anyio.to_thread
import attrs

from walkit._core.types import BookieId
from walkit._core.wire import (
    AddRequest,
    ReadLacRequest,
    ReadRequest,
    Request,
    WriteLacRequest,
    decode_message,
)
from walkit.errors import BookieIOError, CookieError, InvalidArgumentError, RemoteProtocolError
from walkit.shared import current_loop, get_logger
from walkit_bookie._config import BookieConfig
from walkit_bookie.storage._compaction_plan import CompactionResult, EntryLogUsage
from walkit_bookie.storage._cookie import check_or_create, recorded_cookie
from walkit_bookie.storage._entrylog import ENTRYLOG_DIR, EntryLogger
from walkit_bookie.storage._entrylog_compactor import Compactor
from walkit_bookie.storage._index import INDEX_DIR, Index, entry_key, location_bytes
from walkit_bookie.storage._journal import JournalWriter, LogMark, journal_files, replay
from walkit_bookie.storage._latency import LatencyHistogram
from walkit_bookie.storage._ledger import LedgerInfo, apply_request

log = get_logger(__name__)

JOURNAL_DIR = "journal"
#: Ledgers deleted per index transaction (garbage collection may delete many at once).
_DELETE_BATCH = 4096


@attrs.define
class StorageStats:
    """Counters a storage keeps (tests and benchmarks read them)."""

    #: fdatasync calls on the journal (one per group commit).
    journal_syncs: int = 0
    journal_records: int = 0
    journal_bytes: int = 0
    #: Rereplication copies stored straight in an entry log, and the groups they came in
    #: (one entry-log write, one fdatasync and one synced index transaction each).
    copies_stored: int = 0
    copy_groups: int = 0
    checkpoints: int = 0
    entries_flushed: int = 0
    replayed_records: int = 0
    #: What compaction passes did in total (the passes are counted by the garbage collector).
    entry_logs_compacted: int = 0
    entry_logs_removed: int = 0
    compaction_entries_moved: int = 0
    compaction_bytes_moved: int = 0
    compaction_bytes_reclaimed: int = 0
    #: Seconds each journal write took, its sync included (one per group commit).
    journal_write_seconds: LatencyHistogram = attrs.field(factory=LatencyHistogram)

    def add(self, result: CompactionResult) -> None:
        self.entry_logs_compacted += result.logs_compacted
        self.entry_logs_removed += result.logs_removed
        self.compaction_entries_moved += result.entries_moved
        self.compaction_bytes_moved += result.bytes_moved
        self.compaction_bytes_reclaimed += result.bytes_reclaimed


class BookieStorage(abc.ABC):
    """Durable state of one bookie: the journal and the ledger storage behind it.

    The bookie calls these from one task at a time per method family: ``commit`` from its
    group-commit task only, ``checkpoint`` from its checkpoint task only.
    """

    stats: StorageStats

    @abc.abstractmethod
    def recorded_bookie_id(self) -> BookieId | None:
        """The bookie id this storage was initialized for (None if it is brand new)."""

    @abc.abstractmethod
    async def open(
        self, bookie_id: BookieId, instance_id: str, *, instance_id_is_known: bool
    ) -> dict[int, LedgerInfo]:
        """Check the cookie, recover (replay the journal), and return every ledger's state.

        ``instance_id`` is the cluster's if ``instance_id_is_known`` (from the metadata store),
        else only a fresh id to initialize brand-new storage with. Raises CookieError or
        BookieIOError with a message that says what is wrong.
        """

    @abc.abstractmethod
    async def commit(self, bodies: Sequence[bytes], requests: Sequence[Request]) -> None:
        """Make a group of journal records durable (one write, one sync), then apply them.

        ``bodies`` are the requests' wire bodies (what the journal holds). Raises OSError when
        the write or sync failed; then nothing of the group was applied. It may return without
        a scheduling round (a small group is written at once, from the calling task).
        """

    def commit_now(self, bodies: Sequence[bytes], requests: Sequence[Request]) -> bool:
        """:meth:`commit` without waiting, if the group can be committed so: True when it
        was (durable and applied), False when nothing was done (it needs :meth:`commit`).
        Raises OSError as :meth:`commit` does. This one never can."""
        return False

    async def store_copies(self, bodies: Sequence[bytes], requests: Sequence[AddRequest]) -> None:
        """Make a group of rereplication copies (adds flagged COPY) durable, then apply them.

        The same contract as :meth:`commit`; a storage may store them another way than the
        journal (the disk storage writes them once, straight into an entry log). This one
        journals them."""
        await self.commit(bodies, requests)

    @abc.abstractmethod
    def cached_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        """The entry's packet if it is in memory (None: look it up with read_entries)."""

    @abc.abstractmethod
    async def read_entries(self, keys: Sequence[tuple[int, int]]) -> list[bytes | None]:
        """Packets of (ledger, entry) pairs, None where absent. Raises OSError on I/O errors."""

    async def read_entries_upto(
        self, keys: Sequence[tuple[int, int]], max_bytes: int
    ) -> list[bytes | None]:
        """Like :meth:`read_entries`, but stops once about ``max_bytes`` of entries are read
        from disk (at least one): the result may be a prefix of ``keys``. Entries already in
        memory are not counted."""
        return await self.read_entries(keys)

    @abc.abstractmethod
    async def checkpoint_due(self) -> None:
        """Return when the storage wants a checkpoint before the next periodic one."""

    @abc.abstractmethod
    async def checkpoint(self) -> None:
        """Flush entries and index, persist the LastLogMark, drop older journal files."""

    @abc.abstractmethod
    def disk_usage(self) -> float:
        """The highest fraction of used space among the data dirs' disks."""

    @abc.abstractmethod
    async def delete_ledger(self, ledger_id: int) -> None:
        """Forget a ledger: its index entries and state (garbage collection's hook)."""

    async def delete_ledgers(self, ledger_ids: Sequence[int]) -> None:
        """Forget several ledgers (a storage may do it at once)."""
        for ledger_id in ledger_ids:
            await self.delete_ledger(ledger_id)

    def entry_log_usage(self) -> list[EntryLogUsage]:
        """Size and live bytes of every entry log (none for a storage without them)."""
        return []

    async def compact(self, threshold: float) -> CompactionResult:
        """Remove entry logs with nothing live, and compact those whose live fraction is below
        ``threshold`` (0: only the removal). A storage without entry logs does nothing."""
        await anyio.lowlevel.checkpoint()
        return CompactionResult(threshold)

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Flush what can be flushed and close files."""


@final
class DiskStorage(BookieStorage):
    """Journal with group commit, write cache, entry logs and an LMDB index on local disks.

    Layout: ``<dir0>/journal/*.jnl``; ``<ledger dir>/entrylogs/*.log`` for each ledger dir
    (the dirs after the first, or the first alone); ``<first ledger dir>/index`` (LMDB, holding
    the index, ledger states and the LastLogMark); a ``COOKIE`` in every dir.
    """

    def __init__(self, config: BookieConfig) -> None:
        self._config = config
        self.stats = StorageStats()
        self._journal_dir = config.journal_dir / JOURNAL_DIR
        self._ledger_dirs = config.ledger_dirs
        self._ledgers: dict[int, LedgerInfo] = {}
        self._dirty: set[int] = set()
        self._cache: dict[tuple[int, int], bytes] = {}
        self._cache_bytes = 0
        self._flushing: dict[tuple[int, int], bytes] = {}
        self._flushing_bytes = 0
        self._mark = LogMark(0, 0)
        self._durable_mark: LogMark | None = None
        self._journal: JournalWriter | None = None
        self._entrylog: EntryLogger | None = None
        self._index: Index | None = None
        self._due = anyio.Event()
        self._room = anyio.Event()
        self._checkpoint_lock = anyio.Lock()
        self._checkpoint_failed = False
        #: The thread that writes the zeros ahead of the journal's end (made when first due).
        self._preallocator: ThreadPoolExecutor | None = None
        #: The loop's clock (bound by ``open``), for the journal's write times.
        self._time: Callable[[], float] = time.monotonic
        # Held by a read from an index lookup to the end of its file reads, and by the removal
        # of an entry log: a reader never finds the log it was pointed at gone.
        self._read_lock = threading.Lock()
        self._compactor = Compactor(
            config,
            lambda: (self._index, self._entrylog),
            checkpoint_lock=self._checkpoint_lock,
            read_lock=self._read_lock,
            on_done=self.stats.add,
        )

    # --- start -------------------------------------------------------------------------------

    def _required(self) -> dict[Path, list[str]]:
        required: dict[Path, list[str]] = {self._config.journal_dir: [JOURNAL_DIR]}
        for i, d in enumerate(self._ledger_dirs):
            names = required.setdefault(d, [])
            names.append(ENTRYLOG_DIR)
            if i == 0:
                names.append(INDEX_DIR)
        return required

    def recorded_bookie_id(self) -> BookieId | None:
        dirs = [Path(d) for d in self._config.data_dirs]
        cookie = recorded_cookie(dirs)
        if cookie is None:
            return None
        try:
            return BookieId.parse(cookie.bookie_id)
        except InvalidArgumentError:
            return None

    async def open(
        self, bookie_id: BookieId, instance_id: str, *, instance_id_is_known: bool
    ) -> dict[int, LedgerInfo]:
        self._time = current_loop().time
        return await anyio.to_thread.run_sync(
            self._open_sync, bookie_id, instance_id, instance_id_is_known
        )

    def _open_sync(
        self, bookie_id: BookieId, instance_id: str, instance_id_is_known: bool
    ) -> dict[int, LedgerInfo]:
        dirs = [Path(d) for d in self._config.data_dirs]
        try:
            check_or_create(
                dirs,
                str(bookie_id),
                instance_id,
                instance_id_is_known=instance_id_is_known,
                required=self._required(),  # type: ignore[arg-type]
            )
            self._index = Index(self._ledger_dirs[0] / INDEX_DIR)
            self._ledgers, durable_mark = self._index.load()
            self._durable_mark = durable_mark
            start = durable_mark or LogMark(0, 0)
            self._mark = start
            self._replay(start)
            last = max([start.file_id, *journal_files(self._journal_dir)])
            self._journal = JournalWriter(
                self._journal_dir, last + 1, self._config.journal_max_size
            )
            self._journal.preallocate(*self._journal.start_preallocation())
            self._entrylog = EntryLogger(self._ledger_dirs, self._config.entrylog_max_size)
        except (CookieError, BookieIOError):
            self._close_sync()
            raise
        except OSError as exc:
            self._close_sync()
            raise BookieIOError(f"cannot open bookie storage: {exc}") from exc
        log.info(
            "storage_opened",
            ledgers=len(self._ledgers),
            replayed=self.stats.replayed_records,
            cached_entries=len(self._cache),
            mark=str(self._mark),
        )
        return {lid: info.copy() for lid, info in self._ledgers.items()}

    def _replay(self, start: LogMark) -> None:
        requests: list[Request] = []
        count = 0
        for body, mark in replay(self._journal_dir, start):
            try:
                request = decode_message(body)
            except RemoteProtocolError as exc:
                # CRC-checked yet undecodable: written by another version. Do not guess.
                raise BookieIOError(f"journal record at {mark} cannot be decoded: {exc}") from exc
            if not isinstance(request, AddRequest | ReadRequest | ReadLacRequest | WriteLacRequest):
                raise BookieIOError(f"journal record at {mark} is a {type(request).__name__}")
            requests.append(request)
            count += 1
            self._mark = mark
            if len(requests) >= 4096:
                self._apply(requests)
                requests = []
        self._apply(requests)
        self.stats.replayed_records = count

    # --- journal -----------------------------------------------------------------------------

    def _apply(self, requests: Sequence[Request]) -> None:
        cache = self._cache
        ledgers = self._ledgers
        dirty = self._dirty
        added = 0
        for request in requests:
            info = apply_request(ledgers, request)
            if info is None:
                continue
            dirty.add(request.ledger_id)
            if type(request) is AddRequest:
                key = (request.ledger_id, request.entry_id)
                old = cache.get(key)
                if old is not None:
                    added -= len(old)
                packet = request.packet
                cache[key] = packet
                added += len(packet)
        self._cache_bytes += added
        if self._cache_bytes >= self._config.write_cache_max_bytes:
            self._due.set()

    async def commit(self, bodies: Sequence[bytes], requests: Sequence[Request]) -> None:
        journal = self._journal
        if journal is None:
            raise OSError(errno.EBADF, "bookie storage is not open")
        while self._cache_full():
            self._due.set()
            await self._room.wait()
        started = self._time()
        if self._written_in_thread(bodies):
            mark = await anyio.to_thread.run_sync(journal.write, bodies)
        else:  # no scheduling round here: the group commit gives those it wants
            mark = journal.write(bodies)
        self.stats.journal_write_seconds.observe(self._time() - started)
        self._committed(journal, bodies, requests, mark)

    def commit_now(self, bodies: Sequence[bytes], requests: Sequence[Request]) -> bool:
        journal = self._journal
        if journal is None or self._cache_full() or self._written_in_thread(bodies):
            return False
        started = self._time()
        mark = journal.write(bodies)
        self.stats.journal_write_seconds.observe(self._time() - started)
        self._committed(journal, bodies, requests, mark)
        return True

    def _written_in_thread(self, bodies: Sequence[bytes]) -> bool:
        """Whether a group is written from a worker thread: from ``journal_thread_min_bytes``
        on, and a lone request from a quarter of it. A big request that comes alone is one
        whose sender trickles it in (TLS hands the reader one 16 KiB record at a time), and
        its write blocks the loop for most of a millisecond: written inline, each add of such
        a stream was a group of its own, and nothing was read while it was written (64 KiB
        adds over TLS ran 2.2-2.5x faster from a thread)."""
        size = sum(map(len, bodies))
        threshold = self._config.journal_thread_min_bytes
        return size >= threshold or (len(bodies) == 1 and size >= threshold // 4)

    def _cache_full(self) -> bool:
        """Whether commits must wait for a checkpoint to make room in the write cache."""
        limit = 2 * self._config.write_cache_max_bytes
        return self._cache_bytes + self._flushing_bytes >= limit and not self._checkpoint_failed

    def _committed(
        self,
        journal: JournalWriter,
        bodies: Sequence[bytes],
        requests: Sequence[Request],
        mark: LogMark,
    ) -> None:
        if journal.wants_preallocation:
            claim = journal.start_preallocation()
            # A thread of its own, kept for the next time (one is due every few hundred KiB
            # of journal, and starting a thread costs more CPU than an add): it never waits
            # behind the storage's workers, and nothing comes back (preallocation logs its
            # own failures), so no task waits for it either.
            if self._preallocator is None:
                self._preallocator = ThreadPoolExecutor(1, thread_name_prefix="journal-prealloc")
            self._preallocator.submit(journal.preallocate, *claim)
        self.stats.journal_syncs = journal.syncs
        self.stats.journal_records += len(bodies)
        self.stats.journal_bytes = journal.bytes_written
        self._apply(requests)
        self._mark = mark

    async def store_copies(self, bodies: Sequence[bytes], requests: Sequence[AddRequest]) -> None:
        # A copy is written once: to an entry log (O_DIRECT, synced), then indexed in a synced LMDB
        # transaction with its ledger's state, before the answer. Through the journal it
        # would be written twice (journal, then entry log at the checkpoint) and its big
        # groups would share, and slow, the fsync of the foreground's adds.
        if self._journal is None:
            raise OSError(errno.EBADF, "bookie storage is not open")
        async with self._checkpoint_lock:
            ledgers = self._ledgers
            states: dict[int, LedgerInfo] = {}
            for request in requests:
                lid = request.ledger_id
                if lid not in states and lid in ledgers:
                    states[lid] = ledgers[lid].copy()
                apply_request(states, request)  # (a ledger new here is created by it)
            entries = sorted((r.ledger_id, r.entry_id, r.packet) for r in requests)
            await anyio.to_thread.run_sync(self._store_copies_sync, entries, list(states.items()))
        # Durable: now the in-memory state (taken again: a commit may have changed it).
        for request in requests:
            apply_request(ledgers, request)
        self.stats.copies_stored += len(requests)
        self.stats.copy_groups += 1

    def _store_copies_sync(
        self, entries: list[tuple[int, int, bytes]], states: list[tuple[int, LedgerInfo]]
    ) -> None:
        index, entrylog = self._index, self._entrylog
        if index is None or entrylog is None:
            raise OSError(errno.EBADF, "bookie storage is closed")
        appended = entrylog.write(entries, direct=True)
        index.commit(appended.locations, states, None, {appended.log_id: appended.usage})

    # --- reads -------------------------------------------------------------------------------

    def cached_entry(self, ledger_id: int, entry_id: int) -> bytes | None:
        key = (ledger_id, entry_id)
        packet = self._cache.get(key)
        if packet is None and self._flushing:
            packet = self._flushing.get(key)
        return packet

    async def read_entries(self, keys: Sequence[tuple[int, int]]) -> list[bytes | None]:
        results = [self.cached_entry(lid, eid) for lid, eid in keys]
        missing = [i for i, packet in enumerate(results) if packet is None]
        if missing:
            found = await anyio.to_thread.run_sync(self._read_sync, [keys[i] for i in missing])
            for i, packet in zip(missing, found, strict=True):
                results[i] = packet
        return results

    async def read_entries_upto(
        self, keys: Sequence[tuple[int, int]], max_bytes: int
    ) -> list[bytes | None]:
        results = [self.cached_entry(lid, eid) for lid, eid in keys]
        missing = [i for i, packet in enumerate(results) if packet is None]
        if not missing:
            return results
        found = await anyio.to_thread.run_sync(
            self._read_sync, [keys[i] for i in missing], max_bytes
        )
        for i, packet in zip(missing, found, strict=False):
            results[i] = packet
        if len(found) < len(missing):
            return results[: missing[len(found)]]  # up to the first entry not read
        return results

    def _read_sync(
        self, keys: Sequence[tuple[int, int]], max_bytes: int | None = None
    ) -> list[bytes | None]:
        index, entrylog = self._index, self._entrylog
        if index is None or entrylog is None:
            raise OSError(errno.EBADF, "bookie storage is closed")
        with self._read_lock:
            locations = index.get_many([entry_key(lid, eid) for lid, eid in keys])
            if max_bytes is not None:
                # Stop before the entry that would take the batch past max_bytes.
                total = 0
                for n, loc in enumerate(locations):
                    if loc is None:
                        continue
                    total += location_bytes(loc)
                    if total > max_bytes and n:
                        locations, keys = locations[:n], keys[:n]
                        break
            return [
                None if loc is None else entrylog.read(loc, lid, eid)
                for loc, (lid, eid) in zip(locations, keys, strict=True)
            ]

    # --- checkpoints -------------------------------------------------------------------------

    async def checkpoint_due(self) -> None:
        await self._due.wait()

    async def checkpoint(self) -> None:
        async with self._checkpoint_lock:
            self._due = anyio.Event()
            mark = self._mark
            if not self._cache and not self._dirty and mark == self._durable_mark:
                return
            flushing, self._cache = self._cache, {}
            self._flushing, self._flushing_bytes = flushing, self._cache_bytes
            self._cache_bytes = 0
            dirty = [
                (lid, self._ledgers[lid].copy()) for lid in self._dirty if lid in self._ledgers
            ]
            self._dirty = set()
            try:
                removed = await anyio.to_thread.run_sync(self._flush_sync, flushing, dirty, mark)
            except OSError as exc:
                self._checkpoint_failed = True
                # Keep everything in memory (the journal still has it); newer writes win.
                flushing.update(self._cache)
                self._cache = flushing
                self._cache_bytes += self._flushing_bytes
                self._dirty.update(lid for lid, _ in dirty)
                raise BookieIOError(f"checkpoint failed: {exc}") from exc
            finally:
                self._flushing, self._flushing_bytes = {}, 0
                self._room.set()
                self._room = anyio.Event()
            self._checkpoint_failed = False
            self._durable_mark = mark
            self.stats.checkpoints += 1
            self.stats.entries_flushed += len(flushing)
            log.info(
                "checkpoint",
                entries=len(flushing),
                ledgers=len(dirty),
                mark=str(mark),
                journals_removed=removed,
            )

    def _flush_sync(
        self,
        flushing: dict[tuple[int, int], bytes],
        dirty: list[tuple[int, LedgerInfo]],
        mark: LogMark,
    ) -> int:
        index, entrylog, journal = self._index, self._entrylog, self._journal
        if index is None or entrylog is None or journal is None:
            raise OSError(errno.EBADF, "bookie storage is closed")
        entries = [(lid, eid, packet) for (lid, eid), packet in sorted(flushing.items())]
        if entries:
            appended = entrylog.write(entries)
            index.commit(appended.locations, dirty, mark, {appended.log_id: appended.usage})
        else:
            index.commit([], dirty, mark)
        return journal.delete_before(mark.file_id)

    def disk_usage(self) -> float:
        worst = 0.0
        for d in self._config.data_dirs:
            try:
                usage = shutil.disk_usage(d)
            except OSError:
                return 1.0
            if usage.total:
                worst = max(worst, 1.0 - usage.free / usage.total)
        return worst

    async def delete_ledger(self, ledger_id: int) -> None:
        await self.delete_ledgers([ledger_id])

    async def delete_ledgers(self, ledger_ids: Sequence[int]) -> None:
        # Checkpoint first: the LastLogMark then lies past every journal record of the ledgers,
        # so a restart cannot replay them back (unless someone writes to them again).
        await self.checkpoint()
        index = self._index
        if index is None:
            return
        ids = sorted(set(ledger_ids))
        if not ids:
            return
        async with self._checkpoint_lock:
            # One pass over the cache and one index transaction per batch, not per ledger.
            wanted = set(ids)
            for key in [k for k in self._cache if k[0] in wanted]:
                self._cache_bytes -= len(self._cache.pop(key))
            for ledger_id in ids:
                self._ledgers.pop(ledger_id, None)
                self._dirty.discard(ledger_id)
            removed = 0
            for at in range(0, len(ids), _DELETE_BATCH):
                batch = ids[at : at + _DELETE_BATCH]
                removed += await anyio.to_thread.run_sync(index.delete_ledgers, batch)
            if len(ids) == 1:
                log.info("ledger_deleted", ledger_id=ids[0], index_entries=removed)
            else:
                log.info(
                    "ledgers_deleted",
                    count=len(ids),
                    first=ids[0],
                    last=ids[-1],
                    index_entries=removed,
                )

    # --- compaction (``_entrylog_compactor``) ---------------------------------------------------

    def entry_log_usage(self) -> list[EntryLogUsage]:
        return self._compactor.usage()

    async def compact(self, threshold: float) -> CompactionResult:
        return await self._compactor.compact(threshold)

    async def aclose(self) -> None:
        if self._journal is None:
            return
        if not self._checkpoint_failed:
            try:
                await self.checkpoint()
            except BookieIOError as exc:
                log.error("final_checkpoint_failed", error=str(exc))
        await anyio.to_thread.run_sync(self._close_sync)

    def _close_sync(self) -> None:
        if self._preallocator is not None:  # no zeros written after the journal closes
            self._preallocator.shutdown(wait=True)
            self._preallocator = None
        for closer in (self._journal, self._entrylog, self._index):
            if closer is not None:
                try:
                    closer.close()
                except OSError as exc:
                    log.warning("close_failed", error=str(exc))
        self._journal = None
        self._entrylog = None
        self._index = None
