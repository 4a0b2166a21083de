"""The wall clock is on by default: a client connected with nothing but a URL stamps records
with the system's time, so age retention, orphan collection and ``Log.position_at`` work with
no option; ``wall_clock=None`` turns stamping off; the simulation's clients get the
simulation's clock."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import walkit.sync
from tests._cluster import process_cluster
from walkit import Client, Log, LogPosition
from walkit.testing import SIM_EPOCH, SimCluster


@pytest.fixture(scope="module")
def processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("clock")
    url = f"sqlite:///{root / 'metadata.db'}"
    with process_cluster(url, root, 3):
        yield url


def stamped_within(timestamps: list[int | None], before: float, after: float) -> bool:
    return all(t is not None and before * 1000 - 1 <= t <= after * 1000 + 1 for t in timestamps)


@pytest.mark.processes
async def test_a_client_connected_with_a_url_alone_stamps_records(processes: str) -> None:
    before = time.time()
    async with Client.connect(processes) as client, Log.open(client, "stamped") as log:
        async with log.writer() as w:
            first = await w.append(b"a")
            await w.append_batch([b"b", b"c"])
        records = [r async for r in log.reader(LogPosition.EARLIEST, follow=False)]
        after = time.time()
        assert [r.payload for r in records] == [b"a", b"b", b"c"]
        timestamps = [r.timestamp for r in records]
        assert stamped_within(timestamps, before, after), (before, timestamps, after)
        # position_at has something to search: the first record at or after the first stamp.
        first_stamp = timestamps[0]
        assert first_stamp is not None
        assert await log.position_at(first_stamp) == first
        # Age retention works with no option (nothing is old enough to go).
        assert await log.apply_retention(retain_age=3600, dry_run=True) is not None
        # Orphan collection works with no option: nothing is older than the grace.
        assert await Log.collect_orphans(client, "stamped", grace=3600, dry_run=True) == []


@pytest.mark.processes
async def test_retain_age_opens_with_no_clock_option(processes: str) -> None:
    async with (
        Client.connect(processes) as client,
        Log.open(client, "aged", retain_age=3600) as log,
        log.writer() as w,
    ):
        await w.append(b"x")


@pytest.mark.processes
def test_the_sync_front_stamps_by_default(processes: str) -> None:
    before = time.time()
    with (
        walkit.sync.Client.connect(processes) as client,
        walkit.sync.Log.open(client, "stamped-sync") as log,
    ):
        with log.writer() as w:
            w.append(b"a")
        records = list(log.reader(LogPosition.EARLIEST, follow=False))
    assert stamped_within([r.timestamp for r in records], before, time.time())


@pytest.mark.processes
async def test_wall_clock_none_turns_stamping_off(processes: str) -> None:
    async with (
        Client.connect(processes, wall_clock=None) as client,
        Log.open(client, "unstamped") as log,
    ):
        async with log.writer() as w:
            await w.append(b"a")
        records = [r async for r in log.reader(LogPosition.EARLIEST, follow=False)]
        assert [r.timestamp for r in records] == [None]


def test_the_simulation_stamps_with_its_own_clock() -> None:
    """Simulated clients get :func:`walkit.testing.sim_wall_clock`: stamps start at
    ``SIM_EPOCH`` and move with trio's MockClock, so a seed replays them."""

    async def scenario() -> list[int | None]:
        async with SimCluster(bookies=3, seed=7) as cluster, cluster.client() as client:
            log = await Log.open(client, "sim", ensemble_size=3, write_quorum=2, ack_quorum=2)
            async with log.writer() as w:
                await w.append(b"a")
            return [r.timestamp async for r in log.reader(LogPosition.EARLIEST, follow=False)]

    first = walkit.testing.run(scenario, seed=7)
    assert first == walkit.testing.run(scenario, seed=7)
    (stamp,) = first
    assert stamp is not None
    assert SIM_EPOCH * 1000 <= stamp < SIM_EPOCH * 1000 + 3_600_000
