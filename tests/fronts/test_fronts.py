"""The scenarios that matter, on each front: trio, asyncio, and walkit.sync from threads.

Real bookie processes (4, so that an ensemble of 3 can replace a killed one) on sqlite
metadata. Each scenario checks what it promises with the history it recorded: every record
it was told is durable reads back, in order, exactly once.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry

import walkit
from tests._cluster import ProcessCluster, process_cluster
from tests.fronts._fronts import FRONTS, Front
from walkit import LogPosition
from walkit.log import log_path, read_log

pytestmark = pytest.mark.processes

_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("fronts")
    with process_cluster(f"sqlite:///{root / 'metadata.db'}", root, 4) as c:
        yield c


@pytest.fixture(params=FRONTS)
def front(request: pytest.FixtureRequest) -> Front:
    return Front(request.param)


def _log_name(front: Front) -> str:
    return f"{front.name}-{next(_names)}"


async def _read_all(log: Any, start: LogPosition | str = LogPosition.EARLIEST) -> list[Any]:
    """Every record readable now (a reader that does not follow)."""
    reader = log.reader(start, follow=False)
    out = []
    while (record := await reader.next()) is not None:
        out.append(record)
    return out


def test_append_and_read_back(cluster: ProcessCluster, front: Front) -> None:
    async def scenario(front: Front) -> None:
        async with (
            front.connect(cluster.metadata_url) as client,
            front.open_log(client, _log_name(front)) as log,
        ):
            async with log.writer() as writer:
                acked = [await writer.append(b"r%d" % i) for i in range(20)]
                acked += await writer.append_batch([b"b%d" % i for i in range(50)])
            records = await _read_all(log)
            assert [r.position for r in records] == acked
            expected = [b"r%d" % i for i in range(20)] + [b"b%d" % i for i in range(50)]
            assert [r.payload for r in records] == expected

    front.run(scenario)


def test_concurrent_appends_keep_each_callers_order(cluster: ProcessCluster, front: Front) -> None:
    """16 tasks (threads on the sync front) appending at once: each one's records in its own
    order, all of them once, packed into shared entries."""

    async def scenario(front: Front) -> None:
        async with (
            front.connect(cluster.metadata_url) as client,
            front.open_log(client, _log_name(front)) as log,
        ):
            got: dict[int, list[LogPosition]] = {}
            async with log.writer() as writer:

                async def appender(n: int) -> None:
                    got[n] = [await writer.append(b"%d:%d" % (n, i)) for i in range(40)]

                async with anyio.create_task_group() as tasks:
                    for n in range(16):
                        tasks.start_soon(appender, n)
            records = await _read_all(log)
            assert len(records) == 16 * 40
            by_position = {r.position: r.payload for r in records}
            for n, positions in got.items():
                assert positions == sorted(positions)
                assert [by_position[p] for p in positions] == [b"%d:%d" % (n, i) for i in range(40)]
            entries = {(p.ledger_seq, p.entry_id) for p in by_position}
            assert len(entries) < len(records)  # records shared entries

    front.run(scenario)


def test_records_with_keys_headers_and_timestamps(cluster: ProcessCluster, front: Front) -> None:
    """Keys, headers and timestamps from concurrent callers (threads share entries through
    the sync writer's groups), read back on every front; position_at finds them by time."""

    async def scenario(front: Front) -> None:
        clock = _Clock()
        async with (
            front.connect(cluster.metadata_url, wall_clock=clock) as client,
            front.open_log(client, _log_name(front)) as log,
        ):
            async with log.writer() as writer:
                got: dict[int, list[LogPosition]] = {}

                async def appender(n: int) -> None:
                    got[n] = [
                        await writer.append(
                            b"%d:%d" % (n, i),
                            key=b"caller-%d" % n,
                            headers=[("i", b"%d" % i)],
                            timestamp=None if i % 2 else T0 + 1000 * n + i,
                        )
                        for i in range(10)
                    ]

                async with anyio.create_task_group() as tasks:
                    for n in range(8):
                        tasks.start_soon(appender, n)
                clock.ms += 60_000
                batch = await writer.append_batch(
                    [b"plain", walkit.Record(b"keyed", key=b"k", headers={"h": b"v"})]
                )
            records = {r.position: r for r in await _read_all(log)}
            for n, positions in got.items():
                for i, pos in enumerate(positions):
                    record = records[pos]
                    assert record.payload == b"%d:%d" % (n, i)
                    assert record.key == b"caller-%d" % n
                    assert record.headers == (("i", b"%d" % i),)
                    # Given, or the writer's clock when the entry went out.
                    assert record.timestamp == (T0 if i % 2 else T0 + 1000 * n + i)
            plain, keyed = records[batch[0]], records[batch[1]]
            assert (plain.key, plain.headers, plain.timestamp) == (None, None, T0 + 60_000)
            assert (keyed.key, keyed.headers) == (b"k", (("h", b"v"),))
            at = await log.position_at(T0 + 60_000)
            assert at == batch[0]
            assert [r.payload for r in await _read_all(log, at)] == [b"plain", b"keyed"]

    front.run(scenario)


def test_trace_context_travels_in_headers(cluster: ProcessCluster, front: Front) -> None:
    """With trace_context=True the span current at append (in the caller's task, or its
    thread through walkit.sync) travels in the record's headers; walkit.otel.extract gives it
    back to the reader."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    import walkit.otel

    provider = TracerProvider()
    tracer = provider.get_tracer("walkit-fronts")

    async def scenario(front: Front) -> None:
        async with (
            front.connect(cluster.metadata_url) as client,
            front.open_log(client, _log_name(front), trace_context=True) as log,
        ):
            async with log.writer() as writer:
                with tracer.start_as_current_span("produce") as span:
                    traced = await writer.append(b"traced", key=b"k")
                    batch = await writer.append_batch([walkit.Record(b"batched", key=b"b")])
                untraced = await writer.append(b"untraced")
            records = {r.position: r for r in await _read_all(log)}
            want = span.get_span_context().trace_id
            for pos in (traced, *batch):
                context = walkit.otel.extract(records[pos])
                assert trace.get_current_span(context).get_span_context().trace_id == want
            assert records[untraced].headers is None

    try:
        front.run(scenario)
    finally:
        provider.shutdown()


T0 = 1_700_000_000_000


class _Clock:
    """A wall clock the scenario moves (read from the writer's event loop thread)."""

    def __init__(self) -> None:
        self.ms = T0

    def __call__(self) -> float:
        return self.ms / 1000


def test_a_tailing_reader_sees_records_appended_later(
    cluster: ProcessCluster, front: Front
) -> None:
    async def scenario(front: Front) -> None:
        async with (
            front.connect(cluster.metadata_url) as client,
            front.open_log(client, _log_name(front)) as log,
        ):
            reader = log.reader(LogPosition.EARLIEST)
            assert await reader.next(timeout=0.2) is None  # nothing yet: the wait ends
            async with log.writer() as writer:
                seen: list[bytes] = []

                async def tail() -> None:
                    while len(seen) < 30:
                        record = await reader.next(timeout=30)
                        assert record is not None
                        seen.append(record.payload)

                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(tail)
                    for i in range(30):
                        await writer.append(b"t%d" % i)
            assert seen == [b"t%d" % i for i in range(30)]

    front.run(scenario)


def test_takeover_fences_the_old_writer(cluster: ProcessCluster, front: Front) -> None:
    async def scenario(front: Front) -> None:
        name = _log_name(front)
        async with (
            front.connect(cluster.metadata_url) as first,
            front.connect(cluster.metadata_url) as second,
            front.open_log(first, name) as log1,
            front.open_log(second, name) as log2,
        ):
            acked: list[LogPosition] = []
            # Leaving the block is quiet: the appends that failed said so (docs/log.md).
            async with log1.writer() as old:
                acked += [await old.append(b"old%d" % i) for i in range(10)]
                async with log2.writer() as new:
                    with pytest.raises(walkit.WriterFencedError):
                        await old.append(b"too late")
                    acked.append(await new.append(b"new"))
                with pytest.raises(walkit.WriterFencedError):
                    await old.append(b"still too late")
            records = await _read_all(log2)
            assert [r.position for r in records] == acked
            assert records[-1].payload == b"new"

    front.run(scenario)


async def _drain(consumer: Any) -> list[Any]:
    """Every record a consumer that does not follow has for now."""
    out = []
    while (record := await consumer.next()) is not None:
        out.append(record)
    return out


def test_a_consumer_resumes_after_its_commit_and_holds_retention(
    cluster: ProcessCluster, front: Front
) -> None:
    async def scenario(front: Front) -> None:
        name = _log_name(front)
        options = {"roll_entries": 5, "retain_records": 0}
        async with front.connect(cluster.metadata_url) as client:
            async with front.open_log(client, name, **options) as log:
                consumer = log.consumer("app", follow=False)
                await consumer.register()
                async with log.writer() as writer:
                    acked = [await writer.append(b"c%d" % i) for i in range(20)]
                got = [await consumer.next() for _ in range(8)]
                await consumer.commit(got[-1].position)
            # A restart: a new handle and consumer of that name go on after the commit.
            async with front.open_log(client, name, **options) as log:
                rest = await _drain(log.consumer("app", follow=False))
                assert [r.position for r in rest] == acked[8:]
                await log.apply_retention()  # stops at the ledger the consumer is in
                first = (await _read_all(log))[0].position
                assert first == LogPosition(acked[7].ledger_seq, 0)
                [info] = await log.consumers()
                assert (info.name, info.position, info.lag.records) == ("app", acked[7].next(), 12)
            # Over the quota: released, told at its next read, and on after skip_lost().
            async with front.open_log(client, name, max_backlog_records=3, **options) as log:
                stuck = log.consumer("app", follow=False)
                result = await log.apply_retention()
                assert result.backlogged == ("app",)
                with pytest.raises(walkit.ConsumerBackloggedError) as caught:
                    await stuck.next()
                assert caught.value.truncated == result.truncated
                assert await stuck.skip_lost() == result.truncated
                assert [r.position for r in await _drain(stuck)] == [
                    p for p in acked if p >= result.truncated
                ]

    front.run(scenario)


def test_time_rolls_and_client_metrics(cluster: ProcessCluster, front: Front) -> None:
    """A quiet log's ledger rolls by time (``roll_interval``) on the front's own clock, and the
    client records its metrics in the registry it was given."""

    async def scenario(front: Front) -> None:
        name = _log_name(front)
        registry = CollectorRegistry()
        async with (
            front.connect(cluster.metadata_url, metrics_registry=registry) as client,
            walkit.Client.connect(cluster.metadata_url) as inspector,
        ):
            events = inspector.metadata_store.watch(log_path(name))
            try:
                async with (
                    front.open_log(client, name, roll_interval=0.2) as log,
                    log.writer() as writer,
                ):
                    await writer.append_batch([b"quiet"] * 3)
                    with anyio.fail_after(30):  # the roll lists a second ledger
                        async for _event in events:
                            md, _version = await read_log(inspector.metadata_store, name)
                            if len(md.ledgers) == 2:
                                break
            finally:
                await events.aclose()  # type: ignore[attr-defined]  # the drivers' watches are WatchStreams
        labels = {"log": name}
        assert registry.get_sample_value("walkit_log_appended_records_total", labels) == 3
        assert registry.get_sample_value("walkit_log_append_seconds_count", labels) == 3

    front.run(scenario)


def test_snapshot_and_restore(cluster: ProcessCluster, front: Front) -> None:
    async def scenario(front: Front) -> None:
        name = _log_name(front)
        async with front.connect(cluster.metadata_url) as client:
            async with front.open_log(client, name) as log, log.writer() as writer:
                positions = [await writer.append(b"%d" % i) for i in range(10)]
                state = sum(range(6)).to_bytes(4, "big")
                await log.save_snapshot(positions[5], state)
            # A new process restores: the snapshot, then the records after it.
            async with front.open_log(client, name) as again:
                snap = await again.latest_snapshot()
                assert snap is not None and snap.position == positions[5]
                total = int.from_bytes(await snap.read(), "big")
                after = await _read_all(again, positions[5].next())
                total += sum(int(r.payload) for r in after)
                assert total == sum(range(10))

    front.run(scenario)


def test_a_bookie_killed_mid_stream_loses_nothing(tmp_path: Path, front: Front) -> None:
    """Appends go on through an ensemble change; every acknowledged record reads back."""
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 4) as own:

        async def scenario(front: Front) -> None:
            async with (
                front.connect(url, add_timeout=2.0) as client,
                walkit.Client.connect(url) as inspector,
                front.open_log(client, "killed") as log,
            ):
                acked: list[LogPosition] = []
                async with log.writer() as writer:
                    for i in range(300):
                        if i == 100:
                            own.by_address(await _a_bookie_of_the_last_ledger(inspector)).kill()
                        acked.append(await writer.append(b"k%d" % i))
                records = await _read_all(log)
                assert [r.position for r in records] == acked
                assert [r.payload for r in records] == [b"k%d" % i for i in range(300)]

        front.run(scenario)


async def _a_bookie_of_the_last_ledger(inspector: walkit.Client) -> walkit.BookieId:
    async with walkit.Log.open(inspector, "killed") as log:
        last = (await log.metadata()).last
    assert last is not None
    md = await inspector.ledger_metadata(last.ledger_id)
    return md.fragments[-1][1][0]


def test_cancelling_an_operation_leaves_the_client_usable(cluster: ProcessCluster) -> None:
    """asyncio's own cancellation (wait_for, task.cancel) stops a walkit call cleanly."""

    async def scenario() -> None:
        async with (
            walkit.Client.connect(cluster.metadata_url) as client,
            walkit.Log.open(client, f"cancel-{next(_names)}") as log,
        ):
            reader = log.reader(LogPosition.EARLIEST)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(reader.next(), 0.2)
            task = asyncio.ensure_future(reader.next())
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            async with log.writer() as writer:
                pos = await writer.append(b"after")
                slow = asyncio.ensure_future(writer.append_batch([b"x"] * 2000))
                await asyncio.sleep(0)
                slow.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await slow
                again = await writer.append(b"again")
            records = [r.payload for r in await _read_all(log)]
            assert records[0] == b"after" and records[-1] == b"again"
            assert (await reader.next(timeout=5)) is not None
            assert pos < again

    asyncio.run(scenario())


def test_no_exception_group_escapes_under_asyncio(cluster: ProcessCluster) -> None:
    async def scenario() -> None:
        with pytest.raises(walkit.NoSuchLedgerError):
            async with walkit.Client.connect(cluster.metadata_url) as client:
                await client.open_ledger(2**62)

    asyncio.run(scenario())


def test_a_client_is_bound_to_its_event_loop(cluster: ProcessCluster) -> None:
    """Used from another event loop (another thread), a client says so instead of hanging."""

    async def scenario() -> None:
        async with walkit.Client.connect(cluster.metadata_url) as client:
            result: list[BaseException] = []

            def other_loop() -> None:
                async def use() -> None:
                    await client.list_ledgers()

                try:
                    asyncio.run(use())
                except BaseException as exc:
                    result.append(exc)

            await anyio.to_thread.run_sync(other_loop)
            assert isinstance(result[0], walkit.WrongEventLoopError)
            assert await client.list_ledgers() is not None  # still fine at home

    asyncio.run(scenario())


@pytest.mark.skipif(sys.platform != "linux", reason="uvloop")
def test_uvloop_runs_the_async_api(cluster: ProcessCluster) -> None:
    uvloop = pytest.importorskip("uvloop")

    async def scenario() -> None:
        async with (
            walkit.Client.connect(cluster.metadata_url) as client,
            walkit.Log.open(client, f"uvloop-{next(_names)}") as log,
        ):
            async with log.writer() as writer:
                pos = await writer.append(b"on uvloop")
            records = await _read_all(log)
            assert [r.position for r in records] == [pos]

    uvloop.run(scenario())


class _Counter:
    """A state machine: the sum of the integers applied."""

    def __init__(self) -> None:
        self.total = 0

    def apply(self, command: bytes, position: LogPosition) -> int:
        self.total += int(command)
        return self.total

    def snapshot(self) -> bytes:
        return str(self.total).encode()

    def restore(self, data: bytes) -> None:
        self.total = int(data)


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_a_replicated_state_machine_fails_over_through_an_election(
    cluster: ProcessCluster, backend: str
) -> None:
    """walkit.statemachine.Replica and walkit.recipes.LeaderElection on each async loop: the
    elected replica leads, a standby follows, the leader resigns and the standby takes over
    with the same state."""
    from walkit.recipes import LeaderElection
    from walkit.statemachine import Replica

    name = f"replica-{backend}-{next(_names)}"

    async def scenario() -> None:
        url = cluster.metadata_url
        first = LeaderElection(url, f"/elections/{name}", "first", lease_timeout=1.0, rng=rng())
        second = LeaderElection(url, f"/elections/{name}", "second", lease_timeout=1.0, rng=rng())
        async with (
            walkit.Client.connect(url) as client,
            walkit.Log.open(client, name) as log,
            anyio.create_task_group() as tasks,
        ):
            await tasks.start(first.run)
            await tasks.start(second.run)
            leader, standby = (first, second) if first.is_leader else (second, first)
            assert leader.is_leader and not standby.is_leader
            replica, follower = Replica(log, _Counter(), snapshot_every=5), Replica(log, _Counter())
            following, stopped = anyio.CancelScope(), anyio.Event()

            async def follow() -> None:
                try:
                    with following:
                        await follower.follow()
                finally:
                    stopped.set()

            tasks.start_soon(follow)
            async with replica.lead() as lead:
                results = [await lead.submit(b"%d" % i) for i in range(1, 11)]
            assert results[-1] == 55
            await follower.wait_applied(replica.applied_position)
            assert follower.machine.total == 55  # type: ignore[attr-defined]
            seen = standby.generation
            await leader.resign()
            while not standby.is_leader:
                await standby.wait_changed(seen)
                seen = standby.generation
            following.cancel()  # the standby stops following to lead
            await stopped.wait()
            async with follower.lead() as lead:
                assert await lead.submit(b"45") == 100
            tasks.cancel_scope.cancel()

    anyio.run(scenario, backend=backend)


def rng() -> Any:
    import random

    return random.Random()
