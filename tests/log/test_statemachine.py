"""walkit.statemachine: replicas restore, replay, follow, snapshot, truncate and take over."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.client.conftest import cluster, connect
from walkit import Log, LogPosition
from walkit.errors import ConfigurationError, InvalidArgumentError, WriterFencedError
from walkit.statemachine import Replica


class Counters:
    """A tiny deterministic machine: named counters; remembers the positions it applied."""

    def __init__(self) -> None:
        self.values: dict[str, int] = {}
        self.positions: list[LogPosition] = []
        self.restores = 0

    def apply(self, command: bytes, position: LogPosition) -> Any:
        name, _, amount = command.decode().partition("+")
        self.values[name] = self.values.get(name, 0) + int(amount)
        self.positions.append(position)
        return self.values[name]

    def snapshot(self) -> bytes:
        return json.dumps(self.values, sort_keys=True).encode()

    def restore(self, data: bytes) -> None:
        self.values = json.loads(data)
        self.restores += 1


def expected(commands: list[bytes]) -> dict[str, int]:
    m = Counters()
    for i, c in enumerate(commands):
        m.apply(c, LogPosition(1, i))
    return m.values


async def test_leader_snapshots_truncates_and_a_new_replica_restores(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "sm", roll_entries=8, keep_snapshots=2)
        machine = Counters()
        replica = Replica(log, machine, snapshot_every=10)
        commands = [b"c%d+%d" % (i % 3, i) for i in range(45)]
        async with replica.lead() as leader:
            results = [await leader.submit(c) for c in commands[:40]]
            results += await leader.submit_batch(commands[40:])
        assert results[-1] == machine.values[f"c{44 % 3}"]
        assert machine.values == expected(commands)
        snaps = await log.snapshots()
        assert len(snaps) == 2
        md = await log.metadata()
        assert md.truncated == snaps[0].position  # the log covers every kept snapshot
        assert md.ledgers[0].seq >= 2  # whole ledgers before it were deleted

        fresh = Counters()
        other = Replica(log, fresh)
        await other.recover()
        assert fresh.restores == 1
        assert fresh.values == machine.values
        assert other.applied_position == replica.applied_position
        # Only the records after the latest snapshot were replayed.
        assert fresh.positions and fresh.positions[0] > snaps[-1].position


async def test_concurrent_submits_apply_in_log_order(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "order", roll_entries=10)
        machine = Counters()
        replica = Replica(log, machine, snapshot_every=None)
        async with replica.lead() as leader:

            async def task(t: int) -> None:
                for n in range(12):
                    await leader.submit(b"t%d+1" % t)
                    if n % 3 == 0:
                        await trio.lowlevel.checkpoint()

            async def group_commits(t: int) -> None:  # pipelined: each group its own entry
                for _ in range(4):
                    await leader.submit_batch([b"g%d+1" % t] * 3, flush=True)

            async with trio.open_nursery() as nursery:
                for t in range(10):
                    nursery.start_soon(task, t)
                    nursery.start_soon(group_commits, t)
        assert machine.positions == sorted(machine.positions)
        on_log = [r.position async for r in log.reader(follow=False)]
        assert machine.positions == on_log
        assert machine.values == {f"{k}{t}": 12 for t in range(10) for k in "tg"}


async def test_standby_follows_then_takes_over(memory_url: str, tmp_path: Path) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url) as c1,
        connect(memory_url) as c2,
    ):
        log1 = await Log.open(c1, "ha", roll_entries=6)
        log2 = await Log.open(c2, "ha")
        m1, m2 = Counters(), Counters()
        primary = Replica(log1, m1, snapshot_every=7)
        standby = Replica(log2, m2, snapshot_every=7)
        async with primary.lead() as leader1:
            for i in range(20):
                await leader1.submit(b"x+%d" % i)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(standby.follow)
                for i in range(20, 30):
                    await leader1.submit(b"y+%d" % i)
                with trio.fail_after(30):  # the standby keeps up
                    await standby.wait_applied(primary.applied_position)
                assert m2.values == m1.values
                nursery.cancel_scope.cancel()
            # The primary is cut off from here on (say, partitioned): the standby takes over,
            # catching up with everything the primary wrote first.
            await leader1.submit(b"z+1")
            async with standby.lead() as leader2:
                assert m2.values == m1.values
                assert await leader2.submit(b"z+10") == 11
                with pytest.raises(WriterFencedError):
                    await leader1.submit(b"z+100")
                with pytest.raises(WriterFencedError):  # and the old leader stays stopped
                    await leader1.submit(b"z+1000")
            assert m1.values["z"] == 1
        fresh = Counters()
        await Replica(log2, fresh).recover()
        assert fresh.values == m2.values
        assert fresh.values["z"] == 11


async def test_a_follower_that_fell_behind_the_truncation_restarts_from_the_snapshot(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "behind", roll_entries=5, keep_snapshots=1)
        m_lead, m_late = Counters(), Counters()
        late = Replica(log, m_late)
        leading = Replica(log, m_lead, snapshot_every=6)
        async with leading.lead() as leader:
            for i in range(3):
                await leader.submit(b"a+%d" % i)
            await late.recover()  # sees what is readable now: some of them
            assert m_late.values.get("a", 0) <= 3
            for _ in range(40):  # snapshots and truncation leave `late` behind
                await leader.submit(b"a+1")
            await leader.snapshot()
            assert (await log.metadata()).truncated > late.next_position

            async with trio.open_nursery() as nursery:
                nursery.start_soon(late.follow)
                with trio.fail_after(30):
                    await late.wait_applied(leading.applied_position)
                nursery.cancel_scope.cancel()
        assert m_late.values == m_lead.values == {"a": 43}
        assert m_late.restores == 1


async def test_no_snapshot_and_a_truncated_log_is_an_error(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "gone", roll_entries=3)
        async with log.writer() as w:
            positions = [await w.append(b"a+1") for _ in range(7)]
            await w.truncate(positions[5])
        with pytest.raises(walkit_errors().LogTruncatedError):
            await Replica(log, Counters()).recover()


def walkit_errors() -> Any:
    import walkit

    return walkit


async def test_bad_use(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "bad")
        with pytest.raises(ConfigurationError):
            Replica(log, Counters(), snapshot_every=0)
        replica = Replica(log, Counters())
        async with replica.lead() as leader:
            with pytest.raises(InvalidArgumentError):  # one role at a time
                await replica.recover()
            with pytest.raises(InvalidArgumentError):  # a non-bytes command is refused ...
                await leader.submit("text")  # type: ignore[arg-type]
            assert await leader.submit(b"k+2") == 2  # ... and nothing else is disturbed
        with pytest.raises(InvalidArgumentError):
            await leader.submit(b"k+1")
        with pytest.raises(KeyError):  # an error in the block comes out as itself
            async with replica.lead():
                raise KeyError("mine")


class ChunkedCounters(Counters):
    """Snapshots as chunks, encoded after the call from a copy taken during it; ``bad`` makes
    it return something that is not a snapshot."""

    bad: object = None

    def snapshot(self) -> Any:
        if self.bad is not None:
            return self.bad
        items = sorted(self.values.items())

        def chunks() -> Any:
            yield b"{"
            for i, (name, value) in enumerate(items):
                yield (", " if i else "").encode() + json.dumps({name: value})[1:-1].encode()
            yield b"}"

        return chunks()


async def test_a_snapshot_in_chunks_is_the_state_at_its_position(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "chunked", roll_entries=8)
        machine = ChunkedCounters()
        replica = Replica(log, machine, snapshot_every=25)
        commands = [b"c%d+%d" % (i % 40, i) for i in range(60)]
        async with replica.lead() as leader:
            for c in commands[:50]:
                await leader.submit(c)
            await leader.snapshot()  # on demand, too
            await leader.submit_batch(commands[50:])
        snaps = await log.snapshots()
        assert [str(s.position) for s in snaps][-1] == str(machine.positions[49])
        fresh = Counters()
        await Replica(log, fresh).recover()
        assert fresh.values == machine.values == expected(commands)
        assert json.loads(await snaps[-1].read()) == expected(commands[:50])

        # Not bytes, nor an iterable of bytes: a clear error, and the leader goes on.
        again = Replica(log, machine)
        async with again.lead() as leader:

            def failing() -> Any:
                yield b"{"
                raise ValueError("a bug in the machine")

            for bad in ("text", 42, [b"{", "x"], [b"{", None, b"}"], failing()):
                machine.bad = bad
                with pytest.raises(InvalidArgumentError, match="snapshot"):
                    await leader.snapshot()
            # Saved in the background, a failing snapshot is logged; the leader goes on.
            machine.bad = failing()
            again.snapshot_every = 1
            assert await leader.submit(b"c1+1") == machine.values["c1"]
            again.snapshot_every = None
            machine.bad = None
            assert await leader.submit(b"c0+1") == machine.values["c0"]
            await leader.snapshot()
        assert json.loads(await (await log.latest_snapshot()).read()) == machine.values  # type: ignore[union-attr]


class Padded(Counters):
    """A state whose snapshot is large beside its commands; counts its snapshots."""

    def __init__(self) -> None:
        super().__init__()
        self.snapshots = 0

    def snapshot(self) -> bytes:
        self.snapshots += 1
        return json.dumps(self.values).encode() + b" " * 1000

    def restore(self, data: bytes) -> None:
        super().restore(data.strip())


async def test_snapshot_ratio_waits_for_as_much_log_as_the_last_snapshot(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "ratio")
        for bad in (0, -1.0, True, "1", float("inf")):
            with pytest.raises(ConfigurationError, match="snapshot_ratio"):
                Replica(log, Padded(), snapshot_ratio=bad)  # type: ignore[arg-type]
        machine = Padded()
        replica = Replica(log, machine, snapshot_every=5, snapshot_ratio=1.0)
        commands = [b"c%d+1" % (i % 3) for i in range(300)]  # 5 bytes each
        async with replica.lead() as leader:
            await leader.submit_batch(commands[:5])  # no snapshot yet: the first one is due
            for c in commands[5:]:
                await leader.submit(c)
        # The first after 5 records; the next once 5-byte records add up to its ~1,030 bytes
        # (about 206 records later): 2 in all, where snapshot_every=5 alone makes 60.
        assert machine.snapshots == 2
        assert machine.values == expected(commands)
        size = (await log.latest_snapshot()).size  # type: ignore[union-attr]
        assert size > 1000

        # A replica that restored that snapshot knows its size: a few records are not enough.
        other = Padded()
        again = Replica(log, other, snapshot_every=5, snapshot_ratio=1.0)
        async with again.lead() as leader:
            for c in commands[:20]:
                await leader.submit(c)
        assert other.snapshots == 0 and other.restores == 1
