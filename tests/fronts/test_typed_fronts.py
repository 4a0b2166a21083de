"""Typed logs on every front: trio, asyncio, and walkit.sync from threads (its values encoded
and checked in the calling thread). Real bookie processes on sqlite metadata."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator
from typing import Any

import anyio
import msgspec
import pytest

import walkit
from tests._cluster import ProcessCluster, process_cluster
from tests.fronts._fronts import FRONTS, Front
from walkit import LogPosition
from walkit.errors import IncompatibleSchemaError, InvalidArgumentError, SchemaError

pytestmark = pytest.mark.processes

_names = itertools.count()


@dataclasses.dataclass
class Order:
    id: int
    user: str
    amount: float


@dataclasses.dataclass
class OrderV2:
    id: int
    user: str
    amount: float
    region: str = "eu"


class OrderStruct(msgspec.Struct):
    id: int
    user: str
    amount: float
    region: str = "eu"


@dataclasses.dataclass
class OrderBad:
    id: str


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("typed-fronts")
    with process_cluster(f"sqlite:///{root / 'metadata.db'}", root, 3) as c:
        yield c


@pytest.fixture(params=FRONTS)
def front(request: pytest.FixtureRequest) -> Front:
    return Front(request.param)


async def _read_all(log: Any) -> list[Any]:
    reader = log.reader(LogPosition.EARLIEST, follow=False)
    out = []
    while (record := await reader.next()) is not None:
        out.append(record)
    return out


def test_typed_values_from_concurrent_callers(cluster: ProcessCluster, front: Front) -> None:
    """Values from 8 callers at once (threads on the sync front), alone and in batches with
    keys, read back as the types; a wrong value fails its caller only, naming the field."""

    async def scenario(front: Front) -> None:
        name = f"typed-{front.name}-{next(_names)}"
        async with (
            front.connect(cluster.metadata_url) as client,
            front.open_log(client, name, schema=Order) as log,
        ):
            got: dict[int, list[LogPosition]] = {}
            async with log.writer() as writer:

                async def appender(n: int) -> None:
                    got[n] = [
                        await writer.append(Order(n * 100 + i, f"u{n}", i)) for i in range(20)
                    ]

                async with anyio.create_task_group() as tasks:
                    for n in range(8):
                        tasks.start_soon(appender, n)
                batch = await writer.append_batch(
                    [Order(-1, "batch", 0.5), walkit.Record(value=Order(-2, "keyed", 1), key=b"k")]
                )
                with pytest.raises(InvalidArgumentError, match=r"Order\.amount: Expected `float`"):
                    await writer.append(Order(-3, "bad", "lots"))  # type: ignore[arg-type]
                with pytest.raises(InvalidArgumentError, match="Order values, not bytes"):
                    await writer.append_batch([b"raw"])
            records = {r.position: r for r in await _read_all(log)}
            assert len(records) == 8 * 20 + 2
            for n, positions in got.items():
                assert [records[p].value for p in positions] == [
                    Order(n * 100 + i, f"u{n}", float(i)) for i in range(20)
                ]
            assert records[batch[1]].value == Order(-2, "keyed", 1.0)
            assert records[batch[1]].key == b"k"
            assert {r.schema_version for r in records.values()} == {1}

    front.run(scenario)


def test_versions_and_compatibility(cluster: ProcessCluster, front: Front) -> None:
    """A second type registers version 2; a reader of a msgspec Struct reads both versions; an
    incompatible type is refused at open; an untyped writer is refused on the typed log."""

    async def scenario(front: Front) -> None:
        name = f"versions-{front.name}-{next(_names)}"
        async with front.connect(cluster.metadata_url) as client:
            async with front.open_log(client, name, schema=Order) as log, log.writer() as w:
                first = await w.append(Order(1, "ann", 2.5))
            async with front.open_log(client, name, schema=OrderV2) as log, log.writer() as w:
                second = await w.append(OrderV2(2, "bob", 1, region="us"))
            async with front.open_log(client, name, schema=OrderStruct) as log:
                records = {r.position: r for r in await _read_all(log)}
                assert records[first].value == OrderStruct(1, "ann", 2.5)
                assert records[second].value == OrderStruct(2, "bob", 1.0, "us")
                assert [records[p].schema_version for p in (first, second)] == [1, 2]
            with pytest.raises(IncompatibleSchemaError, match="field 'id' changed type"):
                async with front.open_log(client, name, schema=OrderBad):
                    pass
            async with front.open_log(
                client, name, schema=OrderBad, schema_compatibility="none"
            ) as log:
                (bad, _) = await _read_all(log)
                with pytest.raises(SchemaError) as caught:
                    _ = bad.value
                assert caught.value.position == first
                assert bad.payload  # the bytes are still there
            async with front.open_log(client, name) as plain:
                with pytest.raises(IncompatibleSchemaError, match="open it with schema="):
                    async with plain.writer():
                        pass
                assert [r.value for r in await _read_all(plain)] == [
                    records[first].payload,
                    records[second].payload,
                ]

    front.run(scenario)


@dataclasses.dataclass
class Deposit:
    account: str
    amount: int


class _Ledger:
    """A state machine of typed commands: balances by account."""

    def __init__(self) -> None:
        self.balances: dict[str, int] = {}
        self.seen: list[Deposit] = []

    def apply(self, command: Deposit, position: LogPosition) -> int:
        assert type(command) is Deposit  # a value, decoded, on the leader as on the followers
        self.seen.append(command)
        self.balances[command.account] = self.balances.get(command.account, 0) + command.amount
        return self.balances[command.account]

    def snapshot(self) -> bytes:
        return msgspec.json.encode(self.balances)

    def restore(self, data: bytes) -> None:
        self.balances = msgspec.json.decode(data, type=dict[str, int])


def test_a_replica_takes_typed_commands(cluster: ProcessCluster, front: Front) -> None:
    """A leader submits Deposit values; a replica that recovers later (from a snapshot and the
    log after it) reaches the same balances; a bad command fails alone."""
    from walkit.statemachine import Replica

    name = f"replica-{front.name}-{next(_names)}"
    commands = [Deposit(f"acct-{i % 3}", i) for i in range(12)]
    expected: dict[str, int] = {}
    for c in commands:
        expected[c.account] = expected.get(c.account, 0) + c.amount

    def sync_scenario() -> tuple[list[int], dict[str, int]]:
        with (
            walkit.sync.Client.connect(cluster.metadata_url) as client,
            walkit.sync.Log.open(client, name, schema=Deposit) as log,
        ):
            leader_replica = walkit.sync.Replica(log, _Ledger(), snapshot_every=5)
            with leader_replica.lead() as lead:
                results = [lead.submit(c) for c in commands[:6]]
                results += lead.submit_batch(commands[6:])
                with pytest.raises(InvalidArgumentError, match=r"Deposit\.amount"):
                    lead.submit(Deposit("x", "lots"))  # type: ignore[arg-type]
                lead.snapshot()
            later = walkit.sync.Replica(log, _Ledger())
            later.recover()
            return results, later.machine.balances  # type: ignore[attr-defined]

    async def scenario(front: Front) -> None:
        if front.name == "sync":
            results, balances = await anyio.to_thread.run_sync(sync_scenario)
        else:
            async with (
                walkit.Client.connect(cluster.metadata_url) as client,
                walkit.Log.open(client, name, schema=Deposit) as log,
            ):
                leader_replica = Replica(log, _Ledger(), snapshot_every=5)
                async with leader_replica.lead() as lead:
                    results = [await lead.submit(c) for c in commands[:6]]
                    results += await lead.submit_batch(commands[6:])
                    with pytest.raises(InvalidArgumentError, match=r"Deposit\.amount"):
                        await lead.submit(Deposit("x", "lots"))  # type: ignore[arg-type]
                    await lead.snapshot()
                later = Replica(log, _Ledger())
                await later.recover()
                balances = later.machine.balances  # type: ignore[attr-defined]
        assert results[-1] == expected[commands[-1].account]
        assert balances == expected

    front.run(scenario)
