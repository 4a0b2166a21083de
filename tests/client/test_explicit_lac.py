"""The writer's explicit LAC (``explicit_lac_interval``): sent once the writer has sent no entry
for that long, never while entries keep coming (they carry the LAC themselves)."""

from __future__ import annotations

import random

import trio
import trio.testing

from walkit.testing import SimCluster

INTERVAL = 0.005


def bookie_lacs(sim: SimCluster, ledger_id: int) -> list[int]:
    """The LAC each bookie would answer: the highest an entry carried or was sent alone."""
    lacs = []
    for bookie in sim.bookie_ids:
        running = sim.bookie(bookie).bookie
        assert running is not None
        info = running.handler.ledgers[ledger_id]
        lacs.append(max(info.lac, info.explicit_lac))
    return lacs


def requests(sim: SimCluster) -> int:
    total = 0
    for bookie in sim.bookie_ids:
        running = sim.bookie(bookie).bookie
        assert running is not None
        total += running.handler.stats.requests
    return total


async def test_lac_is_sent_after_the_last_entry_and_not_during_a_stream(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        SimCluster(3) as sim,
        sim.client(explicit_lac_interval=INTERVAL) as client,
    ):
        lw = await client.create_ledger(3, 3, 2)
        await lw.append(b"first")
        await trio.sleep(10 * INTERVAL)  # idle: the LAC of entry 0 went out
        assert bookie_lacs(sim, lw.id) == [0, 0, 0]
        before = requests(sim)
        # 200 entries, with pauses well under INTERVAL between them (varied, so no timer can
        # keep falling between an entry's send and its acknowledgement by chance): each entry
        # carries the LAC, and no explicit one is due.
        pauses = random.Random(1)
        for i in range(1, 201):
            await lw.append(b"entry %d" % i)
            await trio.sleep(pauses.uniform(0.05, 0.6) * INTERVAL)
        assert requests(sim) - before == 3 * 200  # adds only
        assert max(bookie_lacs(sim, lw.id)) == 199  # what entry 200 carried
        # Idle again: the explicit LAC follows within about INTERVAL of the last send.
        await trio.sleep(2 * INTERVAL)
        assert bookie_lacs(sim, lw.id) == [200, 200, 200]
        assert requests(sim) - before == 3 * 200 + 3
        await lw.close()


async def test_no_lac_is_sent_while_a_slow_writer_keeps_writing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Acks that come more than the interval after their entry (a slow disk, say) do not make
    the writer send the LAC alone each time: the next entry, sent right after, carries it."""
    async with (
        SimCluster(3, sync_latency=4 * INTERVAL) as sim,
        sim.client(explicit_lac_interval=INTERVAL) as client,
    ):
        lw = await client.create_ledger(3, 3, 2)
        await lw.append(b"first")
        await trio.sleep(10 * INTERVAL)
        before = requests(sim)
        for i in range(1, 101):  # each append waits for its ack; the next follows soon after
            await lw.append(b"entry %d" % i)
            await trio.sleep(0.2 * INTERVAL)
        assert requests(sim) - before == 3 * 100  # adds only
        # Once it stops, the LAC still follows (after the interval, and the bookies' journal).
        await trio.sleep(10 * INTERVAL)
        assert bookie_lacs(sim, lw.id) == [100, 100, 100]
        assert requests(sim) - before == 3 * 100 + 3
        await lw.close()
