"""Group commit: many adds share one journal write and sync; a lone request committed by its
reader; MemoryStorage's crash model."""

from __future__ import annotations

import contextlib
import errno
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.bookie._helpers import config, connect, packet, payload_for, running_bookie
from walkit._core.types import BookieId
from walkit._core.wire import (
    AddFlag,
    AddRequest,
    ReadLacFlag,
    Request,
    StatusCode,
    encode_frame,
)
from walkit.errors import CookieError
from walkit.testing import SimNetwork
from walkit_bookie import Bookie, BookieConfig, MemoryStorage
from walkit_bookie.storage import GroupCommit


async def test_concurrent_adds_share_journal_syncs(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "j", tmp_path / "l"])) as (bookie, bid):
        per_connection = 500

        async def writer(ledger: int) -> None:
            async with connect(bid) as c:
                reqs = [
                    c.add_request(ledger, e, payload_for(ledger, e)) for e in range(per_connection)
                ]
                answers = await c.call_many(reqs)
                assert all(a.status is StatusCode.OK for a in answers)  # type: ignore[union-attr]

        async with trio.open_nursery() as nursery:
            for ledger in range(1, 9):
                nursery.start_soon(writer, ledger)
        stats = bookie.storage.stats
        adds = 8 * per_connection
        assert stats.journal_records == adds
        # Every add was synced (acknowledged only after its group's write), in far fewer syncs.
        assert 1 <= stats.journal_syncs <= adds // 10, stats
        assert bookie.group_commit.groups <= adds // 10
        async with connect(bid) as c:
            for ledger in (1, 8):
                got = await c.read(ledger, per_connection - 1)
                assert got.packet == packet(
                    ledger, per_connection - 1, payload_for(ledger, per_connection - 1)
                )


def _sim_config(**kw: object) -> BookieConfig:
    return BookieConfig(data_dirs=["/sim/bookie-0"], host="bookie-0", port=3181, **kw)  # type: ignore[arg-type]


async def test_memory_storage_groups_on_the_mock_clock_and_crash_loses_only_unsynced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = SimNetwork(seed=1)
    storage = MemoryStorage(sync_latency=0.002)
    cfg = _sim_config()

    async with trio.open_nursery() as nursery:
        bookie = Bookie(cfg, network=net.node("bookie-0"), storage=storage)
        bid: BookieId = await nursery.start(bookie.run)
        async with connect(bid, net.node("client")) as c:
            start = trio.current_time()
            answers = await c.call_many([c.add_request(1, e, b"x%d" % e) for e in range(200)])
            assert all(a.status is StatusCode.OK for a in answers)  # type: ignore[union-attr]
            assert trio.current_time() - start < 1.0  # mock time: a few syncs of 2 ms
            assert storage.stats.journal_syncs < 20
            assert len(storage.entries) == 200
            assert (await c.read_lac(1, flags=ReadLacFlag.FENCE)).status is StatusCode.OK

            # Adds whose sync is still running when the storage crashes are lost.
            late = [c.add_request(2, e, b"y") for e in range(5)]
            await c.stream.send_all(b"".join(encode_frame(r) for r in late))
            for _ in range(10_000):  # until the bookie's sync of them is under way
                if storage.unsynced:
                    break
                await trio.lowlevel.checkpoint()
            assert len(storage.unsynced) == 5
            storage.crash()
            nursery.cancel_scope.cancel()

    assert storage.unsynced == []
    assert not any(lid == 2 for lid, _ in storage.entries)
    async with trio.open_nursery() as nursery:
        bookie = Bookie(cfg, network=net.node("bookie-0"), storage=storage)
        bid = await nursery.start(bookie.run)
        async with connect(bid, net.node("client")) as c:
            assert (await c.read(1, 199)).packet == packet(1, 199, b"x199")
            assert (await c.read(2, 0)).status is StatusCode.NO_SUCH_LEDGER
            assert (await c.add(1, 200, b"after")).status is StatusCode.LEDGER_FENCED
        nursery.cancel_scope.cancel()


async def test_memory_storage_belongs_to_one_bookie(autojump_clock: trio.testing.MockClock) -> None:
    net = SimNetwork(seed=2)
    storage = MemoryStorage()
    async with trio.open_nursery() as nursery:
        await nursery.start(
            Bookie(_sim_config(), network=net.node("bookie-0"), storage=storage).run
        )
        nursery.cancel_scope.cancel()
    other = BookieConfig(data_dirs=["/sim/x"], host="bookie-1", port=3181)
    with pytest.raises(CookieError):
        await Bookie(other, network=net.node("bookie-1"), storage=storage).run()


async def test_full_memory_storage_turns_the_bookie_read_only(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = SimNetwork(seed=3)
    storage = MemoryStorage()
    async with trio.open_nursery() as nursery:
        bookie = Bookie(
            _sim_config(disk_check_interval=1.0), network=net.node("bookie-0"), storage=storage
        )
        bid = await nursery.start(bookie.run)
        async with connect(bid, net.node("client")) as c:
            assert (await c.add(1, 0, b"a")).status is StatusCode.OK
            storage.fail_writes = OSError(errno.ENOSPC, "No space left on device")
            assert (await c.add(1, 1, b"b")).status is StatusCode.BOOKIE_READ_ONLY
            assert bookie.read_only
            assert (await c.add(1, 2, b"c")).status is StatusCode.BOOKIE_READ_ONLY
            assert (await c.read(1, 0)).status is StatusCode.OK
            # Space comes back: the periodic check makes it writable again (the mode change
            # the registration task follows; at most one check interval away).
            storage.fail_writes = None
            read_only, changed = bookie._mode_source()
            assert read_only
            storage.usage = 0.5
            with trio.fail_after(1.5):
                await changed.wait()
            assert not bookie.read_only
            assert (await c.add(1, 1, b"b")).status is StatusCode.OK
            read_only, changed = bookie._mode_source()
            assert not read_only
            storage.usage = 0.99
            with trio.fail_after(1.5):
                await changed.wait()
            assert bookie.read_only
            assert (await c.add(1, 2, b"c")).status is StatusCode.BOOKIE_READ_ONLY
        nursery.cancel_scope.cancel()


class _Journal:
    """A committer that records what it was given, and how (``commit`` or ``commit_now``)."""

    def __init__(self, *, now: bool = True, error: OSError | None = None) -> None:
        self.now = now
        self.error = error
        self.calls: list[tuple[str, int]] = []

    async def commit(self, bodies: Sequence[bytes], requests: Sequence[Request]) -> None:
        self.calls.append(("commit", len(bodies)))
        if self.error is not None:
            raise self.error

    def commit_now(self, bodies: Sequence[bytes], requests: Sequence[Request]) -> bool:
        if not self.now:
            return False
        self.calls.append(("commit_now", len(bodies)))
        if self.error is not None:
            raise self.error
        return True


def _add(entry_id: int) -> AddRequest:
    return AddRequest(entry_id, 1, entry_id, b"k" * 20, packet(1, entry_id, b"x"), AddFlag.NONE)


@contextlib.asynccontextmanager
async def _group(journal: _Journal) -> AsyncIterator[tuple[GroupCommit, list[object]]]:
    done: list[object] = []

    def on_committed(requests: list[Request], sinks: list[object], error: object) -> None:
        done.extend((sink, error) for sink in sinks)

    group = GroupCommit(journal, on_committed, max_wait=0.001, max_bytes=1 << 20)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(group.run)
        await trio.testing.wait_all_tasks_blocked()
        yield group, done
        nursery.cancel_scope.cancel()


async def test_a_lone_deferred_request_is_committed_by_the_caller() -> None:
    journal = _Journal()
    async with _group(journal) as (group, done):
        group.defer_wake()
        group.submit(b"body", _add(0), "a")
        assert done == []  # deferred: nothing yet, and the task was not woken
        group.flush()
        assert done == [("a", None)]  # committed and answered before flush returned
        assert journal.calls == [("commit_now", 1)]
        # The task stays parked and takes the next request the usual way.
        group.submit(b"body", _add(1), "b")
        await trio.testing.wait_all_tasks_blocked()
        assert journal.calls[-1] == ("commit", 1) and done[-1] == ("b", None)
        assert group.groups == 2


async def _committed_by_the_task(
    group: GroupCommit, done: list[object], journal: _Journal, sink: str, *, here: bool = True
) -> None:
    """Submit one deferred request and flush: the task, not the caller, commits it."""
    before = list(done)
    group.defer_wake()
    group.submit(b"body", _add(len(before)), sink)
    group.flush(here=here)
    assert done == before  # not committed by the caller
    await trio.testing.wait_all_tasks_blocked()
    assert journal.calls[-1] == ("commit", 1) and done[-1] == (sink, None)


async def test_deferred_requests_go_to_the_task_when_it_could_group_them() -> None:
    # Several requests in one chunk, a committer that cannot commit at once, or another task
    # ready to run (it may have a request for the same group): the task commits them.
    journal = _Journal()
    async with _group(journal) as (group, done):
        group.defer_wake()
        group.submit(b"body", _add(0), "a")
        group.submit(b"body", _add(1), "b")
        group.flush()
        assert done == []
        await trio.testing.wait_all_tasks_blocked()
        assert journal.calls == [("commit", 2)] and done == [("a", None), ("b", None)]

        async def other() -> None:
            pass

        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)  # runnable until this task yields
            await _committed_by_the_task(group, done, journal, "c")
        await _committed_by_the_task(group, done, journal, "d", here=False)  # many connections
        journal.now = False
        await _committed_by_the_task(group, done, journal, "e")
        assert ("commit_now", 1) not in journal.calls


async def test_a_failed_commit_by_the_caller_answers_with_the_error() -> None:
    error = OSError(errno.ENOSPC, "No space left on device")
    journal = _Journal(error=error)
    async with _group(journal) as (group, done):
        group.defer_wake()
        group.submit(b"body", _add(0), "a")
        group.flush()
        assert done == [("a", error)]
        assert group.pending == 0
