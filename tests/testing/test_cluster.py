"""SimCluster: real bookies and clients on the simulated network and storage."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from walkit import LedgerState
from walkit.errors import SessionExpiredError, WalkitError
from walkit.metadata import list_bookies
from walkit.testing import SimCluster, run


async def test_write_close_read_back(autojump_clock: trio.testing.MockClock) -> None:
    async with SimCluster(bookies=3, seed=11) as cluster:
        async with cluster.client("writer") as client:
            lw = await client.create_ledger(3, 2, 2, password=b"pw")
            for i in range(10):
                assert await cluster.history.append("writer", lw, b"w-%d" % i) == i
            await cluster.history.close("writer", lw)
            md = await cluster.read_back(client, lw.id, password=b"pw", recovery=False)
        assert md.state is LedgerState.CLOSED and md.last_entry_id == 9
        copies = cluster.stored_copies(md, b"pw")
        assert sum(len(held) for held in copies.values()) == 20  # Qw=2 copies of 10 entries
        results = cluster.assert_ok()
        assert results[0].counts["verified"] == 10


async def test_crash_loses_unsynced_and_restart_recovers(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        SimCluster(bookies=1, seed=3, sync_latency=1.0) as cluster,
        cluster.client("writer", add_timeout=100.0) as client,
    ):
        lw = await client.create_ledger(1, 1, 1)
        await lw.append(b"synced")
        storage = cluster.bookie(0).storage
        assert storage.entries[(lw.id, 0)]

        failed: list[WalkitError] = []

        async def in_flight() -> None:
            try:
                await lw.append(b"in flight")
            except WalkitError as exc:  # the only bookie crashed: no replacement
                failed.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(in_flight)
            await trio.sleep(0.5)  # the add is written, its sync not done
            assert storage.unsynced
            await cluster.crash_bookie(0)
            assert not cluster.bookie(0).running
            assert (lw.id, 1) not in storage.entries
            await cluster.restart_bookie(0)
            assert cluster.bookie(0).incarnations == 2
        assert len(failed) == 1
        assert (lw.id, 0) in storage.entries
        assert (lw.id, 1) not in storage.entries


async def test_pause_and_partition_and_session_expiry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with SimCluster(bookies=4, seed=5) as cluster:
        async with cluster.client("writer", add_timeout=2.0) as client:
            lw = await client.create_ledger(3, 3, 2)
            await lw.append(b"a")
            first = lw.metadata.current_ensemble
            # Cut the writer from one bookie of its ensemble: the next add replaces it.
            cluster.partition("writer", first[0], reset=True)
            await lw.append(b"b")
            assert first[0] not in lw.metadata.current_ensemble
            cluster.heal()
            cluster.pause_bookie(lw.metadata.current_ensemble[1])
            await lw.append(b"c")  # Qa=2 of 3 still answer
            cluster.resume_bookie(lw.metadata.current_ensemble[1])
            await lw.close()

            store = client.metadata_store
            assert len((await list_bookies(store)).writable) == 4
            await cluster.expire_session(client)
            with pytest.raises(SessionExpiredError):
                await store.get("/")
        faults = [what for _, what, _, _ in cluster.network.fault_log]
        assert "partition (reset)" in faults and "pause" in faults


async def test_crashed_bookie_is_replaced(autojump_clock: trio.testing.MockClock) -> None:
    async with SimCluster(bookies=4, seed=8) as cluster:
        async with cluster.client("writer", add_timeout=2.0) as client:
            lw = await client.create_ledger(3, 2, 2)
            for i in range(5):
                await cluster.history.append("writer", lw, b"%d" % i)
            victim = lw.metadata.current_ensemble[0]
            await cluster.crash_bookie(victim)
            for i in range(5, 10):
                await cluster.history.append("writer", lw, b"%d" % i)
            assert victim not in lw.metadata.current_ensemble
            await cluster.restart_bookie(victim)
            await cluster.history.close("writer", lw)
            await cluster.read_back(client, lw.id, recovery=False)
        cluster.assert_ok()


async def test_assert_ok_reports_the_seed(autojump_clock: trio.testing.MockClock) -> None:
    async with SimCluster(bookies=0, seed=424242, announce=False) as cluster:
        invoked = cluster.history.record_add_invoked("w", 1, b"x")
        cluster.history.record_add_acked(invoked, 0)
        with pytest.raises(AssertionError, match="WALKIT_SIM_SEED=424242"):
            cluster.assert_ok()


def _scenario_trace(seed: int) -> list[tuple[float, str]]:
    """A run with jittered delays and a crash; returns what happened when."""

    async def main() -> list[tuple[float, str]]:
        trace: list[tuple[float, str]] = []
        async with SimCluster(bookies=4, seed=seed, announce=False) as cluster:
            cluster.network.set_delay(0.001, jitter=0.004)
            async with cluster.client("writer", add_timeout=1.0) as client:
                lw = await client.create_ledger(3, 2, 2)
                trace.append((trio.current_time(), repr(lw.metadata.current_ensemble)))

                async def appender(k: int) -> None:
                    for i in range(5):
                        try:
                            eid = await lw.append(b"%d-%d" % (k, i))
                        except WalkitError as exc:
                            trace.append((trio.current_time(), type(exc).__name__))
                            return
                        trace.append((trio.current_time(), f"{k}-{i}@{eid}"))

                async with trio.open_nursery() as nursery:
                    for k in range(3):
                        nursery.start_soon(appender, k)
                    await trio.sleep(0.01)
                    await cluster.crash_bookie(lw.metadata.current_ensemble[1])
                trace.append((trio.current_time(), repr(lw.metadata.fragments)))
        return trace

    return run(main, seed=seed, announce=False)


def test_a_seed_replays_exactly() -> None:
    first = _scenario_trace(21)
    assert _scenario_trace(21) == first
    assert any("@" in what for _, what in first)
