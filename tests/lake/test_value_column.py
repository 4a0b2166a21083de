"""A typed log's table has a ``value`` column: a struct of the log's schema's fields, typed, so
that pyiceberg, DuckDB and Polars see the values without decoding payloads; the table's schema
grows with the log's (Iceberg schema evolution), records written before the log had a schema
have a null value, and the log's readers still decode ``record.value`` from the lake."""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import trio
from pyiceberg.catalog import load_catalog

from tests._orders import OrderV1, OrderV2
from tests.client.conftest import cluster, connect
from tests.lake.test_crashes import BASE_MS
from walkit import Log
from walkit._core.lake import table_name
from walkit.errors import SchemaError

READ_VALUES = """
import json, sys
from pyiceberg.catalog.sql import SqlCatalog
lake = sys.argv[1]
catalog = SqlCatalog("walkit", uri=f"sqlite:///{lake}/catalog.db", warehouse=f"file://{lake}")
rows = catalog.load_table("walkit.orders").scan().to_arrow()
rows = rows.sort_by([("ledger_seq", "ascending"), ("entry_id", "ascending"), ("slot", "ascending")])
assert not any(m == "walkit" or m.startswith("walkit.") for m in sys.modules)
print(json.dumps([[v["id"], v["region"]] for v in rows.column("value").to_pylist() if v]))
"""


@dataclasses.dataclass
class CountV1:
    id: int
    amount: int


@dataclasses.dataclass
class CountV2:  # amount widened: compatible for the log, not a type Iceberg can promote to
    id: int
    amount: float


def _table(lake_opts: dict[str, Any], log: str) -> Any:
    """The log's table, loaded with pyiceberg alone (its catalog's properties)."""
    props = lake_opts.get("offload_catalog")
    if props is None:
        root = lake_opts["offload_to"].removeprefix("file://")
        props = {
            "type": "sql",
            "uri": f"sqlite:///{root}/catalog.db",
            "warehouse": f"file://{root}",
        }
    return load_catalog("walkit", **props).load_table(f"walkit.{table_name(log)}")


def _ordered(rows: pa.Table) -> pa.Table:
    return rows.sort_by(
        [("ledger_seq", "ascending"), ("entry_id", "ascending"), ("slot", "ascending")]
    )


async def _append(log: Log[Any], values: list[Any]) -> None:
    async with log.writer() as w:
        for i, value in enumerate(values):
            await w.append(value, key=b"k", timestamp=BASE_MS + i)


async def test_a_typed_log_in_the_lake_has_typed_values_that_evolve(
    memory_url: str, tmp_path: Path, lake_opts: dict[str, Any]
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        opts = {"roll_entries": 2, **lake_opts}
        plain = await Log.open(client, "orders", **opts)
        await _append(plain, [b"before the schema", b"also"])
        v1s = [OrderV1(i, f"u{i}", i + 0.5) for i in range(5)]
        v1 = await Log.open(client, "orders", schema=OrderV1, **opts)
        await _append(v1, v1s)
        await v1.offload()
        first_pass = {x.ledger_id for x in (await v1.metadata()).offloaded}
        v2s = [OrderV2(10 + i, "ann", 1.0, region="us", tags=["a", str(i)]) for i in range(4)]
        v2 = await Log.open(client, "orders", schema=OrderV2, **opts)
        await _append(v2, v2s)
        await v2.offload()
        md = await v2.metadata()
        assert [v.version for v in md.schemas] == [1, 2]
        version_of = {lg.ledger_id: lg.schema for lg in md.ledgers}
        assert {version_of[i] for i in first_pass} >= {0, 1}

        table = _table(lake_opts, "orders")
        value_type = table.schema().find_field("value").field_type
        assert [f.name for f in value_type.fields] == ["id", "user", "amount", "region", "tags"]
        rows = _ordered(table.scan().to_arrow())
        arrow_value = rows.schema.field("value").type
        assert arrow_value.field("id").type == pa.int64()
        assert arrow_value.field("amount").type == pa.float64()
        assert pa.types.is_list(arrow_value.field("tags").type) or pa.types.is_large_list(
            arrow_value.field("tags").type
        )

        # What each row's value must be: none before the schema; a version 1 record offloaded
        # before version 2 existed has null for the fields added since (Iceberg: columns added
        # after a file was written read as null); one offloaded later was decoded with version
        # 2 (its defaults); version 2 records as written.
        expect: list[dict[str, Any] | None] = []
        values = iter([None, None, *v1s, *v2s])
        for ledger_id in rows.column("ledger_id").to_pylist():
            value = next(values)
            if value is None:
                expect.append(None)
                continue
            doc = dataclasses.asdict(value)
            if isinstance(value, OrderV1):
                doc.update(region="eu", tags=[])
                if ledger_id in first_pass:
                    doc.update(region=None, tags=None)
            expect.append(doc)
        assert rows.column("value").to_pylist() == expect
        in_lake = sum(x.records for x in md.offloaded)
        assert len(expect) == in_lake == rows.num_rows >= 9
        assert any(d is not None and d["region"] is None for d in expect)
        assert any(d is not None and d["region"] == "eu" for d in expect)

        duckdb = pytest.importorskip("duckdb")
        typed = duckdb.sql(
            "select value.id, value.region, value.amount from rows "
            "where value.region = 'us' order by value.id"
        ).fetchall()
        us = [(d["id"], "us", 1.0) for d in expect if d is not None and d["region"] == "us"]
        assert typed == us and us
        polars = pytest.importorskip("polars")
        catalog = lake_opts.get("offload_catalog") or {}
        storage = None
        if "s3.endpoint" in catalog:  # (Polars reads S3 with its own client: tell it where)
            storage = {"aws_endpoint_url": catalog["s3.endpoint"], "aws_allow_http": "true"}
        frame = (
            polars.scan_iceberg(table, storage_options=storage)
            .select(polars.col("value").struct.field("user"))
            .filter(polars.col("user") == "ann")
            .collect()
        )
        assert frame.height == sum(1 for d in expect if d is not None and d["user"] == "ann")

        if "offload_catalog" not in lake_opts:  # pyiceberg in a process without walkit
            root = lake_opts["offload_to"].removeprefix("file://")
            with trio.fail_after(120):
                done = await trio.run_process(
                    [sys.executable, "-c", READ_VALUES, root],
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
            assert done.returncode == 0, done.stderr
            assert json.loads(done.stdout) == [[d["id"], d["region"]] for d in expect if d]

        # The log's reader over the lake still decodes each record's value from its payload.
        reader = [r async for r in v2.reader(follow=False)]
        assert [r.payload for r in reader[:2]] == [b"before the schema", b"also"]
        assert [r.value for r in reader[2:]] == [OrderV2(v.id, v.user, v.amount) for v in v1s] + v2s
        assert [r.schema_version for r in reader] == [None, None] + [1] * 5 + [2] * 4


async def test_a_type_iceberg_cannot_promote_fails_the_offload_and_keeps_the_records(
    memory_url: str, tmp_path: Path
) -> None:
    opts: dict[str, Any] = {"roll_entries": 2, "offload_to": f"file://{tmp_path / 'lake'}"}
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        v1 = await Log.open(client, "counts", schema=CountV1, **opts)
        await _append(v1, [CountV1(i, i) for i in range(3)])
        await v1.offload()
        v2 = await Log.open(client, "counts", schema=CountV2, **opts)
        await _append(v2, [CountV2(9, 0.5), CountV2(10, 1.5), CountV2(11, 2.5)])
        before = (await v2.metadata()).offloaded
        with pytest.raises(SchemaError, match=r"amount: long -> double"):
            await v2.offload()
        assert (await v2.metadata()).offloaded == before
        values = [r.value async for r in v2.reader(follow=False)]
        assert values == [CountV2(i, float(i)) for i in range(3)] + [
            CountV2(9, 0.5),
            CountV2(10, 1.5),
            CountV2(11, 2.5),
        ]


def test_a_record_that_does_not_decode_gets_a_null_value_and_keeps_its_bytes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The offload goes on past a record its schema cannot decode (its payload is in the
    table), and says where it is."""
    import msgspec

    from walkit._core.schema_types import schema_of, struct_of
    from walkit._core.types import Entry
    from walkit._schema_arrow import arrow_type
    from walkit.lake._table import ARROW_SCHEMA
    from walkit.lake._write import Columns

    good = msgspec.msgpack.encode({"id": 1, "user": "ann", "amount": 2.5})
    bad = b"\xc1 not msgpack"
    columns = Columns(ledger_seq=3, ledger_id=30, schema_version=1)
    columns.add([Entry(30, 0, good), Entry(30, 1, bad)], record_sets=False)
    schema = ARROW_SCHEMA.append(pa.field("value", arrow_type(schema_of(OrderV1))))
    with caplog.at_level("WARNING"):
        table = columns.table(schema, msgspec.msgpack.Decoder(struct_of(schema_of(OrderV1))).decode)
    assert table.column("value").to_pylist() == [{"id": 1, "user": "ann", "amount": 2.5}, None]
    assert table.column("payload").to_pylist() == [good, bad]
    assert "lake_value_not_decoded" in caplog.text and "3:1:0" in caplog.text


def test_values_of_every_kind_of_field_convert_as_their_dicts_would() -> None:
    """The value column is built field by field from the decoded Structs: the same Arrow
    values as converting each record's plain dict (enums, maps of bytes, nested and optional
    records, lists, defaults of an older version's record, and a null value)."""
    import msgspec

    from tests.compat.test_schema_golden import Address, Kind, OrderV1, OrderV2
    from walkit._core.schema_codec import ValueCodec, plain_decoder
    from walkit._core.schema_types import schema_of, struct_of
    from walkit._schema_arrow import arrow_type
    from walkit.lake._write import struct_column

    schema = schema_of(OrderV2)
    payloads = [
        ValueCodec(OrderV2).encode(
            OrderV2(1, "ann", 9.5, "n", ["a"], {"k": b"\x00"}, Kind.SELL, Address("Lyon"), True)
        ),
        ValueCodec(OrderV1).encode(OrderV1(2, "bob", 3)),
        ValueCodec(OrderV2).encode(OrderV2(3, "cy", 0.0)),
    ]
    decode = msgspec.msgpack.Decoder(struct_of(schema)).decode
    type_ = arrow_type(schema)
    built = struct_column([decode(payloads[0]), None, *map(decode, payloads[1:])], type_)
    plain = plain_decoder(schema)
    dicts = [plain(payloads[0]), None, *map(plain, payloads[1:])]
    assert built.to_pylist() == pa.array(dicts, type_).to_pylist()
    assert built.to_pylist()[2]["kind"] == "buy" and built.to_pylist()[1] is None
