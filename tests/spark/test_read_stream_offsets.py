"""The stream reader's offsets, driven directly (as Spark's driver drives it) against real
bookies: ``maxRecordsPerTrigger`` through Spark's read limits, ``availableNow``'s target, and
truncation behind the stream (an error, or a skip with ``failOnDataLoss=false``)."""

from __future__ import annotations

import functools
import itertools
import logging
from typing import Any

import pytest
import trio

from tests.spark._spark import require_spark

require_spark(java=True)  # before importing walkit.spark

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows  # noqa: E402

import walkit  # noqa: E402
from walkit.spark._options import read_options  # noqa: E402
from walkit.spark._read_stream import LogStreamReader  # noqa: E402

_names = itertools.count()


def stream_reader(url: str, name: str, **options: str) -> LogStreamReader:
    return LogStreamReader(read_options({"metadata": url, "path": name, **options}, streaming=True))


async def call(func: Any, *args: Any) -> Any:
    """The reader runs its own trio loop per call, as in Spark: run it on a thread."""
    return await trio.to_thread.run_sync(functools.partial(func, *args))


async def rows(reader: LogStreamReader, start: dict[str, str], end: dict[str, str]) -> list[str]:
    def read_all() -> list[str]:
        out: list[str] = []
        for partition in reader.partitions(start, end):
            for batch in reader.read(partition):
                out.extend(batch.column("position").to_pylist())
        return out

    return await trio.to_thread.run_sync(read_all)


async def test_offsets_limits_and_truncation_behind_the_stream(
    spark_metadata: str, caplog: pytest.LogCaptureFixture
) -> None:
    url, name = spark_metadata, f"offsets-{next(_names)}"
    async with walkit.Client.connect(url) as client:
        log = await walkit.Log.open(client, name, roll_entries=10)
        async with log.writer() as w:
            for i in range(25):
                await w.append(b"%d" % i)
            reader = stream_reader(url, name, maxRecordsPerTrigger="4")
            start = await call(reader.initialOffset)
            assert start == {"position": "1:0:0"}
            limit = reader.getDefaultReadLimit()
            assert limit == ReadMaxRows(4)
            end = await call(reader.latestOffset, start, limit)
            assert end == {"position": "1:4:0"}
            assert await rows(reader, start, end) == ["1:0:0", "1:1:0", "1:2:0", "1:3:0"]
            # availableNow: a target now; records appended later are not read by this query.
            await call(reader.prepareForTriggerAvailableNow)
            await w.append(b"late")
            everything = await call(reader.latestOffset, end, ReadAllAvailable())
            target = walkit.LogPosition.parse(everything["position"])
            # 25 records: 1:0-9, 2:0-9, 3:0-4 (the last one once the writer's explicit LAC,
            # sent 5 ms after the append, reached the bookies), never the late one (3:5).
            assert walkit.LogPosition(3, 4) <= target <= walkit.LogPosition(3, 5)
            assert await call(reader.latestOffset, everything, ReadAllAvailable()) == everything
            # Truncation overtakes the stream (which has committed up to 1:4).
            await w.truncate(walkit.LogPosition(2, 5))
    with pytest.raises(walkit.LogTruncatedError, match=r"truncated at 2:5:0.*failOnDataLoss"):
        await call(stream_reader(url, name).latestOffset, end, ReadAllAvailable())
    with pytest.raises(walkit.LogTruncatedError, match="truncated at 2:5:0"):
        await call(stream_reader(url, name).partitions, end, everything)
    lenient = stream_reader(url, name, failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="walkit.spark"):
        new_end = await call(lenient.latestOffset, end, ReadAllAvailable())
        got = await rows(lenient, end, new_end)
    assert "spark_stream_skipped_truncated" in caplog.text
    assert got == [f"2:{i}:0" for i in range(5, 10)] + [f"3:{i}:0" for i in range(6)]


async def test_max_records_per_trigger_counts_records_inside_entries(spark_metadata: str) -> None:
    url, name = spark_metadata, f"offsets-{next(_names)}"
    async with walkit.Client.connect(url) as client:
        log = await walkit.Log.open(client, name, roll_entries=4)
        async with log.writer() as w:
            for i in range(0, 100, 10):  # entries of 10 records each, 4 entries a ledger
                await w.append_batch([b"r%d" % n for n in range(i, i + 10)])
        expected = [str(rec.position) async for rec in log.reader(follow=False)]
    assert len(expected) == 100 and len({p.rsplit(":", 1)[0] for p in expected}) == 10
    reader = stream_reader(url, name, maxRecordsPerTrigger="7")
    limit = reader.getDefaultReadLimit()
    start = await call(reader.initialOffset)
    seen: list[str] = []
    sizes: list[int] = []
    for _ in range(20):
        end = await call(reader.latestOffset, start, limit)
        if end == start:
            break
        got = await rows(reader, start, end)
        sizes.append(len(got))
        seen.extend(got)
        start = end
    assert seen == expected  # every record once, in order, batches cut inside entries
    assert sizes == [7] * 14 + [2]
    assert start == {"position": "3:2:0"}  # after the last record (3:1:9)
    # Spark's own limit wins over the option (ReadMaxRows from a trigger), in records too.
    assert await call(reader.latestOffset, {"position": "1:0:3"}, ReadMaxRows(12)) == {
        "position": "1:1:5"
    }
