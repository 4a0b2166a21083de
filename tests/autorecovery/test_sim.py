"""Simulated permanent bookie losses (walkit.testing.SimCluster, MockClock, seeded).

Closed ledgers with random quorums are written to 6 bookies; then, one at a time, bookies are
crashed for good (their storage is never seen again) while the real auditor and replication
worker run on their own client. Once the faults stop, the checker requires that every entry of
every closed ledger has Qw good copies on live bookies, on exactly the bookies its fragment's
write set names, and that no fragment lists a dead bookie. ``WALKIT_SIM_SEED`` replays a seed.
"""

from __future__ import annotations

import functools

import pytest
import trio

from walkit._core.distribution import write_set
from walkit.autorecovery import AutorecoveryOptions, run_autorecovery
from walkit.client import Client
from walkit.metadata import UnderreplicationManager
from walkit.testing import SimCluster, derive_rng, run

OPTIONS = AutorecoveryOptions(poll_interval=1.0, election_lease=2.0, grace_period=5.0)
#: Simulated seconds: only a guard against a run that never finishes rereplicating.
HANG_GUARD = 3600


async def _wait_rereplicated(client: Client, ledgers: list[int], dead: set[object]) -> None:
    urm = UnderreplicationManager(client.metadata_store)
    while True:
        listing = [
            lid for lid in ledgers if (await client.ledger_metadata(lid)).all_bookies() & dead
        ]
        if not listing and not await urm.list_ids():
            return
        await trio.sleep(0.5)


async def scenario(seed: int) -> None:
    async with SimCluster(bookies=6, seed=seed, announce=False) as cluster:
        rng = cluster.rng
        written: dict[int, tuple[int, list[bytes]]] = {}
        async with cluster.client("writer") as client:
            for n in range(4):
                qw = rng.choice([2, 3])
                qa = rng.randint(1, qw)
                lw = await client.create_ledger(3, qw, qa)
                payloads = [
                    b"%d:%d:" % (n, i) + bytes(rng.randrange(40)) for i in range(rng.randint(0, 40))
                ]
                if payloads:
                    await lw.append_batch(payloads)
                await lw.close()
                written[lw.id] = (qw, payloads)
        async with cluster.client("autorecovery") as service, trio.open_nursery() as nursery:
            await nursery.start(
                functools.partial(
                    run_autorecovery,
                    service,
                    name="autorecovery",
                    options=OPTIONS,
                    rng=derive_rng(seed, "autorecovery"),
                    lost_bookie_delay=rng.choice([0.0, 1.0, 10.0]),
                )
            )
            dead: set[object] = set()
            for victim in rng.sample(range(6), 2):  # one at a time: Qw=2 survives each
                sim = cluster.bookie(victim)
                await cluster.crash_bookie(victim)
                dead.add(sim.address)
                with trio.fail_after(HANG_GUARD):
                    await _wait_rereplicated(service, list(written), dead)
            nursery.cancel_scope.cancel()
        async with cluster.client("checker") as checker:
            for lid, (qw, payloads) in written.items():
                md = await checker.ledger_metadata(lid)
                assert md.is_closed and md.last_entry_id == len(payloads) - 1
                assert not md.all_bookies() & dead, (lid, md.fragments)
                copies = cluster.stored_copies(md)
                for entry_id, payload in enumerate(payloads):
                    ensemble = md.ensemble_for(entry_id)
                    holders = [ensemble[i] for i in write_set(entry_id, 3, qw)]
                    assert len(holders) == qw
                    for bookie in holders:
                        assert cluster.bookie(bookie).running, (lid, entry_id, bookie)
                        assert copies[bookie].get(entry_id) == payload, (lid, entry_id, bookie)
                reader = await checker.open_ledger(lid)
                got = await reader.read(0, md.last_entry_id) if payloads else []
                assert [e.payload for e in got] == payloads


@pytest.mark.parametrize("seed", range(20))
def test_permanent_losses_are_rereplicated(seed: int) -> None:
    run(scenario, seed, seed=seed)
