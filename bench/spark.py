"""Benchmark the Spark read side against a plain ``log.reader()``.

A log of 1,000,000 records of 100 B (3 bookie processes, E=3 Qw=2 Qa=2, sqlite metadata,
ledgers rolled every 250,000 entries; records packed into record sets of up to 64 KiB by
``append_batch``, about 600 per entry) is read, in one run:

1. by a plain ``log.reader(follow=False)`` in this process (one client, one task);
2. by Spark on ``local[2]``: ``spark.read.format("walkit")...load(LOG).count()``;
3. by Spark: a ``groupBy`` over the payload (1,000 distinct payloads) with ``count()``.

Each figure is records/s over the whole call (Spark's include planning and task start-up), with
the CPU spent meanwhile by the three bookies and by the reader: this process for the plain
reader; Spark's JVM and Python workers (the live processes under this one, read from /proc)
for Spark. Targets: Spark >= 300,000 records/s and at
least as fast as the plain reader.

    python bench/spark.py [--records 1000000] [--runs 3] [--no-append]

Appends a dated section to docs/benchmarks.md unless ``--no-append``.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ledger import start_bookies
from walkit import Client, Log

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
LOG = "bench-spark"
SIZE = 100
GROUPS = 1000
ROLL = 250_000
_TICK = os.sysconf("SC_CLK_TCK")


def payload(i: int) -> bytes:
    head = b"key-%04d|" % (i % GROUPS)
    return head + b"x" * (SIZE - len(head))


def cpu_seconds(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICK


async def fill(url: str, records: int) -> float:
    started = trio.current_time()
    async with Client.connect(url) as client:
        log = await Log.open(client, LOG, roll_entries=ROLL)
        async with log.writer() as w:
            batch = 1000
            for first in range(0, records, batch):
                await w.append_batch(
                    [payload(i) for i in range(first, min(records, first + batch))]
                )
    return trio.current_time() - started


async def plain_read(url: str) -> int:
    count = 0
    async with Client.connect(url) as client, Log.open(client, LOG, create=False) as log:
        async for _rec in log.reader(follow=False):
            count += 1
    return count


def descendants(root: int, exclude: list[int]) -> list[int]:
    """Every live process under ``root`` (Spark's JVM and its Python workers), without
    ``exclude`` (the bookies) and their children."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found: list[int] = []
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in exclude:
                found.append(child)
                frontier.append(child)
    return found


def spark_cpu(bookies: list[int]) -> float:
    """CPU seconds of Spark's processes alive now (workers that exited are not counted)."""
    total = 0.0
    for pid in descendants(os.getpid(), bookies):
        try:
            total += cpu_seconds([pid])
        except OSError:
            pass
    return total


def timed(pids: list[int], action: Callable[[], int]) -> dict[str, float]:
    cpu = cpu_seconds(pids)
    own = time.process_time()
    spark = spark_cpu(pids)
    started = time.perf_counter()
    count = action()
    elapsed = time.perf_counter() - started
    return {
        "count": count,
        "seconds": elapsed,
        "bookie_cpu": cpu_seconds(pids) - cpu,
        "own_cpu": time.process_time() - own,
        "spark_cpu": spark_cpu(pids) - spark,
    }


def spark_session(push_filters: bool = False) -> Any:
    """A local Spark session with the ``walkit`` format registered; ``push_filters``: Spark
    hands the source its filters (``spark.sql.python.filterPushdown.enabled``)."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import walkit.spark

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("walkit-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.python.filterPushdown.enabled", str(push_filters).lower())
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    walkit.spark.register(spark)
    return spark


def run(records: int, runs: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    results: dict[str, Any] = {"plain": [], "count": [], "group": []}
    with tempfile.TemporaryDirectory(prefix="walkit-bench-") as tmp:
        root = Path(tmp)
        url = f"sqlite:///{root / 'metadata.db'}?session_timeout=30"
        procs = start_bookies(root, url, 3)
        pids = [p.pid for p in procs]
        spark = spark_session()
        try:
            results["fill_s"] = trio.run(fill, url, records)

            def df() -> Any:
                return spark.read.format("walkit").option("metadata", url).load(LOG)

            df().count()  # start every executor's Python worker once (imports, connections)
            for _ in range(runs):
                results["plain"].append(timed(pids, lambda: trio.run(plain_read, url)))
                results["count"].append(timed(pids, lambda: int(df().count())))

                def group() -> int:
                    rows = df().groupBy(F.col("payload")).count().collect()
                    assert len(rows) == min(GROUPS, records), len(rows)
                    return sum(int(r["count"]) for r in rows)

                results["group"].append(timed(pids, group))
            results["partitions"] = df().rdd.getNumPartitions()
        finally:
            spark.stop()
            for proc in procs:
                proc.kill()
                proc.wait()
    for key in ("plain", "count", "group"):
        for row in results[key]:
            assert row["count"] == records, (key, row)
    return results


def _median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def report(results: dict[str, Any], records: int, runs: int) -> str:
    today = datetime.date.today().isoformat()
    load = os.getloadavg()[0]
    import pyspark

    lines = [
        f"## Spark read: {records:,} records of {SIZE} B (`bench/spark.py`, {today})",
        "",
        f"`python bench/spark.py --records {records} --runs {runs}` on {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, PySpark "
        f"{pyspark.__version__} on `local[2]`; 3 bookie processes (E=3 Qw=2 Qa=2), sqlite "
        f"metadata, ledgers rolled every {ROLL:,} entries, records in record sets of up to 64 KiB "
        f"({results['partitions']} Spark "
        f"partitions with the default splitEntries). Medians of {runs} runs; load average "
        f"{load:.1f} when the report was written. Writing the log took "
        f"{results['fill_s']:.1f} s ({records / results['fill_s']:,.0f} records/s).",
        "",
        "| read | seconds | records/s | bookies' CPU µs/record | reader's CPU µs/record "
        "| vs plain reader |",
        "|---|---|---|---|---|---|",
    ]
    plain = records / _median(results["plain"], "seconds")
    names = {
        "plain": "plain `log.reader()`, one process",
        "count": 'Spark `read.format("walkit")...count()`',
        "group": 'Spark `groupBy("payload").count()`',
    }
    for key, name in names.items():
        reader_cpu = "own_cpu" if key == "plain" else "spark_cpu"
        seconds = _median(results[key], "seconds")
        rate = records / seconds
        lines.append(
            f"| {name} | {seconds:.2f} | {rate:,.0f} | "
            f"{_median(results[key], 'bookie_cpu') / records * 1e6:.1f} | "
            f"{_median(results[key], reader_cpu) / records * 1e6:.1f} | {rate / plain:.2f}x |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    text = report(run(args.records, args.runs), args.records, args.runs)
    print(text)
    if not args.no_append:
        with DOCS.open("a") as out:
            out.write("\n" + text)


if __name__ == "__main__":
    main()
