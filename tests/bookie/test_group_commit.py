"""Group commit: many adds share one journal write and sync; MemoryStorage's crash model."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.bookie._helpers import config, connect, packet, payload_for, running_bookie
from walkit._core.types import BookieId
from walkit._core.wire import ReadLacFlag, StatusCode, encode_frame
from walkit.errors import CookieError
from walkit.testing import SimNetwork
from walkit_bookie import Bookie, BookieConfig, MemoryStorage


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
