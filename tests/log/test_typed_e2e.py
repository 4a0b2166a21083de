"""Typed logs end to end on in-process bookies: values appended and read back as the
application's types, schema versions registered by writers under the compatibility rule,
readers of older and newer types, bad values refused with nothing written, undecodable
records reported with their position while their payload stays readable."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import msgspec
import pydantic
import pytest

from tests._orders import OrderV1, OrderV2
from tests.client.conftest import cluster, connect
from walkit import Log, LogPosition, LogRecord, Record
from walkit._core.record_set import decode_record_set
from walkit._core.schema_codec import ValueCodec
from walkit.errors import IncompatibleSchemaError, InvalidArgumentError, SchemaError


@dataclasses.dataclass
class OrderNoUser:  # `user` removed: backward compatible, not forward
    id: int
    amount: float


@dataclasses.dataclass
class OrderStrId:  # `id` changed type: compatible with nothing
    id: str
    user: str
    amount: float


class OrderS(msgspec.Struct):
    id: int
    user: str
    amount: float


class OrderP(pydantic.BaseModel):
    id: int
    user: str
    amount: float


async def read_all(log: Log[Any], start: LogPosition | str = "earliest") -> list[LogRecord[Any]]:
    return [rec async for rec in log.reader(start, follow=False)]


async def test_values_round_trip_and_payloads_keep_the_bytes(
    memory_url: str, tmp_path: Path
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url) as client,
        Log.open(client, "orders", schema=OrderV1) as log,
    ):
        assert log.schema is OrderV1
        md = await log.metadata()
        assert [v.version for v in md.schemas] == [1] and md.format == 5
        async with log.writer() as w:
            one = await w.append(OrderV1(1, "ann", 9.5), key=b"ann")
            more = await w.append_batch(
                [OrderV1(2, "bob", 1.0), Record(value=OrderV1(3, "cy", 2.5), key=b"cy")]
            )
        records = await read_all(log)
        assert [r.position for r in records] == [one, *more]
        assert [r.value for r in records] == [
            OrderV1(1, "ann", 9.5),
            OrderV1(2, "bob", 1.0),
            OrderV1(3, "cy", 2.5),
        ]
        assert [r.key for r in records] == [b"ann", None, b"cy"]
        assert [r.schema_version for r in records] == [1, 1, 1]
        codec = ValueCodec(OrderV1)
        assert records[0].payload == codec.encode(OrderV1(1, "ann", 9.5))
        assert "schema_version=1" in repr(records[0])


@pytest.mark.parametrize(
    ("tp", "make"),
    [
        (OrderS, lambda i: OrderS(i, "u", 1.5)),
        (OrderP, lambda i: OrderP(id=i, user="u", amount=1.5)),
    ],
    ids=["msgspec", "pydantic"],
)
async def test_structs_and_pydantic_models(
    memory_url: str, tmp_path: Path, tp: Any, make: Any
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url) as client,
        Log.open(client, "orders", schema=tp) as log,
    ):
        async with log.writer() as w:
            await w.append_batch([make(i) for i in range(5)])
        assert [r.value for r in await read_all(log)] == [make(i) for i in range(5)]
        # Another program with a dataclass of the same fields reads them too.
        async with Log.open(client, "orders", schema=OrderV2) as other:
            assert [r.value.id for r in await read_all(other)] == list(range(5))


async def test_a_new_version_is_registered_and_readers_of_either_version_read_both(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        async with Log.open(client, "orders", schema=OrderV1) as v1, v1.writer() as w:
            await w.append(OrderV1(1, "ann", 3))
        async with Log.open(client, "orders", schema=OrderV2) as v2:
            async with v2.writer() as w:
                await w.append(OrderV2(2, "bob", 4.5, region="us", tags=["x"]))
            md = await v2.metadata()
            assert [(v.version, v.compatibility.value) for v in md.schemas] == [
                (1, "backward"),
                (2, "backward"),
            ]
            assert [lg.schema for lg in md.ledgers] == [1, 2]
            got = await read_all(v2)
            assert [r.value for r in got] == [
                OrderV2(1, "ann", 3.0),  # the defaults of what version 1 did not write
                OrderV2(2, "bob", 4.5, region="us", tags=["x"]),
            ]
            assert [r.schema_version for r in got] == [1, 2]
        async with Log.open(client, "orders", schema=OrderV1) as old:
            # An older reader skips what it does not know.
            assert [r.value for r in await read_all(old)] == [
                OrderV1(1, "ann", 3.0),
                OrderV1(2, "bob", 4.5),
            ]
            # ... and writing it again reuses version 1.
            async with old.writer() as w:
                await w.append(OrderV1(3, "cy", 1))
            md = await old.metadata()
            assert len(md.schemas) == 2 and md.ledgers[-1].schema == 1


async def test_an_incompatible_schema_is_refused_before_anything_is_fenced(
    memory_url: str, tmp_path: Path
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url) as client,
        Log.open(client, "orders", schema=OrderV1) as log,
    ):
        async with log.writer() as w:
            await w.append(OrderV1(1, "ann", 3))
            with pytest.raises(IncompatibleSchemaError) as caught:
                await Log.open(client, "orders", schema=OrderStrId)
            assert caught.value.field == "id" and caught.value.rule == "backward"
            assert "field 'id' changed type from long to string" in str(caught.value)
            # Forward: removing `user` (no default in version 1) breaks version 1 readers.
            with pytest.raises(IncompatibleSchemaError, match="'user' was removed"):
                await Log.open(client, "orders", schema=OrderNoUser, schema_compatibility="full")
            # An untyped writer on a typed log.
            plain = await Log.open(client, "orders")
            with pytest.raises(IncompatibleSchemaError, match="open it with schema="):
                await plain.writer()
            # Nothing fenced: the first writer goes on.
            await w.append(OrderV1(2, "bob", 4))
        md = await log.metadata()
        assert [v.version for v in md.schemas] == [1] and len(md.ledgers) == 1
        # Under "none", anything is registered.
        async with Log.open(
            client, "orders", schema=OrderStrId, schema_compatibility="none"
        ) as anything:
            async with anything.writer() as w2:
                await w2.append(OrderStrId("x", "z", 1.0))
            md = await anything.metadata()
            assert [v.compatibility.value for v in md.schemas] == ["backward", "none"]
            # Its reader cannot decode version 1's ids: SchemaError with the position, and
            # the payload is there.
            first, _second, third = await read_all(anything)
            with pytest.raises(SchemaError) as bad:
                _ = first.value
            assert bad.value.position == first.position
            assert bad.value.field == "id"
            assert f"the record at {first.position} (schema version 1)" in str(bad.value)
            assert ValueCodec(OrderV1).decode(first.payload) == OrderV1(1, "ann", 3.0)
            assert third.value == OrderStrId("x", "z", 1.0)


async def test_a_wrong_value_is_refused_naming_the_field_and_nothing_is_written(
    memory_url: str, tmp_path: Path
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url) as client,
        Log.open(client, "orders", schema=OrderV1) as log,
    ):
        async with log.writer() as w:
            await w.append(OrderV1(1, "ann", 3))
            with pytest.raises(InvalidArgumentError, match=r"OrderV1\.user: Expected `str`"):
                await w.append(OrderV1(2, 42, 1.0))  # type: ignore[arg-type]
            with pytest.raises(InvalidArgumentError, match="OrderV1 values, not bytes"):
                await w.append(b"raw")  # type: ignore[arg-type]
            with pytest.raises(InvalidArgumentError, match="OrderV1 values, not OrderV2"):
                await w.append_batch([OrderV1(3, "a", 1), OrderV2(4, "b", 1)])  # type: ignore[list-item]
            with pytest.raises(InvalidArgumentError, match=r"give Record\(value=\.\.\.\)"):
                await w.append_batch([Record(b"raw")])
            end = w.end_position
            await w.append(OrderV1(5, "eve", 2))
        assert [r.value.id for r in await read_all(log)] == [1, 5]
        assert end.entry_id == 1  # the refused appends took no entry


async def test_records_written_before_the_schema_raise_schema_error_with_their_payload(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        async with Log.open(client, "events") as plain, plain.writer() as w:
            await w.append(b"legacy")
            with pytest.raises(InvalidArgumentError, match="is for a log opened with schema=T"):
                await w.append_batch([Record(value=OrderV1(1, "a", 1))])
        async with Log.open(client, "events", schema=OrderV1) as typed:
            async with typed.writer() as w:
                await w.append(OrderV1(1, "ann", 3))
            old, new = await read_all(typed)
            assert old.payload == b"legacy" and old.schema_version is None
            with pytest.raises(SchemaError, match="was written without a schema") as caught:
                _ = old.value
            assert caught.value.position == old.position
            assert new.value == OrderV1(1, "ann", 3.0)
        # An untyped handle reads the payloads, and each one's version.
        async with Log.open(client, "events") as raw:
            got = await read_all(raw)
            assert [r.value for r in got] == [b"legacy", new.payload]
            assert [r.schema_version for r in got] == [None, 1]


async def test_a_schema_version_costs_no_byte_of_the_records(
    memory_url: str, tmp_path: Path
) -> None:
    """The entries of a typed log are those of a plain log given the encoded values."""
    values = [OrderV1(i, f"user-{i}", i * 1.5) for i in range(20)]
    codec = ValueCodec(OrderV1)
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=None) as client,
    ):
        async with Log.open(client, "typed", schema=OrderV1) as typed:
            async with typed.writer() as w:
                await w.append_batch(values)
            typed_ledger = ((await typed.metadata()).ledgers[0].ledger_id, typed.options.password)
        async with Log.open(client, "plain") as plain:
            async with plain.writer() as w:
                await w.append_batch([codec.encode(v) for v in values])
            plain_ledger = ((await plain.metadata()).ledgers[0].ledger_id, plain.options.password)
        entries = []
        for ledger_id, password in (typed_ledger, plain_ledger):
            reader = await client.open_ledger(ledger_id, password=password)
            entries.append([e.payload for e in await reader.read(0, reader.last_add_confirmed)])
        # (each log has its own generated password: compare the entries, not the ledgers)
        assert entries[0] == entries[1]
        assert decode_record_set(entries[0][0]).records[0] == codec.encode(values[0])


def test_a_schema_without_msgspec_names_the_extra() -> None:
    """Without msgspec (a client installed without the schema extra), Log.open(schema=...)
    says what to install; a log without a schema never imports it."""
    import subprocess
    import sys

    program = """
import dataclasses, sys
sys.modules["msgspec"] = None  # (as if not installed)
import walkit
from walkit.errors import ConfigurationError

@dataclasses.dataclass
class Order:
    id: int

try:
    walkit.Log.open(None, "orders", schema=Order)
except ConfigurationError as exc:
    print(exc)
walkit.Log.open(None, "orders")
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=120
    )
    assert "pip install 'walkit[schema]'" in done.stdout


def test_a_record_of_a_version_the_metadata_lacks_raises_schema_error() -> None:
    """(A ledger naming a version the log does not have is refused when the metadata is read;
    this is the reader's own guard, for a record seen through a stale copy of it.)"""
    from walkit._core.log_metadata import LogMetadata
    from walkit._core.schema import Compatibility
    from walkit.log._reader import _make_record
    from walkit.log._schema import LogSchema
    from walkit.log._values import RecordValues

    typed = LogSchema("orders", OrderV1, Compatibility.BACKWARD)
    md, _number = typed.registered(LogMetadata("orders"), 0)
    values = typed.values(md, 3)
    record: LogRecord[Any] = _make_record((2, 5, 1, b"\x80", None, None, None, None, values))
    with pytest.raises(SchemaError, match="schema version 3, which the log's metadata does not"):
        _ = record.value
    assert isinstance(values, RecordValues) and values.version == 3
