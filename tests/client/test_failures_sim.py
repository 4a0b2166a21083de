"""The writer's and reader's failure handling, on real bookies over a simulated network
(walkit.testing.SimCluster, MockClock): crashed, paused and slow bookies, ensemble changes,
speculative reads, tailing while bookies come and go. Each scenario checks that no
acknowledged entry is lost or reordered."""

from __future__ import annotations

import trio
import trio.testing

from walkit._core.ledger_metadata import LedgerMetadata, LedgerState
from walkit._core.types import BookieId
from walkit.client import Client, client_services
from walkit.errors import NotEnoughBookiesError, WalkitError, WriterFencedError
from walkit.ledger import LedgerWriter
from walkit.testing import SimCluster


def payload(i: int) -> bytes:
    return f"entry-{i}".encode() * 3


async def read_all(client: Client, ledger_id: int, last: int) -> list[bytes]:
    lr = await client.open_ledger(ledger_id)
    assert lr.last_add_confirmed >= last
    return [e.payload for e in await lr.read(0, last)]


class Appender:
    """Appends one entry at a time, recording each acknowledged id, until stopped."""

    def __init__(self, lw: LedgerWriter) -> None:
        self.lw = lw
        self.acked: list[int] = []
        self.stop = trio.Event()
        self._target = -1
        self._reached = trio.Event()

    async def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            eid = await self.lw.append(payload(i))
            assert eid == i
            self.acked.append(eid)
            i += 1
            if len(self.acked) >= self._target:
                self._reached.set()

    async def wait_for(self, count: int) -> None:
        self._target = count
        self._reached = trio.Event()
        if len(self.acked) < count:
            await self._reached.wait()


def fragment_bookies(md: LedgerMetadata) -> list[set[BookieId]]:
    return [set(ens) for _, ens in md.fragments]


async def test_crashed_bookie_is_replaced_and_nothing_acknowledged_is_lost(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with SimCluster(4) as sim, sim.client() as client:
        lw = await client.create_ledger(3, 2, 2)
        victim = lw.metadata.current_ensemble[1]
        appender = Appender(lw)
        acked = appender.acked
        async with trio.open_nursery() as nursery:
            nursery.start_soon(appender.run)
            await appender.wait_for(50)
            await sim.crash_bookie(victim)
            at_crash = len(acked)
            await appender.wait_for(at_crash + 50)
            appender.stop.set()
        await lw.close()
        md = await client.ledger_metadata(lw.id)
        assert md.last_entry_id == acked[-1]
        assert len(md.fragments) == 2
        assert victim in fragment_bookies(md)[0]
        assert victim not in fragment_bookies(md)[1]
        assert at_crash - 10 <= md.fragments[1][0] <= at_crash + 10
        assert await read_all(client, lw.id, acked[-1]) == [payload(i) for i in acked]


async def test_slow_bookie_times_out_and_is_replaced(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with SimCluster(4) as sim, sim.client(add_timeout=2.0) as client:
        lw = await client.create_ledger(3, 3, 3)  # every write needs every bookie
        await lw.append_batch([payload(i) for i in range(10)])
        victim = lw.metadata.current_ensemble[0]
        sim.pause_bookie(victim)  # holds traffic: no error, only silence
        ids = await lw.append_batch([payload(i) for i in range(10, 20)])
        assert ids == list(range(10, 20))
        md = await client.ledger_metadata(lw.id)
        assert victim not in md.current_ensemble
        assert md.fragments[-1][0] == 10
        sim.resume_bookie(victim)
        await lw.close()
        assert await read_all(client, lw.id, 19) == [payload(i) for i in range(20)]


async def test_no_replacement_fails_pending_appends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with SimCluster(3) as sim, sim.client() as client:
        lw = await client.create_ledger(3, 2, 2)
        await lw.append_batch([payload(i) for i in range(5)])
        await sim.crash_bookie(lw.metadata.current_ensemble[2])
        failed: WalkitError | None = None
        try:
            for i in range(5, 50):
                await lw.append(payload(i))
        except NotEnoughBookiesError as exc:
            failed = exc
        assert failed is not None
        await lw.close()  # closes at the last acknowledged entry
        md = await client.ledger_metadata(lw.id)
        assert md.is_closed and md.last_entry_id == lw.last_add_confirmed >= 4
        last = md.last_entry_id
        assert await read_all(client, lw.id, last) == [payload(i) for i in range(last + 1)]


async def test_delayed_ensemble_change_waits_until_ack_quorum_is_lost(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with SimCluster(5) as sim, sim.client(ensemble_change="when_ack_quorum_lost") as client:
        lw = await client.create_ledger(3, 3, 2)
        ensemble = lw.metadata.current_ensemble
        await lw.append_batch([payload(i) for i in range(10)])
        await sim.crash_bookie(ensemble[0])
        await lw.append_batch([payload(i) for i in range(10, 20)])
        assert len((await client.ledger_metadata(lw.id)).fragments) == 1  # Qa still reachable
        await sim.crash_bookie(ensemble[1])
        await lw.append_batch([payload(i) for i in range(20, 30)])
        md = await client.ledger_metadata(lw.id)
        assert len(md.fragments) == 2
        assert not {ensemble[0], ensemble[1]} & set(md.current_ensemble)
        await lw.close()
        assert await read_all(client, lw.id, 29) == [payload(i) for i in range(30)]


async def test_ensemble_change_on_a_ledger_in_recovery_fences_the_writer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with SimCluster(4) as sim, sim.client() as client:
        lw = await client.create_ledger(3, 2, 2)
        await lw.append_batch([payload(i) for i in range(5)])
        ledgers = client_services(client).context.ledgers
        md, version = await ledgers.read(lw.id)
        await ledgers.write(md.with_state(LedgerState.IN_RECOVERY), version)
        await sim.crash_bookie(lw.metadata.current_ensemble[0])
        try:
            for i in range(5, 100):
                await lw.append(payload(i))
        except WriterFencedError:
            pass
        else:
            raise AssertionError("the writer was not fenced")
        assert lw.last_add_confirmed >= 4
        assert (await client.ledger_metadata(lw.id)).state is LedgerState.IN_RECOVERY


async def test_reads_survive_a_dead_replica_and_a_stalled_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with SimCluster(3) as sim:
        async with sim.client() as client:
            lw = await client.create_ledger(3, 3, 2)
            await lw.append_batch([payload(i) for i in range(100)])
            await lw.close()
            ensemble = lw.metadata.current_ensemble
        await sim.crash_bookie(ensemble[0])
        # The reader never times out on its own: only speculation can get around a stall.
        async with sim.client(
            "reader", read_timeout=10_000.0, speculative_read_timeout=0.05
        ) as reader:
            lr = await reader.open_ledger(lw.id)
            order = client_services(reader).context.read_order(ensemble, [0, 1, 2])
            stalled = next(ensemble[s] for s in order if ensemble[s] != ensemble[0])
            sim.network.stall("reader", sim.node(stalled))
            with trio.fail_after(1_000):
                entries = await lr.read(0, 99)
            assert [e.payload for e in entries] == [payload(i) for i in range(100)]


async def test_tailing_keeps_working_while_bookies_come_and_go(
    autojump_clock: trio.testing.MockClock,
) -> None:
    total = 120
    async with SimCluster(5) as sim, sim.client("writer") as wc, sim.client("reader") as rc:
        lw = await wc.create_ledger(3, 2, 2)
        lr = await rc.open_ledger(lw.id)
        seen: list[bytes] = []

        async def tail() -> None:
            for eid in range(total):
                entry = await lr.wait_for_entry(eid, timeout=600)
                assert entry is not None and entry.entry_id == eid
                seen.append(entry.payload)

        async def churn() -> None:
            for round_ in range(3):
                await trio.sleep(0.05)
                md = await wc.ledger_metadata(lw.id)
                victim = md.current_ensemble[round_ % 3]
                await sim.crash_bookie(victim)
                await trio.sleep(0.05)
                await sim.start_bookie(victim)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(tail)
            nursery.start_soon(churn)
            for i in range(total):
                assert await lw.append(payload(i)) == i
                await trio.sleep(0.003)
        assert seen == [payload(i) for i in range(total)]
        await lw.close()
        md = await wc.ledger_metadata(lw.id)
        assert len(md.fragments) >= 2


async def test_recovery_fences_the_writer_and_keeps_every_acknowledged_entry(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with SimCluster(3) as sim, sim.client("writer") as wc, sim.client("reader") as rc:
        lw = await wc.create_ledger(3, 2, 2, password=b"r")
        appender = Appender(lw)
        fenced = trio.Event()

        async def write() -> None:
            try:
                await appender.run()
            except WriterFencedError:
                fenced.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            await appender.wait_for(40)
            lr = await rc.open_ledger(lw.id, password=b"r", recovery=True)
            with trio.fail_after(60):
                await fenced.wait()
        assert lr.is_closed
        acked = appender.acked
        # The closed ledger ends at or after the last acknowledged entry; all of it reads back.
        assert lr.last_add_confirmed >= acked[-1]
        entries = await lr.read(0, lr.last_add_confirmed)
        assert [e.payload for e in entries] == [payload(i) for i in range(len(entries))]
        # The fenced writer cannot close the ledger differently, nor append.
        with trio.fail_after(60):
            try:
                await lw.close()
            except WriterFencedError:
                assert lr.last_add_confirmed != lw.last_add_confirmed
            else:
                assert lr.last_add_confirmed == lw.last_add_confirmed
