"""Rolls by time (``roll_interval``) in the simulator, on a MockClock: a quiet log's records
reach a closed ledger and age out by ``retain_age`` while its writer stays open and idle; an
empty ledger is never rolled; and the option is checked."""

from __future__ import annotations

import os
from typing import Any

import pytest
import trio

from tests.client.conftest import connect
from walkit import Log, LogPosition
from walkit.errors import ConfigurationError
from walkit.log import DEFAULT_ROLL_INTERVAL
from walkit.testing import SEED_ENV, SimCluster, replay_hint, run

OPTIONS = {"add_timeout": 1.0, "read_timeout": 1.0, "connect_timeout": 1.0}
SEEDS = [int(os.environ[SEED_ENV], 0)] if os.environ.get(SEED_ENV) else [1, 2]
INTERVAL = 600.0
AGE = 3600.0
#: The simulation's wall clock starts here (epoch seconds), and runs with its MockClock.
EPOCH = 1_700_000_000.0


async def quiet_log(seed: int) -> dict[str, Any]:
    async with SimCluster(bookies=3, seed=seed, client_options=OPTIONS, announce=False) as cluster:
        wall = lambda: EPOCH + trio.current_time()  # noqa: E731
        async with cluster.client("writer", wall_clock=wall) as client:
            log = await Log.open(client, "quiet", roll_interval=INTERVAL, retain_age=AGE)
            async with log.writer() as w:
                first = await w.append_batch([b"a", b"b", b"c"])
                # Idle for longer than the interval plus the age: the ledger rolled once, by
                # time, and retention (run by the timer while the log is quiet) dropped it.
                await trio.sleep(INTERVAL + AGE + 2 * INTERVAL)
                md = await log.metadata()
                assert [lg.seq for lg in md.ledgers] == [2], md
                assert md.next_seq == 3, "an empty ledger was rolled"
                assert md.truncated == LogPosition(2, 0)
                assert [r async for r in log.reader(follow=False)] == []
                # A record after the quiet spell waits at most one interval in the open ledger.
                late = await w.append(b"late")
                await trio.sleep(INTERVAL + 1)
                md = await log.metadata()
                assert [lg.seq for lg in md.ledgers] == [2, 3], md
                lmd = await client.ledger_metadata(md.ledgers[0].ledger_id)
                assert lmd.is_closed and lmd.last_entry_id == late.entry_id
                assert w.ledger_seq == 3
            return {"first": str(first[0]), "late": str(late)}


@pytest.mark.parametrize("seed", SEEDS)
def test_a_quiet_log_rolls_by_time_and_ages_out(seed: int) -> None:
    try:
        run(quiet_log, seed, seed=seed, announce=False)
    except BaseException as exc:
        exc.add_note(replay_hint(seed))
        raise


async def busy_then_idle(seed: int) -> None:
    """Rolls by size restart the clock; after the last record, one roll by time."""
    async with (
        SimCluster(bookies=3, seed=seed, client_options=OPTIONS, announce=False) as cluster,
        cluster.client("writer") as client,
    ):
        log = await Log.open(client, "busy", roll_interval=INTERVAL, roll_entries=4)
        async with log.writer() as w:
            for n in range(10):
                await w.append(b"r%d" % n)
                await trio.sleep(INTERVAL / 8)
            seq = w.ledger_seq
            await trio.sleep(3 * INTERVAL)
            assert w.ledger_seq == seq + 1  # one roll by time, then nothing (empty)
        records = [r.payload async for r in log.reader(follow=False)]
        assert records == [b"r%d" % n for n in range(10)]


@pytest.mark.parametrize("seed", SEEDS)
def test_time_rolls_keep_every_record_and_skip_empty_ledgers(seed: int) -> None:
    try:
        run(busy_then_idle, seed, seed=seed, announce=False)
    except BaseException as exc:
        exc.add_note(replay_hint(seed))
        raise


@pytest.mark.parametrize("value", [0, -1.0, float("inf"), float("nan"), "4h", True])
async def test_bad_roll_intervals_are_configuration_errors(memory_url: str, value: Any) -> None:
    async with connect(memory_url) as client:
        with pytest.raises(ConfigurationError, match="roll_interval"):
            await Log.open(client, "x", roll_interval=value)


async def test_the_default_is_four_hours(memory_url: str) -> None:
    assert DEFAULT_ROLL_INTERVAL == 4 * 3600
    async with connect(memory_url) as client:
        assert (await Log.open(client, "x")).options.roll_interval == DEFAULT_ROLL_INTERVAL
        assert (await Log.open(client, "y", roll_interval=None)).options.roll_interval is None
