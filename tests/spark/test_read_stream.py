"""Streaming reads of a log through Spark, against real bookie processes: a query restarted
from its checkpoint, with appends, rolls and a takeover in between, sees every record exactly
once; a processing-time trigger tails a live log; ``maxRecordsPerTrigger`` bounds the records
of a batch."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import trio

import walkit

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-stream-{next(_names)}"


async def plain_read(url: str, name: str) -> list[str]:
    async with walkit.Client.connect(url) as client, walkit.Log.open(client, name) as log:
        return [str(rec.position) async for rec in log.reader(follow=False)]


def batch_sink(out: Path) -> Any:
    """A foreachBatch function writing each batch to ``out/batch-ID.json`` (a replayed batch
    overwrites its file: what lands is what the checkpoint committed)."""
    out.mkdir(parents=True, exist_ok=True)

    def write(df: Any, batch_id: int) -> None:
        rows = [
            {"position": r.position, "payload": bytes(r.payload).decode()}
            for r in df.select("position", "payload").collect()
        ]
        (out / f"batch-{batch_id:05d}.json").write_text(json.dumps(rows))

    return write


def sunk(out: Path) -> list[list[dict[str, str]]]:
    return [json.loads(p.read_text()) for p in sorted(out.glob("batch-*.json"))]


def stream(spark: Any, url: str, name: str, **options: Any) -> Any:
    reader = spark.readStream.format("walkit").option("metadata", url)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(name)


def run_available_now(
    spark: Any, url: str, name: str, checkpoint: Path, out: Path, **options: Any
) -> None:
    """A query of ``name`` with ``trigger(availableNow=True)`` into ``out``, in batches of 30
    records unless ``options`` say otherwise."""
    query = (
        stream(spark, url, name, **{"maxRecordsPerTrigger": 30, **options})
        .writeStream.foreachBatch(batch_sink(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert not query.isActive
    assert query.exception() is None


async def test_restart_from_checkpoint_sees_every_record_exactly_once(
    spark: Any, spark_metadata: str, tmp_path: Path
) -> None:
    url, name = spark_metadata, unique("events")
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    async with walkit.Client.connect(url) as client:
        log = await walkit.Log.open(client, name, roll_entries=25)
        async with log.writer() as w:
            for i in range(70):
                await w.append(b"first %d" % i)
        await trio.to_thread.run_sync(run_available_now, spark, url, name, checkpoint, out)
        first_run = sunk(out)
        # Appends between the runs: a new writer takes over (fencing the last ledger), rolls.
        # Its records share entries (record sets of up to 64 bytes: several records each).
        log = await walkit.Log.open(client, name, roll_entries=25, batch_bytes=64)
        async with log.writer() as w:
            for i in range(0, 60, 15):
                await w.append_batch([b"second %d" % n for n in range(i, i + 15)])
        await trio.to_thread.run_sync(run_available_now, spark, url, name, checkpoint, out)
    expected = await plain_read(url, name)
    batches = sunk(out)
    assert batches[: len(first_run)] == first_run  # the restart did not redo a batch
    seen = [row["position"] for batch in batches for row in batch]
    assert len(expected) == 130
    assert seen == expected  # every record, once, in log order
    # maxRecordsPerTrigger bounds the records of a batch, cutting inside entries when it
    # must: 70 records, then 60 more, in batches of 30 (a batch never spans the two runs).
    assert [len(batch) for batch in batches if batch] == [30, 30, 10, 30, 30]
    shared = [p for p in seen if not p.endswith(":0")]
    assert len(shared) >= 30, seen  # the second run's records share entries


async def test_processing_time_trigger_tails_a_live_log(
    spark: Any, spark_metadata: str, tmp_path: Path
) -> None:
    url, name = spark_metadata, unique("live")
    out = tmp_path / "out"
    async with walkit.Client.connect(url) as client:
        log = await walkit.Log.open(client, name, roll_entries=15)
        async with log.writer() as w:
            await w.append_batch([b"before %d" % i for i in range(10)])
        # The sixth record's position: in the middle of the batch's entry (a record set).
        start = (await plain_read(url, name))[5]
        query = await trio.to_thread.run_sync(
            lambda: (
                stream(spark, url, name, startingPosition=start)
                .writeStream.foreachBatch(batch_sink(out))
                .option("checkpointLocation", str(tmp_path / "checkpoint"))
                .trigger(processingTime="500 milliseconds")
                .start()
            )
        )
        try:
            # Records arrive while the query runs: rolls, and a takeover in the middle.
            for round_ in range(3):
                async with log.writer() as w:
                    for i in range(20):
                        await w.append(b"live %d %d" % (round_, i))
            expected = (await plain_read(url, name))[5:]
            with trio.fail_after(120):
                while True:
                    seen = [row["position"] for batch in sunk(out) for row in batch]
                    if len(seen) >= len(expected):
                        break
                    assert query.exception() is None
                    await trio.sleep(0.5)
        finally:
            await trio.to_thread.run_sync(query.stop)
    assert seen == expected


def test_progress_shows_the_logs_end_and_how_far_behind_the_query_is(
    spark: Any, spark_metadata: str, tmp_path: Path
) -> None:
    url, name = spark_metadata, unique("lag")

    async def fill() -> None:
        async with walkit.Client.connect(url) as client:
            log = await walkit.Log.open(client, name)
            async with log.writer() as w:
                for i in range(100):
                    await w.append(b"lag %d" % i)  # one at a time: an entry each

    trio.run(fill)
    query = (
        stream(spark, url, name, maxRecordsPerTrigger=30)
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    sources = [p["sources"][0] for p in query.recentProgress if p["numInputRows"]]
    seen = [
        (s["numInputRows"], json.loads(s["endOffset"]), json.loads(s["latestOffset"]))
        for s in sources
    ]
    assert seen == [
        (rows, {"position": f"1:{end}:0"}, {"position": "1:100:0", "entriesBehind": 100 - end})
        for rows, end in [(30, 30), (30, 60), (30, 90), (10, 100)]
    ]
