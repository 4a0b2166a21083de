"""Spark reads offloaded ledgers straight from the lake's Parquet files, on a file:// lake and
on an S3 server process: the rows equal a plain ``log.reader()`` across the lake/bookie
boundary (the bookies' copy deleted), filters on ``timestamp`` and ``key`` are pushed down
(whole offloaded ledgers outside the time bounds are not planned), a stream with a record
budget crosses the boundary, and a data file removed after planning is reported."""

from __future__ import annotations

import datetime
import itertools
import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import trio

import walkit
from tests.lake._s3 import CREDENTIALS, lake_options
from tests.lake.conftest import s3_endpoint  # noqa: F401 (a fixture)
from walkit.errors import LogTruncatedError

_names = itertools.count()
#: Records' timestamps: a base in the past, one second apart (so that they span ledgers).
BASE_MS = int(time.time() * 1000) - 86_400_000
PER_LEDGER = 12
LEDGERS = 5


@pytest.fixture(params=["file", "s3"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The log options of a lake, and the Spark option that reads it (``offloadCatalog``:
    an S3 endpoint and credentials, which Spark's workers get from nowhere else here)."""
    if request.param == "file":
        return {"log": lake_options("file", tmp_path, None), "spark": {}}
    endpoint = request.getfixturevalue("s3_endpoint")
    opts = lake_options("s3", tmp_path, endpoint)
    props = {
        **opts["offload_catalog"],
        "s3.access-key-id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
        "s3.secret-access-key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
    }
    return {"log": opts, "spark": {"offloadCatalog": json.dumps(props)}}


def load(spark: Any, url: str, name: str, options: dict[str, str]) -> Any:
    reader = spark.read.format("walkit").option("metadata", url)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load(name)


Row = tuple[str, bytes, bytes | None, tuple[tuple[str, bytes], ...] | None, int | None]


def rows_of(frame: Any) -> list[Row]:
    found = []
    for r in frame.orderBy("ledger_seq", "entry_id", "slot").collect():
        stamp = None if r.timestamp is None else int(r.timestamp.timestamp() * 1000 + 0.5)
        headers = None if r.headers is None else tuple((h.key, bytes(h.value)) for h in r.headers)
        key = None if r.key is None else bytes(r.key)
        found.append((r.position, bytes(r.payload), key, headers, stamp))
    return found


async def _filled(url: str, name: str, lake: dict[str, Any]) -> tuple[list[Row], int]:
    """A log of LEDGERS closed ledgers and a current one, offloaded with the bookies' copy
    of the offloaded ones deleted; its records as a plain reader reads them, and how many
    ledgers are offloaded. The records are a day old, so the writer's housekeeping
    offloads ledgers as it rolls, and ``log.offload()`` the rest."""
    async with walkit.Client.connect(url) as client:
        log = await walkit.Log.open(
            client, name, roll_entries=PER_LEDGER, offload_deletion_lag=0, **lake["log"]
        )
        async with log.writer() as writer:
            for i in range(LEDGERS * PER_LEDGER + 3):
                headers = [("n", b"%d" % i)] if i % 3 == 0 else None
                await writer.append(
                    b'{"order": %d}' % i,
                    key=b"k%d" % (i % 4),
                    headers=headers,
                    timestamp=BASE_MS + 1000 * i,
                )
        await log.offload()  # (the writer's housekeeping may have offloaded some already)
        md = await log.metadata()
        assert [x for x in md.offloaded if x.bookies_deleted], md.offloaded
        expected: list[Row] = [
            (
                str(r.position),
                r.payload,
                r.key,
                None if r.headers is None else tuple(r.headers),
                r.timestamp,
            )
            async for r in log.reader(follow=False)
        ]
        return expected, len(md.offloaded)


def _at(ms: int) -> str:
    when = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
    return when.strftime("%Y-%m-%d %H:%M:%S.%f")


async def test_spark_reads_offloaded_ledgers_from_the_lake(
    spark: Any, spark_metadata: str, lake: dict[str, Any]
) -> None:
    url, name = spark_metadata, f"lake-orders-{next(_names)}"
    expected, offloaded = await _filled(url, name, lake)
    assert offloaded >= LEDGERS - 1
    assert len(expected) == LEDGERS * PER_LEDGER + 3
    opts = lake["spark"]

    def read_all() -> list[Row]:
        return rows_of(load(spark, url, name, {**opts, "splitEntries": "5"}))

    assert await trio.to_thread.run_sync(read_all) == expected

    # A timestamp window of 10 records, across the boundary of two offloaded ledgers.
    low, high = BASE_MS + 1000 * 8, BASE_MS + 1000 * 17

    def window() -> list[Row]:
        frame = load(spark, url, name, opts).where(
            f"timestamp >= timestamp'{_at(low)}' AND timestamp <= timestamp'{_at(high)}'"
        )
        return rows_of(frame)

    assert await trio.to_thread.run_sync(window) == [
        row for row in expected if row[4] is not None and low <= row[4] <= high
    ]

    # Keys: = and IN, and with a timestamp bound; over lake and bookie ledgers alike.
    def keyed() -> tuple[list[Row], list[Row]]:
        one = load(spark, url, name, opts).where("key = X'6B31'")  # b"k1"
        both = load(spark, url, name, opts).where(
            f"key IN (X'6B30', X'6B33') AND timestamp > timestamp'{_at(BASE_MS + 30_000)}'"
        )
        return rows_of(one), rows_of(both)

    one, both = await trio.to_thread.run_sync(keyed)
    assert one == [row for row in expected if row[2] == b"k1"]
    assert both == [
        row
        for row in expected
        if row[2] in (b"k0", b"k3") and row[4] is not None and row[4] > BASE_MS + 30_000
    ]


async def test_a_timestamp_filter_plans_no_offloaded_ledger_outside_it(
    spark_metadata: str, tmp_path: Path
) -> None:
    """The driver leaves out whole offloaded ledgers whose recorded time range misses the
    filter's bounds, and plans the rest from their files."""
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    from walkit.spark._options import read_options
    from walkit.spark._read_log import FilteringLogReader, LogPartition

    url, name = spark_metadata, f"lake-plan-{next(_names)}"
    lake = {"log": lake_options("file", tmp_path, None), "spark": {}}
    await _filled(url, name, lake)
    low = BASE_MS + 1000 * (2 * PER_LEDGER + 1)  # inside the third ledger
    high = BASE_MS + 1000 * (2 * PER_LEDGER + 5)

    def plan() -> list[Any]:
        reader = FilteringLogReader(read_options({"metadata": url, "path": name}, streaming=False))
        stamps = [
            GreaterThanOrEqual(
                ("timestamp",), datetime.datetime.fromtimestamp(low / 1000, datetime.UTC)
            ),
            LessThan(("timestamp",), datetime.datetime.fromtimestamp(high / 1000, datetime.UTC)),
        ]
        assert list(reader.pushFilters(stamps)) == []
        parts = reader.partitions()
        assert all(isinstance(part, LogPartition) for part in parts)
        return [rng for part in parts if isinstance(part, LogPartition) for rng in part.ranges]

    ranges = await trio.to_thread.run_sync(plan)
    lake_seqs = {rng.seq for rng in ranges if rng.lake is not None}
    assert lake_seqs == {3}, ranges  # the third ledger (sequence numbers count from 1)
    # The ledgers still on the bookies are planned (their records' times are not known
    # before they are read): the executors filter their rows.
    assert {rng.seq for rng in ranges if rng.lake is None}


async def test_a_stream_with_a_record_budget_crosses_from_the_lake_to_the_bookies(
    spark: Any, spark_metadata: str, tmp_path: Path
) -> None:
    url, name = spark_metadata, f"lake-stream-{next(_names)}"
    lake = {"log": lake_options("file", tmp_path, None), "spark": {}}
    expected, _ = await _filled(url, name, lake)
    sink = f"lake_stream_{next(_names)}"

    def stream() -> list[Any]:
        query = (
            spark.readStream.format("walkit")
            .option("metadata", url)
            .option("maxRecordsPerTrigger", "7")
            .load(name)
            .writeStream.format("memory")
            .queryName(sink)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        batches = [p["numInputRows"] for p in query.recentProgress]
        return [batches, spark.sql(f"SELECT * FROM {sink}")]

    batches, frame = await trio.to_thread.run_sync(stream)
    assert await trio.to_thread.run_sync(lambda: rows_of(frame)) == expected
    assert max(batches) <= 7 and sum(batches) == len(expected)


async def test_a_data_file_gone_after_planning_is_reported_or_skipped(
    spark_metadata: str, tmp_path: Path
) -> None:
    from walkit.spark._options import read_options
    from walkit.spark._read_io import log_state
    from walkit.spark._read_log import read_log_ranges
    from walkit.spark._read_plan import plan_log
    from walkit.spark._run import run

    url, name = spark_metadata, f"lake-gone-{next(_names)}"
    lake = {"log": lake_options("file", tmp_path, None), "spark": {}}
    expected, _ = await _filled(url, name, lake)

    def read(fail: bool) -> list[Any]:
        options = read_options(
            {"metadata": url, "path": name, "failOnDataLoss": str(fail).lower()},
            streaming=False,
        )
        state = run(log_state, options.connection, name, 0)
        plan = plan_log(state.ledgers, walkit.LogPosition.EARLIEST)
        first = plan.ranges[0]
        assert first.lake is not None
        for uri in first.lake.files:
            Path(uri.removeprefix("file://")).unlink(missing_ok=True)
        batches = list(read_log_ranges(options, name, plan.ranges))
        return batches

    with pytest.raises(LogTruncatedError, match="data files were removed"):
        await trio.to_thread.run_sync(read, True)
    batches = await trio.to_thread.run_sync(read, False)
    rows = pa.Table.from_batches(batches).num_rows
    assert rows == len(expected) - PER_LEDGER
