"""Retention and stalled-ledger recovery in the simulator (walkit.testing.SimCluster on a
MockClock). A writer with ``retain_records`` rolls often; its process dies (its client's tasks
stop, cut off from every bookie) at a random moment or right when it lists a new ledger, which
leaves the old ledger open with acknowledged entries beyond the LAC the bookies know (the
writer sends no explicit LAC). A reader tails all along. Checkers:

- while nobody takes over, a reader whose ledger is followed by a later one gets every record
  acknowledged in it within the bound (it recovers the ledger itself);
- after a new writer took over: every acknowledged record at or after the truncation point is
  read once, in order, at its position, by the final read and by the tail; the tail skipped
  only records behind the truncation point; the ledgers that stay hold at least
  ``retain_records`` closed records whenever the log was truncated.

Seeds replay (``WALKIT_SIM_SEED=<seed>``); the default seeds include deaths at a roll."""

from __future__ import annotations

import itertools
import os

import pytest
import trio

from tests.log._history import LogHistory
from walkit import Log, LogPosition, LogRecord
from walkit._core.retention import ledger_records
from walkit.errors import WalkitError
from walkit.log import log_path
from walkit.testing import SEED_ENV, SimCluster, replay_hint, run

OPTIONS = {"add_timeout": 1.0, "read_timeout": 1.0, "connect_timeout": 1.0}
SEEDS = [int(os.environ[SEED_ENV], 0)] if os.environ.get(SEED_ENV) else [1, 3, 4, 5, 6, 8]
RETAIN = 20
STALLED = 2.0


async def scenario(seed: int) -> dict[str, object]:
    async with SimCluster(bookies=3, seed=seed, client_options=OPTIONS, announce=False) as cluster:
        rng = cluster.rng
        history = LogHistory()
        tailed: list[LogRecord] = []
        stats = {"stalled_checks": 0, "died_at_roll": 0}
        async with (
            cluster.client("new") as new_client,
            cluster.client("reader") as reader_client,
        ):
            new_log = await Log.open(new_client, "sim", roll_entries=6, retain_records=RETAIN)
            reader_log = await Log.open(reader_client, "sim", stalled_ledger_timeout=STALLED)
            enough = trio.Event()
            last_new = b"new-9"
            old_scope = trio.CancelScope()

            async def tail() -> None:
                async for rec in reader_log.reader(LogPosition.EARLIEST):
                    tailed.append(rec)
                    if rec.payload == last_new:
                        return

            async def old_side() -> None:
                """The old writer's whole process: it dies when old_scope is cancelled (its
                client's tasks stop; nothing is closed)."""
                with old_scope:
                    async with cluster.client("old", explicit_lac_interval=None) as old_client:
                        old_log = await Log.open(
                            old_client, "sim", roll_entries=6, retain_records=RETAIN
                        )
                        old = await old_log.writer()

                        async def appender(task: int) -> None:
                            for n in itertools.count():
                                try:
                                    await history.append(
                                        f"old.{task}", old, b"old-%d-%d" % (task, n)
                                    )
                                except WalkitError:
                                    return
                                if len(history.acked) >= 40:
                                    enough.set()
                                await trio.sleep(rng.uniform(0, 0.002))

                        async with trio.open_nursery() as appenders:
                            for task in range(3):
                                appenders.start_soon(appender, task)

            def die() -> None:
                cluster.partition("old", [0, 1, 2])
                old_scope.cancel()

            async def die_at_next_roll() -> None:
                store = reader_client.metadata_store
                events = store.watch(log_path("sim"))
                try:
                    before = (await reader_log.metadata()).next_seq
                    async for _event in events:
                        if (await reader_log.metadata()).next_seq > before:
                            stats["died_at_roll"] += 1
                            die()
                            return
                finally:
                    with trio.CancelScope(shield=True):
                        await events.aclose()  # type: ignore[attr-defined]  # the drivers' watches are WatchStreams

            with trio.fail_after(600):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(tail)
                    nursery.start_soon(old_side)
                    await enough.wait()
                    if rng.random() < 0.7:
                        await die_at_next_roll()
                    else:
                        await trio.sleep(rng.uniform(0, 0.05))
                        die()
                    # Nobody takes over for a while: the reader must not hang on a ledger
                    # that a later one follows.
                    await trio.sleep(STALLED * 2 + 5)
                    md = await reader_log.metadata()
                    followed = {lg.seq for lg in md.ledgers[:-1]}
                    seen = {r.payload for r in tailed}
                    for _w, payload, pos in history.acked:
                        if pos.ledger_seq in followed and pos >= md.truncated:
                            stats["stalled_checks"] += 1
                            assert payload in seen, f"reader stuck before {pos} ({md.ledgers})"
                    cluster.heal()
                    async with new_log.writer() as new:
                        for i in range(10):
                            await history.append("new", new, b"new-%d" % i)
                # The nursery ends when the tail saw the new writer's last record.
            md = await reader_log.metadata()
            final = [rec async for rec in reader_log.reader(follow=False)]
            closed_records = 0
            for lg in md.ledgers[:-1]:
                lmd = await reader_client.ledger_metadata(lg.ledger_id)
                assert lmd.is_closed
                # Counted as retention counts them: the writer's record count, else entries.
                closed_records += ledger_records(lmd.last_entry_id, lmd.custom_metadata)
        kept = LogHistory(
            acked=[a for a in history.acked if a[2] >= md.truncated], failed=history.failed
        )
        kept.check(final)
        assert final and final[0].position >= md.truncated
        # The tail: in order, each record once, at its acknowledged position; it skipped only
        # records behind the truncation point.
        positions = [r.position for r in tailed]
        assert positions == sorted(set(positions))
        at = {r.payload: r.position for r in tailed}
        for _w, payload, pos in history.acked:
            if payload in at:
                assert at[payload] == pos
            else:
                assert pos < md.truncated, f"the tail missed {payload!r} at {pos}"
        # Retention dropped only what the limit allowed.
        if md.truncated != LogPosition.EARLIEST:
            assert closed_records >= RETAIN, (closed_records, md)
        return {"acked": len(history.acked), "truncated": str(md.truncated), **stats}


@pytest.mark.parametrize("seed", SEEDS)
def test_retention_and_stalled_readers_under_a_cut_off_writer(seed: int) -> None:
    try:
        run(scenario, seed, seed=seed, announce=False)
    except BaseException as exc:
        exc.add_note(replay_hint(seed))
        raise
