"""The lake in the golden corpus: log metadata format 4 (a log with offloaded ledgers) reads
and writes the same bytes; golden lakes of each lake format (1 and 2) read exactly with
today's log reader and with pyiceberg, and a format 1 table is brought to format 2.

Regenerating: a golden lake is never rewritten; a new lake format gets a new one, written by
``python tests/compat/make_lake.py lake_vN`` from the repository root (see its docstring, also
for writing one with older code, as ``lake_v1`` was)."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests._zookeeper import unique_root
from tests.compat._moved_io import FROM, TO
from tests.compat.make_lake import OrderV2
from walkit import Client, Log, LogPosition
from walkit._core.log_metadata import FORMAT_VERSION_LAKE, LogMetadata
from walkit._core.metadata_dump import decode_dump
from walkit._core.record_set import ProducerTag
from walkit.metadata import forget_memory_tree, import_metadata, open_metadata_store

GOLDEN = Path(__file__).resolve().parent / "lake" / "log_metadata_v4.json"


def test_format_4_reads_and_writes_the_same_bytes() -> None:
    data = GOLDEN.read_bytes()
    md = LogMetadata.from_bytes("orders", data)
    assert md.format == FORMAT_VERSION_LAKE == 4
    (lake,) = md.offloaded
    assert (lake.ledger_id, lake.records, lake.bookies_deleted) == (10, 100, True)
    assert md.to_bytes() == data


# --- golden lakes: a log's offloaded ledgers as each lake format wrote them -----------------
#
# ``lake/lake_v1`` (lake format 1) and ``lake/lake_v2`` (format 2) were written by
# ``tests/compat/make_lake.py`` (its docstring says how, and how to write one with older code;
# a golden lake is never rewritten: a new format gets a new one). Each holds a lake's directory
# (SQL catalog, Iceberg metadata, Parquet files), the metadata export that lists the offloaded
# files, and expected.json (every record as written). Iceberg metadata and the log's metadata
# name files by absolute URI (``file:///walkit-golden/<name>/...``), so the tests read a copy
# through a FileIO that maps that root to the copy (``_moved_io.py``), given to pyiceberg and
# to walkit as catalog properties.

LAKES = ("lake_v1", "lake_v2")


@attrs.frozen
class GoldenLake:
    name: str
    root: str
    catalog: dict[str, str]
    expected: dict[str, Any]


def copy_lake(name: str, tmp_path: Path) -> GoldenLake:
    """A copy of a golden lake, with the catalog properties that read it where it is."""
    copy = tmp_path / name
    shutil.copytree(GOLDEN.parent / name, copy)
    expected = json.loads((copy / "expected.json").read_text())
    root: str = expected["root"]
    catalog = {
        "type": "sql",
        "uri": f"sqlite:///{copy}/lake/catalog.db",
        "warehouse": root,
        "py-io-impl": "tests.compat._moved_io.MovedFileIO",
        FROM: root,
        TO: f"file://{copy}/lake",
    }
    return GoldenLake(name, root, catalog, expected)


@pytest.fixture(params=LAKES)
def golden_lake(request: pytest.FixtureRequest, tmp_path: Path) -> GoldenLake:
    return copy_lake(request.param, tmp_path)


async def test_the_log_reader_reads_a_golden_lake_exactly(golden_lake: GoldenLake) -> None:
    """Records, positions, timestamps, keys, headers, producer tags (none in format 1: it
    did not keep them), schema versions and values, from the lake alone (no bookie runs)."""
    name = unique_root("golden-lake").lstrip("/")
    dump = decode_dump((GOLDEN.parent / golden_lake.name / "metadata.dump").read_bytes())
    try:
        async with await open_metadata_store(f"memory://{name}") as store:
            await import_metadata(store, dump)
        async with Client.connect(f"memory://{name}") as client:
            log = await Log.open(
                client,
                "orders",
                schema=OrderV2,
                offload_to=golden_lake.root,
                offload_catalog=golden_lake.catalog,
            )
            md = await log.metadata()
            assert len(md.offloaded) == len(md.ledgers) - 1  # the last: empty, never offloaded
            end = LogPosition(md.ledgers[-1].seq, 0)
            records = [r async for r in log.reader(end=end, follow=False)]
    finally:
        forget_memory_tree(name)
    keeps_producers = golden_lake.expected["lake_format"] >= 2
    rows = golden_lake.expected["records"]
    assert len(records) == len(rows) == 14
    for record, row in zip(records, rows, strict=True):
        assert str(record.position) == row["position"]
        assert record.timestamp == row["timestamp"]
        assert record.key == (None if row["key"] is None else bytes.fromhex(row["key"]))
        headers = row["headers"]
        assert record.headers == (
            None if headers is None else tuple((k, bytes.fromhex(v)) for k, v in headers)
        )
        tag = row["producer"]
        assert record.producer == (ProducerTag(*tag) if tag and keeps_producers else None)
        assert record.schema_version == row["schema_version"]
        if row["schema_version"] is None:
            assert record.payload == bytes.fromhex(row["payload"])
        else:
            assert dataclasses.asdict(record.value) == row["value"]


def test_pyiceberg_reads_a_golden_lake_exactly(golden_lake: GoldenLake) -> None:
    from pyiceberg.catalog import load_catalog

    table = load_catalog("walkit", **golden_lake.catalog).load_table("walkit.orders")
    assert table.properties["walkit.lake-format"] == str(golden_lake.expected["lake_format"])
    got = table.scan().to_arrow()
    got = got.sort_by(
        [("ledger_seq", "ascending"), ("entry_id", "ascending"), ("slot", "ascending")]
    )
    rows = golden_lake.expected["records"]
    positions = zip(
        got.column("ledger_seq").to_pylist(),
        got.column("entry_id").to_pylist(),
        got.column("slot").to_pylist(),
        strict=True,
    )
    assert [f"{s}:{e}:{n}" for s, e, n in positions] == [r["position"] for r in rows]
    stamps = got.column("timestamp").cast("int64").to_pylist()
    assert stamps == [r["timestamp"] * 1000 for r in rows]
    assert got.column("key").to_pylist() == [
        None if r["key"] is None else bytes.fromhex(r["key"]) for r in rows
    ]
    # (pyiceberg 0.12's scan gives a null list as an empty one; the files hold nulls)
    assert got.column("headers").to_pylist() == [
        []
        if r["headers"] is None
        else [{"key": k, "value": bytes.fromhex(v)} for k, v in r["headers"]]
        for r in rows
    ]
    plain = [r for r in rows if r["schema_version"] is None]
    assert got.column("payload").to_pylist()[: len(plain)] == [
        bytes.fromhex(r["payload"]) for r in plain
    ]
    if golden_lake.expected["lake_format"] == 1:
        assert "producer" not in got.column_names and "value" not in got.column_names
        return
    assert got.column("producer").to_pylist() == [
        None
        if r["producer"] is None
        else dict(zip(("producer_id", "sequence"), r["producer"], strict=True))
        for r in rows
    ]
    # Every ledger was offloaded once version 2 existed: version 1 values with its defaults.
    assert got.column("value").to_pylist() == [r["value"] for r in rows]


def test_a_format_1_table_is_brought_to_format_2(tmp_path: Path) -> None:
    """What the first offload pass of a newer walkit does to an older lake's table: the
    producer column (ids 12-14) and a typed log's value are added, the format property set;
    the rows of the older files read on, with nulls in the new columns."""
    from walkit._core.lake import parse_lake_uri
    from walkit._core.schema_types import schema_of
    from walkit.lake._columns import table_columns
    from walkit.lake._table import PRODUCER_FIELD, Lake

    golden = copy_lake("lake_v1", tmp_path)
    lake = Lake("orders", parse_lake_uri(golden.root), golden.catalog)
    schema = table_columns(lake, schema_of(OrderV2))
    assert schema.field("producer").metadata[b"PARQUET:field_id"] == b"12"
    table = lake.table(create=False)
    assert table is not None
    assert table.properties["walkit.lake-format"] == "2"
    assert table.schema().find_field("producer") == PRODUCER_FIELD
    value = table.schema().find_field("value")
    assert value.field_id > PRODUCER_FIELD.field_id + 2  # (new ids: 15 on)
    got = table.scan().to_arrow()
    assert got.num_rows == len(golden.expected["records"])
    assert got.column("producer").null_count == got.column("value").null_count == got.num_rows
