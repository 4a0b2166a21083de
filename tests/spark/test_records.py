"""Keys, headers and timestamps through Spark, against real bookie processes: the reader's
``key``, ``headers`` and ``timestamp`` columns equal what a plain ``log.reader()`` reads
(null for records without them, such as those of clients without a clock and of ledgers from
before record sets); ``startingTimestamp`` starts batch and streaming reads at
``Log.position_at``; the writer takes the columns from a DataFrame."""

from __future__ import annotations

import datetime
import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import trio

import walkit
from walkit import Record

_names = itertools.count()
T0 = 1_700_000_000_000


def unique(prefix: str) -> str:
    return f"{prefix}-records-{next(_names)}"


def load(spark: Any, url: str, name: str, **options: Any) -> Any:
    reader = spark.read.format("walkit").option("metadata", url)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(name)


Row = tuple[str, bytes, bytes | None, list[tuple[str, bytes]] | None, int | None]


async def plain_rows(url: str, name: str, start: str = "earliest") -> list[Row]:
    async with walkit.Client.connect(url) as client, walkit.Log.open(client, name) as log:
        return [
            (
                str(r.position),
                r.payload,
                r.key,
                None if r.headers is None else list(r.headers),
                r.timestamp,
            )
            async for r in log.reader(start, follow=False)
        ]


def spark_rows(frame: Any) -> list[Row]:
    out = []
    for r in frame.orderBy("ledger_seq", "entry_id", "slot").collect():
        when = r.timestamp
        ms = None
        if when is not None:  # (a naive local time on the driver: Spark's session zone)
            ms = round(when.astimezone(datetime.UTC).timestamp() * 1000)
        headers = None if r.headers is None else [(h.key, bytes(h.value)) for h in r.headers]
        key = None if r.key is None else bytes(r.key)
        out.append((r.position, bytes(r.payload), key, headers, ms))
    return out


async def fill(url: str, name: str) -> None:
    """Records of every kind: stamped by a clock only, with keys, headers and their own
    timestamps, without any (a client without a clock), and a ledger from before record sets."""
    now = [T0 / 1000]
    async with (
        walkit.Client.connect(url, wall_clock=lambda: now[0]) as client,
        walkit.Log.open(client, name, roll_entries=6) as log,
    ):
        async with log.writer() as w:
            for i in range(20):
                now[0] += 1
                await w.append(b"s%02d" % i)
            await w.append_batch(
                [
                    b"plain",
                    Record(b"keyed", key=b"k1", headers=[("a", b"1"), ("a", b"2")]),
                    Record(b"dated", timestamp=T0 + 500_000),
                ]
            )
        old = await log.stage_ledger("old-format", 0)
        await old.append_batch([b"old%d" % i for i in range(3)])
        await old.close()
        await log.link_ledgers([old.id], job="old-format")
    async with (
        walkit.Client.connect(url) as client,
        walkit.Log.open(client, name) as log,
        log.writer() as w,
    ):
        await w.append_batch([b"unstamped", Record(b"keyed-too", key=b"")])


async def test_key_headers_and_timestamp_columns(spark: Any, spark_metadata: str) -> None:
    url, name = spark_metadata, unique("columns")
    await fill(url, name)
    expected = await plain_rows(url, name)
    assert any(r[4] is None for r in expected) and any(r[2] is not None for r in expected)
    frame = load(spark, url, name)
    assert frame.columns[-3:] == ["key", "headers", "timestamp"]
    assert spark_rows(frame) == expected
    # startingTimestamp: where Log.position_at says, in a batch read.
    async with walkit.Client.connect(url) as client, walkit.Log.open(client, name) as log:
        start = await log.position_at(T0 + 10_500)
    assert start == walkit.LogPosition.parse(expected[10][0])
    assert spark_rows(load(spark, url, name, startingTimestamp=T0 + 10_500)) == expected[10:]


async def test_streaming_read_from_a_timestamp(
    spark: Any, spark_metadata: str, tmp_path: Path
) -> None:
    url, name = spark_metadata, unique("stream")
    await fill(url, name)
    expected = await plain_rows(url, name)
    out = tmp_path / "out"
    out.mkdir()

    def sink(df: Any, batch_id: int) -> None:
        rows = [[r.position, None if r.key is None else bytes(r.key).hex()] for r in df.collect()]
        (out / f"batch-{batch_id:05d}.json").write_text(json.dumps(rows))

    query = (
        spark.readStream.format("walkit")
        .option("metadata", url)
        .option("startingTimestamp", str(T0 + 15_000))
        .load(name)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    got = [row for p in sorted(out.glob("batch-*.json")) for row in json.loads(p.read_text())]
    assert [row[0] for row in got] == [r[0] for r in expected[14:]]
    assert [row[1] for row in got] == [None if r[2] is None else r[2].hex() for r in expected[14:]]


def read_back(url: str, name: str) -> list[Row]:
    return trio.run(plain_rows, url, name)


def test_write_takes_key_headers_and_timestamp_columns(spark: Any, spark_metadata: str) -> None:
    url, name = spark_metadata, unique("write")
    frame = spark.createDataFrame(
        [
            ("a", "k1", [("h", b"v")], datetime.datetime(2024, 5, 1, 9, 0, tzinfo=datetime.UTC)),
            ("b", None, None, None),
            ("c", "k3", [], datetime.datetime(2024, 5, 1, 9, 1, tzinfo=datetime.UTC)),
        ],
        "payload string, key string, headers array<struct<key: string, value: binary>>, "
        "timestamp timestamp",
    ).coalesce(1)
    frame.write.format("walkit").option("metadata", url).mode("append").save(name)
    got = read_back(url, name)
    may_1 = 1_714_554_000_000
    assert [(r[1], r[2], r[3]) for r in got] == [
        (b"a", b"k1", [("h", b"v")]),
        (b"b", None, None),
        (b"c", b"k3", None),
    ]
    assert got[0][4] == may_1 and got[2][4] == may_1 + 60_000
    assert got[1][4] is not None and got[1][4] > may_1  # the task's clock
    # Read from one log and written into another: keys, headers and timestamps go along.
    copy = unique("copy")
    load(spark, url, name).write.format("walkit").option("metadata", url).mode("append").save(copy)
    assert [r[1:] for r in read_back(url, copy)] == [r[1:] for r in got]
    # A long column is milliseconds; a column of another type is refused, naming it.
    spark.createDataFrame([("x", 42)], "payload string, timestamp long").write.format(
        "walkit"
    ).option("metadata", url).mode("append").save(name)
    assert read_back(url, name)[-1][4] == 42
    with pytest.raises(Exception, match="column 'key' is int"):
        spark.createDataFrame([("x", 1)], "payload string, key int").write.format("walkit").option(
            "metadata", url
        ).mode("append").save(name)
    # A header without a value fails its task, naming the row; the job writes nothing.
    before = read_back(url, name)
    bad = spark.createDataFrame(
        [("ok", [("h", b"v")]), ("bad", [("h", None)])],
        "payload string, headers array<struct<key: string, value: binary>>",
    ).coalesce(1)
    with pytest.raises(Exception, match="row 1 of partition 0: header 'h': a value must be bytes"):
        bad.write.format("walkit").option("metadata", url).mode("append").save(name)
    assert read_back(url, name) == before
