"""Writing DataFrames into logs with a real local Spark and real bookie processes: batch writes
read back in order, aborted writes leave nothing, streaming writes count each micro-batch
once across a restart that replays one, and bad input fails with its text."""

from __future__ import annotations

import itertools
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from walkit import Client, Log, LogPosition

_names = itertools.count()


def log_name(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


def read_back(url: str, name: str) -> list[tuple[LogPosition, bytes]]:
    """Every record of the log, through a plain ``log.reader()``."""

    async def main() -> list[tuple[LogPosition, bytes]]:
        async with Client.connect(url) as client:
            owner = await Log.open(client, name, create=False)
            return [(r.position, r.payload) async for r in owner.reader(follow=False)]

    return trio.run(main)


def leftovers(url: str, name: str) -> tuple[list[int], list[int]]:
    """(ledgers staged for the log and not linked, ledgers that exist but the log does not list
    and that name the log)."""

    async def main() -> tuple[list[int], list[int]]:
        async with Client.connect(url) as client:
            owner = await Log.open(client, name, create=False)
            staged = [s.ledger_id for s in await owner.staged_ledgers()]
            listed = (await owner.metadata()).ledger_ids()
            stray = []
            for ledger_id in await client.list_ledgers():
                md = await client.ledger_metadata(ledger_id)
                ours = md.custom_metadata.get("walkit.log") == name.encode()
                if ours and ledger_id not in listed:
                    stray.append(ledger_id)
            return staged, stray

    return trio.run(main)


def no_leftovers_eventually(url: str, name: str, timeout: float = 60.0) -> None:
    """Assert that no ledger of the log is left behind. Task attempts that Spark killed when
    the job failed may still be running after the abort; each deletes its own ledger when it
    finds the job ended, so poll (a real leak never goes away)."""
    deadline = time.monotonic() + timeout
    while True:
        found = leftovers(url, name)
        if found == ([], []) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert found == ([], [])


def numbered(spark: Any, count: int, parts: int, prefix: str = "r") -> Any:
    """A DataFrame of ``prefix000``... payloads in ``parts`` contiguous partitions."""
    return spark.range(0, count, numPartitions=parts).selectExpr(
        f"CAST(format_string('{prefix}%03d', id) AS BINARY) AS payload"
    )


def write(df: Any, url: str, name: str, mode: str = "append") -> None:
    df.write.format("walkit").option("metadata", url).mode(mode).save(name)


def error_text(action: Any) -> str:
    with pytest.raises(Exception) as info:
        action()
    return str(info.value)


def test_batch_write_then_read_back_in_partition_order(spark: Any, spark_metadata: str) -> None:
    name = log_name("write")
    write(numbered(spark, 30, 3), spark_metadata, name)  # the log is created
    got = read_back(spark_metadata, name)
    assert [p for _, p in got] == [b"r%03d" % i for i in range(30)]
    # Three tasks, three ledgers, linked in partition order: positions follow them.
    seqs = sorted({pos.ledger_seq for pos, _ in got})
    assert len(seqs) == 3
    assert [pos for pos, _ in got] == sorted(pos for pos, _ in got)
    # Each task packs its partition into record sets: 10 small records share one entry.
    assert {(pos.entry_id, pos.slot) for pos, _ in got} == {(0, slot) for slot in range(10)}

    # A second write appends after the first; string payloads are written as UTF-8; the
    # columns of the walkit reader's schema are ignored.
    strings = spark.createDataFrame(
        [("s0", "x", "1:0"), ("s1 é", "x", "1:1")], "payload string, log string, position string"
    ).coalesce(1)
    write(strings, spark_metadata, name)
    got = read_back(spark_metadata, name)
    assert [p for _, p in got][30:] == [b"s0", "s1 é".encode()]
    assert leftovers(spark_metadata, name) == ([], [])

    # The log's own writer takes over after the written records, as after any writer.
    async def append() -> LogPosition:
        async with Client.connect(spark_metadata) as client:
            owner = await Log.open(client, name)
            async with owner.writer() as w:
                return await w.append(b"by a writer")

    pos = trio.run(append)
    got = read_back(spark_metadata, name)
    assert got[-1] == (pos, b"by a writer") and len(got) == 33

    # The Spark reader sees the same; and a log read with it copies into another log as it
    # is (the reader's columns are ignored; partitions follow the log's order).
    source = spark.read.format("walkit").option("metadata", spark_metadata).load(name)
    rows = source.orderBy("ledger_seq", "entry_id", "slot").select("position", "payload").collect()
    assert [(LogPosition.parse(r.position), bytes(r.payload)) for r in rows] == got
    copy = log_name("copy")
    write(source, spark_metadata, copy)
    assert [p for _, p in read_back(spark_metadata, copy)] == [p for _, p in got]
    # A bigger write fills several entries of up to batch_bytes (64 KiB) per task.
    big = log_name("big")
    write(numbered(spark, 20000, 2, "x" * 20), spark_metadata, big)
    got = read_back(spark_metadata, big)
    assert [p for _, p in got] == [b"x" * 20 + b"%03d" % i for i in range(20000)]
    entries = {(pos.ledger_seq, pos.entry_id) for pos, _ in got}
    # 10,000 records of 23-25 B (+ 4 B of envelope each) per task: 5 entries of 64 KiB.
    assert 2 * 4 <= len(entries) <= 2 * 6, len(entries)


def test_an_aborted_write_leaves_nothing_visible_and_no_ledgers(
    spark: Any, spark_metadata: str
) -> None:
    from pyspark.sql import functions as F

    name = log_name("abort")
    write(numbered(spark, 6, 1, "ok"), spark_metadata, name)
    before = read_back(spark_metadata, name)

    def fail_at_25(i: int) -> bytes:
        if i == 25:
            raise ValueError("boom at row 25")
        return b"x%03d" % i

    # useArrow given: PySpark would otherwise try to infer a pandas UDF from the type hints,
    # and warn that it cannot.
    failing = F.udf(fail_at_25, "binary", useArrow=True)
    df = spark.range(0, 30, numPartitions=3).select(failing("id").alias("payload"))
    text = error_text(lambda: write(df, spark_metadata, name))
    assert "boom at row 25" in text
    assert read_back(spark_metadata, name) == before
    no_leftovers_eventually(spark_metadata, name)

    # A null payload fails its task with a clear error, and nothing is written either.
    nulls = spark.createDataFrame([(b"a",), (None,), (b"c",)], "payload binary").coalesce(1)
    text = error_text(lambda: write(nulls, spark_metadata, name))
    assert "row 1 of partition 0 has a null payload" in text
    assert read_back(spark_metadata, name) == before
    no_leftovers_eventually(spark_metadata, name)


def test_bad_writes_fail_with_their_text(spark: Any, spark_metadata: str) -> None:
    name = log_name("bad")
    df = numbered(spark, 3, 1)
    url = spark_metadata
    assert "a log is append-only" in error_text(lambda: write(df, url, name, "overwrite"))
    # Spark itself refuses the modes a Python data source cannot take (error, ignore).
    text = error_text(lambda: df.write.format("walkit").option("metadata", url).save(name))
    assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in text
    text = error_text(lambda: write(spark.range(3), url, name))
    assert "has no column 'payload' (its columns: id)" in text
    text = error_text(lambda: write(spark.range(3).selectExpr("id AS payload"), url, name))
    assert "column 'payload' is bigint, but walkit writes binary or string payloads" in text
    text = error_text(lambda: write(df.selectExpr("payload", "1 AS extra"), url, name))
    assert "also has the column(s) extra" in text
    text = error_text(lambda: df.write.format("walkit").mode("append").save(name))
    assert 'the option "metadata" is required' in text
    text = error_text(
        lambda: (
            df.write.format("walkit")
            .option("metadata", url)
            .option("startingPosition", "earliest")
            .mode("append")
            .save(name)
        )
    )
    assert "unknown option 'startingposition' for a write" in text
    text = error_text(
        lambda: df.write.format("walkit").option("metadata", url).mode("append").save()
    )
    assert 'name the log to write, as in .save("events")' in text
    text = error_text(
        lambda: (
            df.write.format("walkit")
            .option("metadata", url)
            .option("writeQuorum", "two")
            .mode("append")
            .save(name)
        )
    )
    assert "option 'writeQuorum' is 'two': expected an integer >= 1" in text
    # Settings apply to a log the write creates; an existing log keeps its own.
    write(df, url, name)
    text = error_text(
        lambda: (
            df.write.format("walkit")
            .option("metadata", url)
            .option("ensembleSize", "2")
            .option("writeQuorum", "2")
            .mode("append")
            .save(name)
        )
    )
    assert f"log {name} exists with ensemble_size=3, not 2" in text
    assert [p for _, p in read_back(url, name)] == [b"r000", b"r001", b"r002"]


def run_stream(spark: Any, url: str, name: str, source: Path, checkpoint: Path) -> Any:
    query = (
        spark.readStream.schema("payload string")
        .json(str(source))
        .writeStream.format("walkit")
        .option("metadata", url)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start(name)
    )
    query.awaitTermination(300)
    assert query.exception() is None, query.exception()
    return query


def test_streaming_write_counts_a_replayed_batch_once(
    spark: Any, spark_metadata: str, tmp_path: Path
) -> None:
    name = log_name("stream")
    source = tmp_path / "in"
    source.mkdir()
    checkpoint = tmp_path / "checkpoint"
    (source / "a.json").write_text(
        "".join(json.dumps({"payload": f"a{i}"}) + "\n" for i in range(5))
    )
    query = run_stream(spark, spark_metadata, name, source, checkpoint)
    assert [p for _, p in read_back(spark_metadata, name)] == [b"a%d" % i for i in range(5)]

    # The driver dies after the sink committed batch 0 and before the checkpoint recorded it:
    # the restarted query runs batch 0 again, then the new file as batch 1.
    commits = sorted((checkpoint / "commits").iterdir())
    assert [c.name for c in commits if not c.name.startswith(".")] == ["0"]
    for c in commits:
        c.unlink()
    (source / "b.json").write_text(
        "".join(json.dumps({"payload": f"b{i}"}) + "\n" for i in range(3))
    )
    again = run_stream(spark, spark_metadata, name, source, checkpoint)
    assert again.id == query.id
    got = [p for _, p in read_back(spark_metadata, name)]
    assert got == [b"a0", b"a1", b"a2", b"a3", b"a4", b"b0", b"b1", b"b2"]
    assert leftovers(spark_metadata, name) == ([], [])

    async def mark() -> int | None:
        async with Client.connect(spark_metadata) as client:
            owner = await Log.open(client, name, create=False)
            return (await owner.metadata()).sink_batch(str(query.id))

    assert trio.run(mark) == 1
    shutil.rmtree(checkpoint)
