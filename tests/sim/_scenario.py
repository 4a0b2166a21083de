"""Randomized fault schedules on the real client and bookies (walkit.testing.SimCluster).

A :class:`Scenario` is a function of one integer, its *seed*: the quorum sizes, the number of
spare bookies, entries, appenders and faults, how many clients recover (fence) the ledger
during the run, the links' latency, the writer's ensemble change mode, and the seed of the
generators that pick each fault, its timing and the writer's timeouts are packed into it (mixed
radix). So ``WALKIT_SIM_SEED=<seed>`` replays a schedule exactly, and Hypothesis can draw (and
shrink) each field on its own.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
from collections.abc import Awaitable, Callable
from typing import Any, Final

import attrs
import trio

from tests.sim._seeds import pack, unpack
from walkit.errors import WalkitError
from walkit.testing import (
    CheckResult,
    History,
    SimCluster,
    assert_ok,
    check_all,
    derive_rng,
    replay_hint,
    run,
)

#: Whether ``open_ledger(recovery=True)`` exists (schedules without it only write and read).

#: (field, number of values) from the least significant digit up; the generator seed is the rest.
_FIELDS: Final = (
    ("ensemble", 5),  # E = 1..5
    ("write_quorum", 5),  # Qw = 1..E
    ("ack_quorum", 5),  # Qa = 1..Qw
    ("spare", 3),  # bookies beyond E: 0..2
    ("entries", 64),  # 1..64
    ("appenders", 4),  # concurrent appending tasks: 1..4
    ("faults", 13),  # 0..12
    ("recovery", 3),  # clients that open the ledger with recovery during the run: 0..2
    ("latency", 4),  # every link: 0, 1, 5 or 20 ms, with as much jitter
    ("mode", 2),  # the writer's ensemble change: immediate, or when_ack_quorum_lost
)
_OFFSET: Final = {"spare": 0, "faults": 0, "recovery": 0, "latency": 0, "mode": 0}
MODES: Final = ("immediate", "when_ack_quorum_lost")
LATENCIES: Final = (0.0, 0.001, 0.005, 0.02)

#: The writes of a schedule are spread over about this many simulated seconds; faults start
#: within the first 3.
WRITE_SPAN: Final = 4.0

#: Task steps at one simulated instant that count as a livelock. Busy instants of these
#: schedules take a few hundred (at most 448 over 300 random schedules); a livelock is caught
#: in well under a second.
STALL_STEPS: Final = 20_000

#: A schedule that has not finished after this much simulated time is a liveness failure.
DEADLINE: Final = 900.0

WRITER: Final = "writer"

CLIENT_OPTIONS: Final[dict[str, Any]] = {
    "add_timeout": 1.0,
    "read_timeout": 1.0,
    "connect_timeout": 1.0,
}


@attrs.frozen
class Scenario:
    ensemble: int
    write_quorum: int
    ack_quorum: int
    spare: int
    entries: int
    appenders: int
    faults: int
    recovery: int
    latency: int
    mode: int
    rng_seed: int

    def __attrs_post_init__(self) -> None:
        if not 1 <= self.ack_quorum <= self.write_quorum <= self.ensemble <= 5:
            raise ValueError(f"bad quorums in {self}")

    @property
    def seed(self) -> int:
        return pack(attrs.asdict(self), self.rng_seed, _FIELDS, _OFFSET, 1)

    @classmethod
    def from_seed(cls, seed: int) -> Scenario:
        values, seed = unpack(seed, _FIELDS, _OFFSET, 1)
        # Any integer is a scenario: clamp the quorums into E >= Qw >= Qa.
        values["write_quorum"] = min(values["write_quorum"], values["ensemble"])
        values["ack_quorum"] = min(values["ack_quorum"], values["write_quorum"])
        return cls(rng_seed=seed, **values)

    @property
    def bookies(self) -> int:
        return self.ensemble + self.spare

    def describe(self) -> str:
        return (
            f"E={self.ensemble} Qw={self.write_quorum} Qa={self.ack_quorum} "
            f"bookies={self.bookies} entries={self.entries} appenders={self.appenders} "
            f"faults={self.faults} recoverers={self.recovery} "
            f"latency={LATENCIES[self.latency] * 1000:g}ms mode={MODES[self.mode]} "
            f"rng_seed={self.rng_seed}"
        )

    def replay(self) -> str:
        return replay_hint(self.seed, self.describe())


@attrs.frozen
class Fault:
    at: float
    kind: str
    #: The client node the fault is about (writer or a recoverer), if any.
    node: str
    #: Bookie indexes the fault is about.
    targets: tuple[int, ...]
    duration: float
    reset: bool = False
    delay: float = 0.0

    def __str__(self) -> str:
        extra = f" delay={self.delay:.3f}" if self.kind == "delay" else ""
        extra += " reset" if self.reset else ""
        return (
            f"t={self.at:.3f} {self.kind} {self.node} {list(self.targets)} "
            f"for {self.duration:.3f}s{extra}"
        )


#: Faults between a client node and bookies, and of bookies alone.
LINK_KINDS: Final = ("partition", "delay", "stall_out", "stall_in", "reset")
KINDS: Final = ("crash", "pause", *LINK_KINDS, "crash", "partition", "io_error", "disk_full")
#: Chance that a fault is instead the expiry of the writer's metadata session (rare: it ends
#: the writer's ability to change its ensemble or close).
EXPIRE_CHANCE: Final = 0.03


def writer_options(sc: Scenario) -> dict[str, Any]:
    """The writer's client options: its ensemble change mode, and timings drawn from the
    scenario's generator (a rare explicit LAC leaves the bookies' LAC behind, so recovery has
    more entries to decide)."""
    rng = derive_rng(sc.rng_seed, "writer-options")
    return {
        "ensemble_change": MODES[sc.mode],
        "explicit_lac_interval": rng.choice((0.005, 0.05, None)),
        "add_timeout": rng.choice((0.25, 1.0, 3.0)),
    }


def recoverers(sc: Scenario) -> list[str]:
    return [f"recoverer-{i + 1}" for i in range(sc.recovery)]


def fault_schedule(sc: Scenario) -> list[Fault]:
    """The faults of a scenario, in time order (drawn from its own generator, so dropping the
    last faults does not change the first ones)."""
    rng = derive_rng(sc.rng_seed, "faults")
    clients = [WRITER, WRITER, *recoverers(sc)]
    faults: list[Fault] = []
    for _ in range(sc.faults):
        kind = "expire" if rng.random() < EXPIRE_CHANCE else rng.choice(KINDS)
        at = round(rng.uniform(0.0, 3.0), 4)
        duration = round(rng.choice((0.05, 0.3, 1.0, 2.5)) * rng.uniform(0.5, 1.5), 4)
        node = rng.choice(clients) if kind in LINK_KINDS else WRITER
        if kind == "partition":
            size = rng.randint(1, sc.bookies)
            targets = tuple(sorted(rng.sample(range(sc.bookies), size)))
        else:
            targets = (rng.randrange(sc.bookies),)
        reset = rng.random() < 0.5
        delay = round(rng.choice((0.002, 0.05, 0.4, 1.5)), 4)
        faults.append(Fault(at, kind, node, targets, duration, reset=reset, delay=delay))
    rec = derive_rng(sc.rng_seed, "recovery")
    for name in recoverers(sc):
        faults.append(Fault(round(rec.uniform(0.0, 3.0), 4), "recover", name, (), 0.0))
    return sorted(faults, key=lambda f: f.at)


@attrs.define
class Outcome:
    scenario: Scenario
    results: list[CheckResult]
    history: History
    acked: int = 0
    failed_appends: int = 0
    writer_error: str = ""
    close_error: str = ""
    fenced: bool = False
    closed_at: int | None = None
    fragments: int = 0
    inconclusive: str = ""
    read_back_error: str = ""


async def run_scenario(sc: Scenario) -> Outcome:
    """Run one schedule; returns the checkers' results (raises only on a crash of the harness
    or of the code under test, with the replay line attached)."""
    schedule = fault_schedule(sc)
    async with SimCluster(
        bookies=sc.bookies,
        seed=sc.seed,
        client_options=CLIENT_OPTIONS,
        announce=False,
        stall_steps=STALL_STEPS,
    ) as cluster:
        history = cluster.history
        outcome = Outcome(sc, [], history)
        with trio.fail_after(DEADLINE):
            await _drive(cluster, sc, schedule, outcome)
        results = check_all(history)
        if outcome.inconclusive:
            results = [r for r in results if r.name != "no_lost_acks"]
        refused = {b.name: b.refused_rewrites for b in cluster.bookies if b.refused_rewrites}
        results.append(
            CheckResult(
                "no_rewrites_refused",
                not refused,
                {"bookies": len(cluster.bookies), "refused": sum(refused.values())},
                tuple(f"{name} refused {n} rewrites" for name, n in refused.items()),
            )
        )
        if outcome.read_back_error:
            results.append(
                CheckResult("read_back", False, {"attempts": 40}, (outcome.read_back_error,))
            )
        outcome.results = results
        return outcome


async def _drive(cluster: SimCluster, sc: Scenario, schedule: list[Fault], out: Outcome) -> None:
    history = cluster.history
    net = cluster.network
    think = derive_rng(sc.rng_seed, "think")
    latency = LATENCIES[sc.latency]
    if latency:
        net.set_delay(latency, jitter=latency)
    async with cluster.client(WRITER, **writer_options(sc)) as wclient:
        lw = await wclient.create_ledger(sc.ensemble, sc.write_quorum, sc.ack_quorum)
        lid = lw.id
        counter = itertools.count()
        pace = WRITE_SPAN * sc.appenders / sc.entries
        state = {"failed": False, "done": 0}
        writer_done = trio.Event()

        async def appender() -> None:
            try:
                while not state["failed"]:
                    i = next(counter)
                    if i >= sc.entries:
                        return
                    # Spread the writes over the fault window (about WRITE_SPAN seconds).
                    await trio.sleep(think.uniform(0.0, pace) * think.choice((0.0, 1.0, 2.0)))
                    try:
                        await history.append(WRITER, lw, b"w-%04d" % i)
                        out.acked += 1
                    except WalkitError as exc:
                        out.failed_appends += 1
                        if not out.writer_error:
                            out.writer_error = type(exc).__name__
                        state["failed"] = True
                        return
            finally:
                state["done"] += 1
                if state["done"] == sc.appenders:
                    writer_done.set()

        async def tail(task_status: trio.TaskStatus[None]) -> None:
            async with cluster.client("reader") as rclient:
                handle = await _retry(lambda: rclient.open_ledger(lid))
                task_status.started()
                seen = -1
                while True:
                    try:
                        lac = await handle.read_last_add_confirmed()
                        if lac > seen:
                            entries = await handle.read(seen + 1, lac)
                            history.record_read(
                                "reader", lid, seen + 1, [(e.entry_id, e.payload) for e in entries]
                            )
                            seen = lac
                    except WalkitError:
                        pass
                    await trio.sleep(0.05)

        async def recover(name: str) -> None:
            async with cluster.client(name) as rc:
                handle = await _retry(
                    lambda: rc.open_ledger(lid, recovery=True), attempts=40, pause=1.0
                )
                history.record_fence_completed(name, lid)
                md = handle.metadata
                out.fenced = True
                history.record_ledger_closed(name, lid, md.last_entry_id)
                last = handle.last_add_confirmed
                if last >= 0:
                    with contextlib.suppress(WalkitError):  # a replica may be down right now
                        await history.read(name, handle, lid, 0, last)

        def set_link_delay(a: str, b: str, seconds: float) -> None:
            net.set_delay(seconds, jitter=seconds / 2 if seconds else latency, src=a, dst=b)

        async def inject(fault: Fault) -> None:
            await trio.sleep_until(start + fault.at)
            names = [cluster.bookie(i).name for i in fault.targets]
            node = fault.node
            if fault.kind == "recover":
                await recover(node)
            elif fault.kind == "crash":
                if cluster.bookie(fault.targets[0]).running:
                    await cluster.crash_bookie(fault.targets[0])
                    await trio.sleep(fault.duration)
                    if not cluster.bookie(fault.targets[0]).running:
                        await cluster.restart_bookie(fault.targets[0])
            elif fault.kind == "partition":
                net.partition([node], names, reset=fault.reset)
                await trio.sleep(fault.duration)
                for name in names:
                    net.heal(node, name)
            elif fault.kind == "delay":
                set_link_delay(node, names[0], fault.delay)
                set_link_delay(names[0], node, fault.delay)
                await trio.sleep(fault.duration)
                set_link_delay(node, names[0], latency)
                set_link_delay(names[0], node, latency)
            elif fault.kind in ("stall_out", "stall_in"):
                src, dst = (node, names[0]) if fault.kind == "stall_out" else (names[0], node)
                net.stall(src, dst)
                await trio.sleep(fault.duration)
                net.unstall(src, dst)
            elif fault.kind == "pause":
                cluster.pause_bookie(fault.targets[0])
                await trio.sleep(fault.duration)
                cluster.resume_bookie(fault.targets[0])
            elif fault.kind == "reset":
                net.reset(node, names[0])
            elif fault.kind in ("io_error", "disk_full"):
                storage = cluster.bookie(fault.targets[0]).storage
                code = errno.EIO if fault.kind == "io_error" else errno.ENOSPC
                net.note(fault.kind, names[0])
                storage.fail_writes = OSError(code, f"simulated {fault.kind}")
                await trio.sleep(fault.duration)
                storage.fail_writes = None
            elif fault.kind == "expire":
                await cluster.expire_session(wclient)

        start = trio.current_time()
        async with trio.open_nursery() as nursery:
            await nursery.start(tail)
            for _ in range(sc.appenders):
                nursery.start_soon(appender)
            faults_done = trio.Event()

            async def inject_all() -> None:
                async with trio.open_nursery() as faults:
                    for fault in schedule:
                        faults.start_soon(inject, fault)
                faults_done.set()

            nursery.start_soon(inject_all)
            await writer_done.wait()
            await faults_done.wait()
            # Everything heals; crashed bookies come back; the writer closes if it still can.
            net.heal()
            for b in cluster.bookies:
                if not b.running:
                    await cluster.restart_bookie(b.index)
            # A writer that failed (say NotEnoughBookies) may still close at its LAC.
            try:
                await history.close(WRITER, lw)
            except WalkitError as exc:
                out.close_error = type(exc).__name__
            await trio.sleep(0.2)  # the tailing reader catches up
            nursery.cancel_scope.cancel()

        async with cluster.client("checker") as checker:
            try:
                md = await _retry(lambda: cluster.read_back(checker, lid), attempts=40, pause=1.0)
            except WalkitError as exc:
                # Everything healed, and still the ledger cannot be recovered and read back.
                out.read_back_error = f"{type(exc).__name__}: {exc}"
                return
            out.closed_at = md.last_entry_id if md.is_closed else None
            out.fragments = len(md.fragments)


async def _retry(
    op: Callable[[], Awaitable[Any]], *, attempts: int = 10, pause: float = 0.5
) -> Any:
    for attempt in range(attempts):
        try:
            return await op()
        except WalkitError:
            if attempt == attempts - 1:
                raise
            await trio.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover


#: Totals over the test session (printed by tests/sim/conftest.py).
SCHEDULES_RUN: Final = {"total": 0, "failed": 0, "fenced": 0, "ensemble_changes": 0}


def check_scenario(sc: Scenario) -> Outcome:
    """Run a scenario under a seeded MockClock run and assert every checker passed."""
    SCHEDULES_RUN["total"] += 1
    SCHEDULES_RUN["failed"] += 1  # until it passes
    try:
        outcome = run(run_scenario, sc, seed=sc.seed, announce=False, stall_steps=STALL_STEPS)
    except trio.TooSlowError:
        raise AssertionError(
            f"the schedule did not finish within {DEADLINE} simulated seconds\n" + _context(sc)
        ) from None
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        exc.add_note(_context(sc))
        raise
    assert_ok(outcome.results, _context(sc))
    SCHEDULES_RUN["failed"] -= 1
    SCHEDULES_RUN["fenced"] += outcome.fenced
    SCHEDULES_RUN["ensemble_changes"] += outcome.fragments > 1
    return outcome


def _context(sc: Scenario) -> str:
    lines = [sc.replay(), f"writer options: {writer_options(sc)}", "schedule:"]
    lines += [f"  {f}" for f in fault_schedule(sc)]
    return "\n".join(lines)
