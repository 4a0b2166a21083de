"""Log takeover in the simulator (walkit.testing.SimCluster on a MockClock): the old writer
is partitioned from every bookie while appending; a new writer takes the log over and appends;
the partition heals and the old writer tries again. Every acknowledged record of both is read
back once, in order, by a reader that tailed all along and by a final read; the old writer is
fenced. Seeds replay (``WALKIT_SIM_SEED=<seed>``)."""

from __future__ import annotations

import contextlib
import itertools
import os

import pytest
import trio

from tests.log._history import LogHistory
from walkit import LedgerState, Log, LogPosition, LogRecord
from walkit.errors import NoSuchLedgerError, WalkitError, WriterFencedError
from walkit.testing import SEED_ENV, SimCluster, replay_hint, run

OPTIONS = {"add_timeout": 1.0, "read_timeout": 1.0, "connect_timeout": 1.0}
SEEDS = [int(os.environ[SEED_ENV], 0)] if os.environ.get(SEED_ENV) else [1, 2, 3, 4, 5, 6]
NEW_RECORDS = 25


async def scenario(seed: int, bookies: int) -> dict[str, object]:
    async with SimCluster(
        bookies=bookies, seed=seed, client_options=OPTIONS, announce=False
    ) as cluster:
        rng = cluster.rng
        history = LogHistory()
        tailed: list[LogRecord] = []
        errors: list[str] = []
        checks = {"one_writer": 0}
        async with (
            cluster.client("old") as old_client,
            cluster.client("new") as new_client,
            cluster.client("reader") as reader_client,
        ):
            old_log = await Log.open(old_client, "sim", roll_entries=12)
            new_log = await Log.open(new_client, "sim", roll_entries=12)
            reader_log = await Log.open(reader_client, "sim")
            old = await old_log.writer()
            enough = trio.Event()
            last_new = b"new-%d" % (NEW_RECORDS - 1)

            async def tail() -> None:
                async for rec in reader_log.reader(LogPosition.EARLIEST):
                    tailed.append(rec)
                    if rec.payload == last_new:
                        return

            async def one_writer() -> None:
                """At most the last two listed ledgers are OPEN (a roll closes the previous
                one in the background; a takeover recovers both before listing its own), and
                only the last takes new records."""
                while True:
                    md = await reader_log.metadata()
                    states = []
                    for lg in md.ledgers:
                        with contextlib.suppress(NoSuchLedgerError):  # dropped meanwhile
                            lmd = await reader_client.ledger_metadata(lg.ledger_id)
                            states.append((lg.seq, lmd.state))
                    open_seqs = [seq for seq, state in states if state is LedgerState.OPEN]
                    assert open_seqs == [lg.seq for lg in md.ledgers[-2:]][-len(open_seqs) :] or (
                        not open_seqs
                    ), (md.ledgers, states)
                    checks["one_writer"] += 1
                    await trio.sleep(0.02)

            async def old_appender(task: int) -> None:
                for n in itertools.count():
                    try:
                        await history.append(f"old.{task}", old, b"old-%d-%d" % (task, n))
                    except WalkitError as exc:
                        errors.append(type(exc).__name__)
                        return
                    if len(history.acked) >= 30:
                        enough.set()
                    await trio.sleep(rng.uniform(0, 0.02))

            with trio.fail_after(600):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(tail)
                    monitor = trio.CancelScope()

                    async def watch_writers() -> None:
                        with monitor:
                            await one_writer()

                    nursery.start_soon(watch_writers)
                    for task in range(3):
                        nursery.start_soon(old_appender, task)
                    await enough.wait()
                    cluster.partition("old", list(range(bookies)), reset=rng.random() < 0.5)
                    await trio.sleep(rng.uniform(0, 1.5))
                    async with new_log.writer() as new:
                        for i in range(NEW_RECORDS):
                            await history.append("new", new, b"new-%d" % i)
                        cluster.heal()
                        with pytest.raises(WriterFencedError):  # the old writer is fenced
                            await old.append(b"old-after-heal")
                        await new.append(b"new-after-heal")
                    monitor.cancel()
                # The nursery ends when the appenders gave up and the tail saw the new writer.
            final = [rec async for rec in reader_log.reader(follow=False)]
        history.check(final, tailed)
        assert final[-1].payload == b"new-after-heal"
        # Cut off, the old writer's appends fail: fenced, or no reachable bookie to replace a
        # failed one (its ledger is then rolled away from at the next append, which after the
        # takeover means fenced, as checked above).
        assert errors and set(errors) <= {"WriterFencedError", "NotEnoughBookiesError"}, errors
        assert checks["one_writer"] > 0
        return {"acked": len(history.acked), "failed": len(history.failed)}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("bookies", [3, 5])
def test_partitioned_old_writer_is_fenced_by_a_takeover(seed: int, bookies: int) -> None:
    try:
        run(scenario, seed, bookies, seed=seed, announce=False)
    except BaseException as exc:
        exc.add_note(replay_hint(seed, f"bookies={bookies}"))
        raise
