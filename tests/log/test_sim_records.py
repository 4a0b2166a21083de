"""Records with keys, headers and timestamps in the simulator (SimCluster on a MockClock).

The writer's wall clock is the simulation's own (an epoch plus trio's MockClock), so records'
default timestamps are a function of the seed like everything else: the same seed gives the
same records, timestamps included, across a bookie crash and an ensemble change. Each run
also checks ``Log.position_at`` against a scan of what it read.

Seeds replay (``WALKIT_SIM_SEED=<seed>``).
"""

from __future__ import annotations

import os

import pytest
import trio

from walkit import Log, LogPosition, Record
from walkit.testing import SEED_ENV, SimCluster, run

OPTIONS = {"add_timeout": 1.0, "read_timeout": 1.0, "connect_timeout": 1.0}
SEEDS = [int(os.environ[SEED_ENV], 0)] if os.environ.get(SEED_ENV) else [5, 6]
#: Simulated time 0 on the wall clock (ms since the epoch).
EPOCH_MS = 1_700_000_000_000

Seen = list[tuple[str, bytes, bytes | None, int | None]]


def sim_wall_clock() -> float:
    """The wall clock of a simulation: seconds since the epoch, moved by trio's MockClock."""
    return EPOCH_MS / 1000 + trio.current_time()


async def scenario(seed: int) -> Seen:
    async with SimCluster(
        bookies=4, seed=seed, client_options={**OPTIONS, "wall_clock": sim_wall_clock}
    ) as cluster:
        rng = cluster.rng
        async with cluster.client("writer") as client:
            log = await Log.open(
                client, "timed", ensemble_size=3, write_quorum=3, ack_quorum=2, roll_entries=9
            )
            async with log.writer() as w, trio.open_nursery() as tasks:

                async def appender(n: int) -> None:
                    for i in range(12):
                        await trio.sleep(rng.random() * 0.05)
                        if i % 3 == 0:
                            await w.append_batch([b"%d-%d" % (n, i), Record(b"k", key=b"%d" % n)])
                        else:
                            await w.append(b"%d-%d" % (n, i), key=b"%d" % n, headers={"i": b"x"})

                for n in range(3):
                    tasks.start_soon(appender, n)
                await trio.sleep(0.2)
                await cluster.crash_bookie(rng.randrange(4))
            records = [r async for r in log.reader(follow=False)]
            assert all(r.timestamp is not None for r in records)
            for at in sorted({r.timestamp for r in records if r.timestamp is not None}):
                first = next(r for r in records if r.timestamp is not None and r.timestamp >= at)
                assert await log.position_at(at) == first.position
            assert await log.position_at(EPOCH_MS + 10**9) > records[-1].position
        cluster.assert_ok()
    return [(str(r.position), r.payload, r.key, r.timestamp) for r in records]


@pytest.mark.parametrize("seed", SEEDS)
def test_same_seed_same_records_and_timestamps(seed: int) -> None:
    first = run(scenario, seed, seed=seed)
    assert len(first) == 3 * 16
    assert first == run(scenario, seed, seed=seed)
    assert isinstance(LogPosition.parse(first[0][0]), LogPosition)
