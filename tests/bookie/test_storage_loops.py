"""The bookie's storage on every event loop it may run on: trio, asyncio, uvloop.

The storage is written against AnyIO; these scenarios drive the real disk storage (journal
with O_DSYNC writes, entry logs, LMDB index) through its group commit, checkpoints, garbage
collection and compaction on a fresh loop of each kind, and check that every acknowledged
add is durable and reads back, in fewer syncs than adds.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest

from tests._event_loops import ASYNCIO_LOOPS, EVENT_LOOPS, run_on
from tests.bookie._helpers import config, packet, payload_for
from walkit._core.types import BookieId
from walkit._core.wire import AddFlag, AddRequest, Request, encode_body
from walkit_bookie.storage import DiskStorage, GarbageCollector, GroupCommit, MemoryStorage
from walkit_bookie.storage._journal import JournalWriter, LogMark

BOOKIE = BookieId("127.0.0.1", 3181)


def _add(ledger_id: int, entry_id: int, size: int = 100) -> tuple[bytes, AddRequest]:
    request = AddRequest(
        entry_id,
        ledger_id,
        entry_id,
        b"k" * 20,
        packet(ledger_id, entry_id, payload_for(ledger_id, entry_id, size)),
        AddFlag.NONE,
    )
    return encode_body(request), request


class _Recorded:
    """The disk storage as a group commit's committer, recording how each group came:
    ``commit`` (the committing task) or ``commit_now`` (without it)."""

    def __init__(self, storage: DiskStorage) -> None:
        self.storage = storage
        self.calls: list[tuple[str, int]] = []

    async def commit(self, bodies: Sequence[bytes], requests: Sequence[Request]) -> None:
        self.calls.append(("commit", len(bodies)))
        await self.storage.commit(bodies, requests)

    def commit_now(self, bodies: Sequence[bytes], requests: Sequence[Request]) -> bool:
        done = self.storage.commit_now(bodies, requests)
        if done:
            self.calls.append(("commit_now", len(bodies)))
        return done


class _Acks:
    """What ``on_committed`` answered: a sink per request, with its error; an event when
    ``expected`` were answered."""

    def __init__(self) -> None:
        self.answered: list[tuple[object, BaseException | None]] = []
        self.expected = 0
        self.all_in = anyio.Event()

    def __call__(
        self, requests: list[Request], sinks: list[object], error: BaseException | None
    ) -> None:
        self.answered.extend((sink, error) for sink in sinks)
        if len(self.answered) >= self.expected:
            self.all_in.set()


async def _writers_and_reads(tmp: Path) -> None:
    dirs = [tmp / "j", tmp / "l"]
    storage = DiskStorage(config(dirs))
    assert await storage.open(BOOKIE, "cluster", instance_id_is_known=False) == {}
    committer = _Recorded(storage)
    acks = _Acks()
    group = GroupCommit(committer, acks, max_wait=0.001, max_bytes=1 << 20)
    ledgers, per_ledger = 8, 60
    acks.expected = ledgers * per_ledger

    async def writer(ledger_id: int) -> None:
        for entry_id in range(0, per_ledger, 3):  # chunks of three, as a reader hands them
            group.defer_wake()
            for e in range(entry_id, entry_id + 3):
                body, request = _add(ledger_id, e)
                group.submit(body, request, (ledger_id, e))
            group.flush()
            await anyio.lowlevel.checkpoint()

    async with anyio.create_task_group() as tg:
        tg.start_soon(group.run)
        async with anyio.create_task_group() as writers:
            for ledger_id in range(1, ledgers + 1):
                writers.start_soon(writer, ledger_id)
        with anyio.fail_after(30):
            await acks.all_in.wait()
        # A lone request with the committing task idle: committed without that task.
        acks.expected += 1
        acks.all_in = anyio.Event()
        body, request = _add(1, per_ledger)
        group.defer_wake()
        group.submit(body, request, (1, per_ledger))
        group.flush()
        with anyio.fail_after(30):
            await acks.all_in.wait()
        assert committer.calls[-1] == ("commit_now", 1)
        tg.cancel_scope.cancel()

    assert all(error is None for _, error in acks.answered)
    assert len(acks.answered) == ledgers * per_ledger + 1
    stats = storage.stats
    assert stats.journal_records == ledgers * per_ledger + 1
    assert 1 <= stats.journal_syncs < stats.journal_records  # grouped
    await storage.checkpoint()
    keys = [(lid, e) for lid in range(1, ledgers + 1) for e in (0, per_ledger - 1)]
    assert await storage.read_entries(keys) == [
        packet(lid, e, payload_for(lid, e, 100)) for lid, e in keys
    ]
    await storage.aclose()

    # Reopened: the ledgers' state and the entries are there (from the entry logs).
    again = DiskStorage(config(dirs))
    ledgers_found = await again.open(BOOKIE, "cluster", instance_id_is_known=False)
    assert sorted(ledgers_found) == list(range(1, ledgers + 1))
    assert await again.read_entries([(1, per_ledger)]) == [
        packet(1, per_ledger, payload_for(1, per_ledger, 100))
    ]
    await again.aclose()


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_disk_storage_groups_commits_and_reads_back_on_every_loop(
    loop: str, tmp_path: Path
) -> None:
    run_on(loop, _writers_and_reads, tmp_path)


async def _joins_the_lone_request(tmp: Path) -> list[tuple[str, int]]:
    storage = DiskStorage(config([tmp / "j", tmp / "l"]))
    await storage.open(BOOKIE, "cluster", instance_id_is_known=False)
    committer = _Recorded(storage)
    acks = _Acks()
    acks.expected = 2
    group = GroupCommit(committer, acks, max_wait=0.001, max_bytes=1 << 20)

    async def other_reader() -> None:
        group.defer_wake()
        body, request = _add(2, 0)
        group.submit(body, request, "b")
        group.flush()

    async with anyio.create_task_group() as tg:
        tg.start_soon(group.run)
        await anyio.wait_all_tasks_blocked()
        tg.start_soon(other_reader)  # ready to run now: it gets its turn first
        group.defer_wake()
        body, request = _add(1, 0)
        group.submit(body, request, "a")
        group.flush()
        assert acks.answered == []  # not before the ready task's turn
        with anyio.fail_after(30):
            await acks.all_in.wait()
        tg.cancel_scope.cancel()
    await storage.aclose()
    assert sorted(sink for sink, _ in acks.answered) == ["a", "b"]  # type: ignore[type-var]
    return committer.calls


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_a_request_readied_beside_a_lone_one_joins_its_write(loop: str, tmp_path: Path) -> None:
    # asyncio and uvloop cannot say whether a task is ready, so a lone request waits for the
    # ready tasks' turn: the other reader's request goes in the same write, still without
    # the committing task.
    assert run_on(loop, _joins_the_lone_request, tmp_path) == [("commit_now", 2)]


async def _failed_commit(tmp: Path) -> None:
    storage = DiskStorage(config([tmp / "j", tmp / "l"]))
    await storage.open(BOOKIE, "cluster", instance_id_is_known=False)
    acks = _Acks()
    acks.expected = 1
    error = OSError(errno.ENOSPC, "No space left on device")

    class Full:
        async def commit(self, bodies: Sequence[bytes], requests: Sequence[Request]) -> None:
            raise error

        def commit_now(self, bodies: Sequence[bytes], requests: Sequence[Request]) -> bool:
            raise error

    group = GroupCommit(Full(), acks, max_wait=0.001, max_bytes=1 << 20)
    async with anyio.create_task_group() as tg:
        tg.start_soon(group.run)
        await anyio.wait_all_tasks_blocked()
        group.defer_wake()
        body, request = _add(1, 0)
        group.submit(body, request, "a")
        group.flush()
        with anyio.fail_after(30):
            await acks.all_in.wait()
        tg.cancel_scope.cancel()
    assert acks.answered == [("a", error)]
    assert group.failed_groups == 1 and group.last_error is error and group.pending == 0
    await storage.aclose()


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_a_failed_lone_commit_is_answered_with_its_error(loop: str, tmp_path: Path) -> None:
    run_on(loop, _failed_commit, tmp_path)


async def _collect(tmp: Path) -> None:
    cfg = config([tmp / "j", tmp / "l"], entrylog_max_size=64 * 1024)
    storage = DiskStorage(cfg)
    await storage.open(BOOKIE, "cluster", instance_id_is_known=False)
    for ledger_id in (1, 2):
        adds = [_add(ledger_id, e, 3000) for e in range(40)]
        await storage.commit([b for b, _ in adds], [r for _, r in adds])
        await storage.checkpoint()  # each ledger in entry logs of its own
    ledgers = {1, 2}

    async def forget(ids: list[int]) -> None:
        for ledger_id in ids:
            ledgers.discard(ledger_id)
        await storage.delete_ledgers(ids)

    gc = GarbageCollector(
        cfg,
        storage,
        ledger_ids=lambda: list(ledgers),
        forget=forget,
        store=lambda: None,
        instance_id=lambda: None,
    )
    await forget([1])
    before = sum(u.size for u in storage.entry_log_usage())
    report = await gc.collect("major")
    assert report.skipped == "no metadata store"
    assert report.result is not None and report.result.logs_removed >= 1
    assert sum(u.size for u in storage.entry_log_usage()) < before
    assert gc.last["major"] is not None
    assert await storage.read_entries([(2, 39)]) == [packet(2, 39, payload_for(2, 39, 3000))]
    await storage.aclose()


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_garbage_collection_reclaims_a_forgotten_ledger_on_every_loop(
    loop: str, tmp_path: Path
) -> None:
    run_on(loop, _collect, tmp_path)


async def _memory_storage() -> None:
    storage = MemoryStorage(sync_latency=0.001)
    await storage.open(BOOKIE, "cluster", instance_id_is_known=False)
    body, request = _add(1, 0)
    await storage.commit([body], [request])
    assert storage.cached_entry(1, 0) == request.packet
    assert await storage.read_entries([(1, 0), (1, 1)]) == [request.packet, None]
    await storage.checkpoint()
    await storage.aclose()


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_memory_storage_runs_on_asyncio(loop: str) -> None:
    run_on(loop, _memory_storage)


async def _lone_requests(tmp: Path) -> tuple[list[tuple[str, int]], list[bool]]:
    """A lone 100 B add, then a lone 64 KiB one (a quarter of journal_thread_min_bytes), each
    on an idle journal: how each was committed, and whether its write ran off the loop's
    thread."""
    storage = DiskStorage(config([tmp / "j", tmp / "l"], journal_thread_min_bytes=256 * 1024))
    await storage.open(BOOKIE, "cluster", instance_id_is_known=False)
    committer = _Recorded(storage)
    acks = _Acks()
    group = GroupCommit(committer, acks, max_wait=0.001, max_bytes=1 << 20)
    loop_thread = threading.get_ident()
    off_loop: list[bool] = []
    write = JournalWriter.write

    def recorded(self: JournalWriter, bodies: Sequence[bytes]) -> LogMark:
        off_loop.append(threading.get_ident() != loop_thread)
        return write(self, bodies)

    JournalWriter.write = recorded  # type: ignore[method-assign]
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(group.run)
            for entry_id, size in enumerate((100, 64 * 1024)):
                await anyio.wait_all_tasks_blocked()
                acks.expected += 1
                acks.all_in = anyio.Event()
                body, request = _add(1, entry_id, size)
                group.defer_wake()
                group.submit(body, request, entry_id)
                group.flush()
                with anyio.fail_after(30):
                    await acks.all_in.wait()
            tg.cancel_scope.cancel()
    finally:
        JournalWriter.write = write  # type: ignore[method-assign]
        await storage.aclose()
    assert [error for _, error in acks.answered] == [None, None]
    return committer.calls, off_loop


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_a_big_lone_add_is_written_off_the_loop(loop: str, tmp_path: Path) -> None:
    # A small lone add is written at once, on the loop (no hand-off); a big one that came
    # alone (TLS trickles adds in one 16 KiB record per read) from a worker thread, so the
    # loop goes on reading the next adds, which form the next group, while it is written.
    calls, off_loop = run_on(loop, _lone_requests, tmp_path)
    assert calls == [("commit_now", 1), ("commit", 1)]
    assert off_loop == [False, True]
