"""The ``consumer`` option of streaming reads, against real bookie processes: each micro-batch's
commit moves a durable consumer, so ``log.consumers()`` (and ``walkit log consumers``) shows a
query's lag like any other consumer's, retention keeps what the query has not processed, and
a query without a checkpoint starts where the consumer stands."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.spark._spark import require_spark

require_spark(java=False)  # before importing walkit.spark

import walkit  # noqa: E402
from tests.spark.test_read_stream import run_available_now, sunk  # noqa: E402
from walkit.errors import ConfigurationError  # noqa: E402
from walkit.spark._options import read_options  # noqa: E402

_names = itertools.count()


def run_query(spark: Any, url: str, name: str, checkpoint: Path, out: Path) -> None:
    run_available_now(spark, url, name, checkpoint, out, consumer="spark-etl")


async def test_a_query_commits_its_progress_to_a_consumer(
    spark: Any, spark_metadata: str, tmp_path: Path
) -> None:
    url, name = spark_metadata, f"consumed-{next(_names)}"
    async with walkit.Client.connect(url) as client:
        log = await walkit.Log.open(client, name, roll_entries=10, retain_records=0)
        async with log.writer() as w:
            first = [await w.append(b"a%d" % i) for i in range(50)]
        await trio.to_thread.run_sync(
            run_query, spark, url, name, tmp_path / "checkpoint", tmp_path / "out"
        )
        [info] = await log.consumers()
        assert info.name == "spark-etl" and info.lag.records == 0
        assert info.position is not None and info.position > first[-1]
        # New records are the query's lag, and retention keeps them for it.
        async with log.writer() as w:
            second = [await w.append(b"b%d" % i) for i in range(30)]
        [info] = await log.consumers()
        assert info.lag.records == 30
        await log.apply_retention()
        assert [r.position async for r in log.reader(follow=False)][-30:] == second
        # A query without a checkpoint starts where the consumer is: only the new records.
        out = tmp_path / "fresh-out"
        await trio.to_thread.run_sync(run_query, spark, url, name, tmp_path / "fresh", out)
        seen = [row["position"] for batch in sunk(out) for row in batch]
        assert seen == [str(p) for p in second]
        [info] = await log.consumers()
        assert info.lag.records == 0 and info.position is not None and info.position > second[-1]


async def test_a_query_with_a_checkpoint_creates_a_missing_consumer(
    spark: Any, spark_metadata: str, tmp_path: Path
) -> None:
    """A restarted query never asks for its initial offset: the option added to a query that
    has a checkpoint, or a consumer deleted between runs, is created at the query's progress."""
    url, name = spark_metadata, f"consumed-{next(_names)}"
    checkpoint = tmp_path / "checkpoint"
    async with walkit.Client.connect(url) as client:
        log = await walkit.Log.open(client, name, roll_entries=10)
        async with log.writer() as w:
            first = [await w.append(b"a%d" % i) for i in range(20)]
        await trio.to_thread.run_sync(
            run_available_now, spark, url, name, checkpoint, tmp_path / "out-1"
        )
        assert await log.consumers() == []
        for n, prefix in enumerate((b"b", b"c")):
            async with log.writer() as w:
                added = [await w.append(prefix + b"%d" % i) for i in range(15)]
            out = tmp_path / f"out-{n + 2}"
            await trio.to_thread.run_sync(run_query, spark, url, name, checkpoint, out)
            # Only the new records, once: the checkpoint decides where the query goes on.
            assert [row["position"] for batch in sunk(out) for row in batch] == [
                str(p) for p in added
            ]
            [info] = await log.consumers()
            assert info.lag.records == 0 and info.position is not None
            assert info.position > added[-1]
            await log.delete_consumer("spark-etl")
        assert first[-1] < added[0]


def test_the_option_is_checked() -> None:
    url = "sqlite:///tmp/m.db"
    parsed = read_options({"metadata": url, "path": "orders", "consumer": "etl"}, streaming=True)
    assert parsed.consumer == "etl"
    assert read_options({"metadata": url, "path": "orders"}, streaming=True).consumer is None
    cases = [
        ({"consumer": "etl"}, False, "option 'consumer' is for streaming reads"),
        ({"consumer": "a/b"}, True, "option 'consumer': bad consumer name"),
        ({"consumer": ""}, True, "option 'consumer': bad consumer name"),
    ]
    for options, streaming, message in cases:
        with pytest.raises(ConfigurationError, match=message):
            read_options({"metadata": url, "path": "orders", **options}, streaming=streaming)
    with pytest.raises(ConfigurationError, match="applies to a log read"):
        read_options({"metadata": url, "ledgers": "all", "consumer": "x"}, streaming=False)
