"""Durable consumers under random fault schedules (walkit.testing.SimCluster on a MockClock).

A writer appends records to a log with small ledgers and ``retain_records=0``, so its
retention (after every roll) deletes every ledger its consumers have committed past. A
consumer reads, commits every few records, and its process dies at random moments (its client
is cut off and its tasks stop, in the middle of a read or a commit) and starts again as a new
consumer object of the same name. Meanwhile bookies crash and come back, and the writer's
links to bookies are cut for a while (appends fail, the writer takes the log over again). With
``late``, a second consumer registers in the middle of all this, racing the retention passes.
At the end everything heals and each consumer drains the log; ``check_consumers`` then checks
that nothing committed was delivered again and nothing uncommitted was lost.

A :class:`ConsumerScenario` is one integer seed (``tests/sim/_seeds.py``),
so ``WALKIT_SIM_SEED=<seed>`` replays a schedule and Hypothesis draws (and shrinks) each field.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Awaitable, Callable
from typing import Any, Final

import attrs
import trio

from tests.sim._seeds import pack, unpack
from walkit import Log, LogConsumer, LogPosition
from walkit.errors import ConsumerBackloggedError, WalkitError
from walkit.log import log_path
from walkit.testing import (
    CheckResult,
    ConsumerHistory,
    SimCluster,
    check_consumers,
    derive_rng,
    replay_hint,
)

#: (field, number of values) from the least significant digit up; the generator seed is the rest.
_FIELDS: Final = (
    ("bookies", 2),  # 3 or 4 (E=3, Qw=Qa=2: with 4, a failed bookie is replaced)
    ("records", 48),  # 12..59
    ("roll_entries", 5),  # 2..6
    ("commit_every", 5),  # 1..5
    ("restarts", 5),  # consumer deaths: 0..4
    ("faults", 7),  # bookie crashes and writer partitions: 0..6
    ("late", 2),  # a second consumer registers during the run
    ("latency", 3),  # every link: 0, 1 or 5 ms, with as much jitter
)
_OFFSET: Final = {"bookies": 3, "records": 12, "roll_entries": 2, "commit_every": 1}
LATENCIES: Final = (0.0, 0.001, 0.005)
#: Appends, deaths and faults fall within about this many simulated seconds.
SPAN: Final = 6.0
DEADLINE: Final = 900.0
CLIENT_OPTIONS: Final[dict[str, Any]] = {
    "add_timeout": 1.0,
    "read_timeout": 1.0,
    "connect_timeout": 1.0,
}
LOG_OPTIONS: Final[dict[str, Any]] = {"stalled_ledger_timeout": 1.0}
NAME: Final = "sim"


@attrs.frozen
class ConsumerScenario:
    bookies: int
    records: int
    roll_entries: int
    commit_every: int
    restarts: int
    faults: int
    late: int
    latency: int
    rng_seed: int

    @property
    def seed(self) -> int:
        return pack(attrs.asdict(self), self.rng_seed, _FIELDS, _OFFSET, 0)

    @classmethod
    def from_seed(cls, seed: int) -> ConsumerScenario:
        values, rng_seed = unpack(seed, _FIELDS, _OFFSET, 0)
        return cls(rng_seed=rng_seed, **values)

    def describe(self) -> str:
        return (
            f"bookies={self.bookies} records={self.records} roll_entries={self.roll_entries} "
            f"commit_every={self.commit_every} restarts={self.restarts} faults={self.faults} "
            f"late={bool(self.late)} latency={LATENCIES[self.latency] * 1000:g}ms "
            f"rng_seed={self.rng_seed}"
        )

    def replay(self) -> str:
        return replay_hint(self.seed, self.describe())


@attrs.define
class ConsumerOutcome:
    scenario: ConsumerScenario
    results: list[CheckResult] = attrs.Factory(list)
    acked: int = 0
    instances: int = 0
    commits: int = 0
    truncated: str = ""
    retained_ledgers: int = 0


async def run_consumer_scenario(sc: ConsumerScenario) -> ConsumerOutcome:
    """Run one schedule; the checkers' results are in the outcome."""
    async with SimCluster(
        bookies=sc.bookies, seed=sc.seed, client_options=CLIENT_OPTIONS, announce=False
    ) as cluster:
        out = ConsumerOutcome(sc)
        history = ConsumerHistory()
        if LATENCIES[sc.latency]:
            cluster.network.set_delay(LATENCIES[sc.latency], jitter=LATENCIES[sc.latency])
        with trio.fail_after(DEADLINE):
            await _drive(cluster, sc, history, out)
        async with cluster.client("inspector") as client:
            md = await (await Log.open(client, NAME, **LOG_OPTIONS)).metadata()
        out.truncated = str(md.truncated)
        out.retained_ledgers = len(md.ledgers)
        history.truncated(md.truncated)
        out.results = check_consumers(history)
        out.acked = sum(1 for ev in history.events if ev.kind == "appended")
        out.commits = sum(1 for ev in history.events if ev.kind == "committed")
        out.instances = sum(1 for ev in history.events if ev.kind == "registered")
        return out


async def _drive(
    cluster: SimCluster, sc: ConsumerScenario, history: ConsumerHistory, out: ConsumerOutcome
) -> None:
    rng = derive_rng(sc.rng_seed, "consumers")
    instances = itertools.count()
    written = trio.Event()
    healed = trio.Event()

    async def instance(name: str, follow: bool) -> None:
        """One consumer process: reads, commits every few records; returns once the writer is
        done and nothing came for a while (or, not following, at the end of the log); raises
        when the cluster fails it (the caller starts another)."""
        label = f"{name}-{next(instances)}"
        async with cluster.client(label) as client:
            log = await Log.open(client, NAME, **LOG_OPTIONS)
            consumer = log.consumer(name, follow=follow)
            history.registered(name, label, await consumer.register())
            n = 0
            last: LogPosition | None = None
            while True:
                try:
                    record = await consumer.next(timeout=0.5 if follow else None)
                except ConsumerBackloggedError:
                    history.backlogged(name, label, consumer.position or LogPosition.EARLIEST)
                    raise
                if record is None:
                    if not follow or written.is_set():
                        break
                    continue
                history.delivered(name, label, record.position, record.payload)
                n += 1
                last = record.position
                if follow:  # processing: slower than the writer, so that it falls behind
                    await trio.sleep(rng.uniform(0.0, 3 * SPAN / sc.records))
                if n % sc.commit_every == 0:
                    await commit(consumer, name, label, last)
            if last is not None:
                await commit(consumer, name, label, last)

    async def commit(consumer: LogConsumer, name: str, label: str, last: LogPosition) -> None:
        history.commit_started(name, label, last.next())
        await consumer.commit(last)
        history.committed(name, label, last.next())

    async def consume(name: str, deaths: list[float]) -> None:
        """Instances of ``name``, one after the other, each killed at its death time (its
        tasks stop wherever they are: in a read, in a commit) or failed by the cluster, until
        the writer is done; then one drains the log."""
        base = trio.current_time()
        while not written.is_set():
            with trio.move_on_at(base + deaths.pop(0) if deaths else float("inf")):
                try:
                    await instance(name, True)
                except WalkitError:
                    pass
            await trio.sleep(rng.uniform(0.0, 1.5))  # down for a while: the writer goes on
        for _attempt in range(50):
            try:
                await instance(name, False)
                return
            except ConsumerBackloggedError:
                return  # recorded: the checker reports it
            except WalkitError:
                await trio.sleep(1.0)
        raise AssertionError(f"consumer {name} could not drain the log after the run")

    async def write() -> None:
        async with cluster.client("writer") as client:
            log = await Log.open(
                client, NAME, roll_entries=sc.roll_entries, retain_records=0, **LOG_OPTIONS
            )
            pace = SPAN / sc.records
            i = 0
            while i < sc.records:
                try:
                    async with log.writer() as w:
                        while i < sc.records:
                            await trio.sleep(rng.uniform(0.0, 2 * pace))
                            payload = b"r%03d" % i
                            i += 1
                            history.appended(await w.append(payload), payload)
                except WalkitError:
                    await trio.sleep(0.5)  # the ledger failed or the writer was cut off
            # Once the faults are over, a last takeover closes what a failed close left open.
            await healed.wait()
            for _attempt in range(50):
                try:
                    async with log.writer():
                        break
                except WalkitError:
                    await trio.sleep(1.0)
        written.set()

    async def faults() -> None:
        for _ in range(sc.faults):
            await trio.sleep(rng.uniform(0.0, SPAN / max(sc.faults, 1)))
            duration = rng.choice((0.2, 1.0, 2.5))
            if rng.random() < 0.5:
                index = rng.randrange(sc.bookies)
                await cluster.crash_bookie(index)
                await trio.sleep(duration)
                await cluster.start_bookie(index)
            else:
                cluster.partition("writer", sorted(rng.sample(range(sc.bookies), 2)))
                await trio.sleep(duration)
                cluster.heal()
        healed.set()

    async def observe(task_status: trio.TaskStatus[None]) -> None:
        """The log's truncation point, each time it moves."""
        async with cluster.client("observer") as client:
            log = await Log.open(client, NAME, **LOG_OPTIONS)
            events = client.metadata_store.watch(log_path(NAME))
            seen = (await log.metadata()).truncated
            task_status.started()
            async for _event in events:
                md = await log.metadata()
                if md.truncated != seen:
                    seen = md.truncated
                    history.truncated(seen)

    deaths = sorted(rng.uniform(0.0, SPAN) for _ in range(sc.restarts))
    async with trio.open_nursery() as watching:
        await watching.start(observe)
        await _run(sc, rng, consume, write, faults, deaths)
        watching.cancel_scope.cancel()
    out.instances = next(instances)


async def _run(
    sc: ConsumerScenario,
    rng: random.Random,
    consume: Callable[[str, list[float]], Awaitable[None]],
    write: Callable[[], Awaitable[None]],
    faults: Callable[[], Awaitable[None]],
    deaths: list[float],
) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(write)
        nursery.start_soon(faults)
        nursery.start_soon(consume, "main", deaths)
        if sc.late:
            late_at = rng.uniform(0.0, SPAN)

            async def late() -> None:
                await trio.sleep(late_at)
                await consume("late", [])

            nursery.start_soon(late)
