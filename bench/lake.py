"""Benchmark the lake: offloading closed ledgers to Parquet, and reading them back.

Two logs of the same records (3 bookie processes, E=Qw=3 Qa=2, sqlite metadata, about ten
ledgers each, record sets of up to 64 KiB): order events of 100-200 B, JSON with a few fields
of varied values, each record with its order's key and its event time (a timestamp per record,
spread over one day). One log is offloaded to a ``file://`` lake with
``offload_deletion_lag=0``, so its bookies' copy is deleted (the last two ledgers, which a
takeover fences, are tiny ones written after); the other stays on the bookies. In one run:

1. **offload rate**: records/s of ``await log.offload()`` over the closed ledgers, against
   a plain ``log.reader(follow=False)`` over the same ledgers, from the bookies, just before
   (target >= 0.8x; one pass: a log is offloaded once);
2. **lake reads**: the plain reader over the offloaded log (its ledgers read from the lake)
   against the same reader over the other log (from the bookies) (>= 1x);
3. **Spark**: ``count()`` with a filter on ``timestamp`` that keeps 10 % of the rows, over the
   offloaded log against the other (>= 3x); a Spark source that reads only the bookies
   refuses a log whose ledgers live only in the lake, and the figure says "not available";
4. **bytes**: the lake (data files, Iceberg's metadata and catalog) against one bookie's copy
   of the same records (<= 0.5x): the growth of one bookie's entry logs and index while the
   other log was written (checkpointed every 2 s, so that they hold it soon), and the entries'
   payload bytes as the ledgers' metadata records them.

Each figure comes with the CPU spent meanwhile: this process (the reader, the offloader and
its pyarrow threads), the three bookies, Spark's JVM and Python workers. ``--runs N`` makes N
rounds of 2. and 3., alternating which log goes first; the report gives each round's ratio
and their median and range. Load average at start and end; the bookies run at this process's
niceness (``nice -n 10 python bench/lake.py`` nices them all alike). ``--profile`` prints
where this process's time goes (cProfile) in one more lake read and bookie read.

    python bench/lake.py [--records 2000000] [--runs 3] [--no-spark] [--profile] [--no-append]

Appends a dated section to docs/benchmarks.md unless ``--no-append``.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import datetime
import functools
import io
import logging
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ledger import start_bookies  # noqa: E402
from bench.spark import cpu_seconds, spark_cpu, spark_session  # noqa: E402
from walkit import Client, Log, Record  # noqa: E402
from walkit.errors import ConfigurationError  # noqa: E402

DOCS: Final = ROOT / "docs" / "benchmarks.md"
BOOKIES_LOG: Final = "bench-bookies"
LAKE_LOG: Final = "bench-lake"
#: The events' day: 2026-11-02 UTC; records are spread over 20 hours of it from 01:00.
DAY_MS: Final = 1_793_577_600_000
SPAN_MS: Final = 20 * 3600 * 1000
LEDGERS: Final = 10
BATCH: Final = 1000
#: The bookies' checkpoint interval: short, so that a log's entries are in the entry logs
#: (where history lives) before it is read, and one bookie's copy can be measured soon.
CHECKPOINT_S: Final = 2.0
#: The share of the rows the Spark query's timestamp filter keeps.
SELECTED: Final = 0.10
_STATUSES: Final = ("created", "paid", "packed", "shipped", "delivered", "refunded")
_REGIONS: Final = ("eu-west-1", "eu-central-1", "us-east-1", "us-west-2", "ap-south-1")
_CURRENCIES: Final = ("EUR", "USD", "GBP", "INR")


def events(records: int) -> Iterator[list[Record]]:
    """The records, batch by batch, the same on every call: order events of 100-200 B (JSON,
    a few fields of varied values, some optional) with the order's key and the event's time."""
    rng = np.random.default_rng(20261102)
    step = max(1, SPAN_MS // records)
    first = DAY_MS + 3600 * 1000
    for start in range(0, records, BATCH):
        n = min(records, start + BATCH) - start
        cols = zip(
            rng.integers(0, 10_000_000, n).tolist(),
            rng.integers(0, len(_STATUSES), n).tolist(),
            rng.integers(0, 1_000_000, n).tolist(),
            rng.integers(0, 50_000, n).tolist(),
            rng.integers(0, 4, n).tolist(),
            rng.integers(1, 12, n).tolist(),
            rng.integers(100, 90_000, n).tolist(),
            rng.integers(0, len(_CURRENCIES), n).tolist(),
            rng.integers(0, len(_REGIONS), n).tolist(),
            rng.integers(0, 100, n).tolist(),
            strict=True,
        )
        batch = []
        for i, (order, st, customer, sku, size, qty, cents, cur, region, extra) in enumerate(
            cols, start
        ):
            tail = (
                f',"coupon":"SAVE{5 + extra % 45}"'
                if extra < 40
                else ',"note":"leave at the door"'
                if extra >= 85
                else ""
            )
            payload = (
                f'{{"order":"o-{order:08d}","status":"{_STATUSES[st]}","customer":"c-'
                f'{customer:06d}","sku":"SKU-{sku:05d}-{"SMLX"[size]}","qty":{qty},"price":'
                f'{cents // 100}.{cents % 100:02d},"currency":"{_CURRENCIES[cur]}","region":"'
                f'{_REGIONS[region]}"{tail}}}'
            ).encode()
            batch.append(Record(payload, key=b"o-%08d" % order, timestamp=first + i * step))
        yield batch


def window(records: int) -> tuple[int, int]:
    """[lo, hi) in ms: the timestamps of the middle 10 % of the records."""
    step = max(1, SPAN_MS // records)
    first = DAY_MS + 3600 * 1000
    selected = selected_rows(records)
    lo = (records - selected) // 2
    return first + lo * step, first + (lo + selected) * step


def selected_rows(records: int) -> int:
    return int(records * SELECTED)


def roll_bytes(records: int) -> int:
    """About ``LEDGERS`` ledgers whatever the size (a record is ~160 B with its key)."""
    return max(64 * 1024, records * 160 // LEDGERS)


def lake_options(lake: Path) -> dict[str, Any]:
    """Offload to ``lake``, deleting the bookies' copy at once; never from the writer's
    housekeeping (the events are weeks old: it would offload as the writer rolls), only when
    ``log.offload()`` is timed."""
    return {
        "offload_to": f"file://{lake}",
        "offload_deletion_lag": 0.0,
        "offload_after": 10 * 365 * 86400.0,
    }


def tree_bytes(path: Path, skip: str = "journal") -> int:
    """Bytes of the files under ``path``, but those under a directory named ``skip``."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = [d for d in dirnames if d != skip]
        for name in filenames:
            try:
                total += (Path(dirpath) / name).stat().st_size
            except OSError:
                pass
    return total


async def fill(url: str, name: str, batches: list[list[Record]], options: dict[str, Any]) -> float:
    """Write the records, then two one-record ledgers (the last two, which stay on the
    bookies); seconds it took to write the records."""
    async with Client.connect(url, wall_clock=time.time) as client:
        log = await Log.open(
            client,
            name,
            ensemble_size=3,
            write_quorum=3,
            ack_quorum=2,
            roll_bytes=roll_bytes(sum(len(b) for b in batches)),
            **options,
        )
        t0 = time.perf_counter()
        async with log.writer() as w:
            for batch in batches:
                await w.append_batch(batch)
        elapsed = time.perf_counter() - t0
        for _ in range(2):
            async with log.writer() as w:
                await w.append(b"{}", key=b"marker", timestamp=DAY_MS)
        await log.aclose()
    return elapsed


async def payload_bytes(url: str, name: str) -> int:
    """The entries' payload bytes of the log's ledgers, as their metadata records them."""
    async with (
        Client.connect(url) as client,
        Log.open(client, name, create=False) as log,
    ):
        md = await log.metadata()
        return sum([(await client.ledger_metadata(x.ledger_id)).length for x in md.ledgers])


def one_bookie_copy(data_dir: Path, before: int, expected: int, timeout: float = 30.0) -> int:
    """How much ``data_dir``'s entry logs and index grew since ``before``, once they hold at
    least ``expected`` bytes more (the bookie writes them at its checkpoints, or when its
    write cache fills) and stopped growing; 0 if they never did."""
    deadline = time.monotonic() + timeout
    last = -1
    while time.monotonic() < deadline:
        grown = tree_bytes(data_dir) - before
        if grown >= expected and grown == last:
            return grown
        last = grown
        time.sleep(1.0)
    return 0


async def read(url: str, name: str, options: dict[str, Any]) -> int:
    """Read the whole log with a plain reader; how many records."""
    count = 0
    async with (
        Client.connect(url, wall_clock=time.time) as client,
        Log.open(client, name, create=False, **options) as log,
    ):
        async for _record in log.reader("earliest", follow=False):
            count += 1
    return count


async def offload(url: str, name: str, options: dict[str, Any]) -> dict[str, Any]:
    """Offload the log; what its metadata then says of the offloaded ledgers."""
    async with (
        Client.connect(url, wall_clock=time.time) as client,
        Log.open(client, name, create=False, **options) as log,
    ):
        ledgers = await log.offload()
        md = await log.metadata()
    return {
        "ledgers": ledgers,
        "records": sum(x.records for x in md.offloaded),
        "payload_bytes": sum(x.size for x in md.offloaded),
        "lake_bytes": sum(x.lake_bytes for x in md.offloaded),
        "deleted": sum(1 for x in md.offloaded if x.bookies_deleted),
        "listed": len(md.ledgers),
    }


class Meter:
    """Seconds and CPU (this process, the bookies, Spark's processes) of one action."""

    def __init__(self, bookies: list[int]) -> None:
        self.bookies = bookies

    def __call__(self, action: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
        bk, own, spark = cpu_seconds(self.bookies), time.process_time(), spark_cpu(self.bookies)
        t0 = time.perf_counter()
        out = action()
        return out, {
            "seconds": time.perf_counter() - t0,
            "own_cpu": time.process_time() - own,
            "bookie_cpu": cpu_seconds(self.bookies) - bk,
            "spark_cpu": spark_cpu(self.bookies) - spark,
        }


def spark_count(spark: Any, url: str, name: str, records: int) -> int:
    from pyspark.sql import functions as F

    lo, hi = (datetime.datetime.fromtimestamp(t / 1000, datetime.UTC) for t in window(records))
    df = spark.read.format("walkit").option("metadata", url).load(name)
    return int(df.filter((F.col("timestamp") >= lo) & (F.col("timestamp") < hi)).count())


def profile(action: Callable[[], Any], top: int = 14) -> str:
    """The functions this process spent the most time in (cumulative, then own time)."""
    prof = cProfile.Profile()
    prof.enable()
    action()
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out).strip_dirs()
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def run(args: argparse.Namespace) -> dict[str, Any]:
    records: int = args.records
    res: dict[str, Any] = {"load_start": os.getloadavg(), "rounds": [], "profiles": {}}
    with tempfile.TemporaryDirectory(prefix="lake-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        url = f"sqlite:///{root / 'metadata.db'}?session_timeout=30"
        procs = start_bookies(root, url, 3, ("--checkpoint-interval", str(CHECKPOINT_S)))
        pids = [p.pid for p in procs]
        res["nice"] = [os.getpriority(os.PRIO_PROCESS, pid) for pid in pids]
        meter = Meter(pids)
        # Filters pushed down: the source prunes offloaded ledgers and row groups by timestamp.
        spark = spark_session(push_filters=True) if args.spark else None
        batches = list(events(records))  # made once: both logs get the same records
        opts = lake_options(root / "lake")
        try:
            before = tree_bytes(root / "bookie-0")
            res["fill_s"] = [trio.run(fill, url, BOOKIES_LOG, batches, {})]
            res["payload_bytes"] = trio.run(payload_bytes, url, BOOKIES_LOG)
            res["bookie_bytes"] = one_bookie_copy(root / "bookie-0", before, res["payload_bytes"])
            before = tree_bytes(root / "bookie-0")
            res["fill_s"].append(trio.run(fill, url, LAKE_LOG, batches, opts))
            one_bookie_copy(root / "bookie-0", before, res["payload_bytes"])  # (flushed)
            del batches
            # The plain reader over the ledgers about to be offloaded, from the bookies; then
            # the offload (one pass: a log is offloaded once).
            res["count_before"], res["plain"] = meter(lambda: trio.run(read, url, LAKE_LOG, {}))
            res["offload"], res["offload_m"] = meter(lambda: trio.run(offload, url, LAKE_LOG, opts))
            res["lake_dir_bytes"] = tree_bytes(root / "lake")
            if spark is not None:  # start the Python workers, with what each log's reads import
                for log_name in (BOOKIES_LOG, LAKE_LOG):
                    with contextlib.suppress(Exception):
                        spark_count(spark, url, log_name, records)
            pair = [("lake", LAKE_LOG, opts), ("bookies", BOOKIES_LOG, {})]
            for n in range(args.runs):
                row: dict[str, Any] = {}
                # Alternating which goes first, so that a drift of the host falls on both.
                for label, log_name, o in pair if n % 2 == 0 else pair[::-1]:
                    row[f"count_{label}"], row[f"read_{label}"] = meter(
                        functools.partial(trio.run, read, url, log_name, o)
                    )
                for label, log_name, _o in pair if n % 2 == 1 else pair[::-1]:
                    if spark is None:
                        continue
                    try:
                        row[f"rows_{label}"], row[f"spark_{label}"] = meter(
                            functools.partial(spark_count, spark, url, log_name, records)
                        )
                    except Exception as exc:  # (Py4J wraps the source's error)
                        if "lives only in the lake" not in str(exc) and not isinstance(
                            exc, ConfigurationError
                        ):
                            raise
                        row[f"spark_{label}"] = None
                res["rounds"].append(row)
            if args.profile:
                res["profiles"]["lake read"] = profile(lambda: trio.run(read, url, LAKE_LOG, opts))
                res["profiles"]["bookie read"] = profile(
                    lambda: trio.run(read, url, BOOKIES_LOG, {})
                )
        finally:
            if spark is not None:
                spark.stop()
            for proc in procs:
                proc.terminate()
            for proc in procs:
                proc.wait(timeout=10)
    res["load_end"] = os.getloadavg()
    _check(res, records)
    return res


def _check(res: dict[str, Any], records: int) -> None:
    """Every read saw every record; the offload moved them all; Spark kept 10 %."""
    expected = records + 2  # and the two marker records
    assert res["count_before"] == expected, res["count_before"]
    # The first marker's ledger is offloaded too; the last, current one never is.
    off = res["offload"]
    assert off["records"] == records + 1, off
    assert off["deleted"] == off["listed"] - 2, off
    for row in res["rounds"]:
        assert row["count_lake"] == row["count_bookies"] == expected, row
        for label in ("lake", "bookies"):
            if row.get(f"spark_{label}") is not None:
                assert row[f"rows_{label}"] == selected_rows(records), row


def _med(xs: list[float]) -> str:
    mid = statistics.median(xs)
    return f"{mid:.2f}x" if len(xs) == 1 else f"{mid:.2f}x [{min(xs):.2f}-{max(xs):.2f}]"


def _bytes_line(res: dict[str, Any]) -> str:
    o = res["offload"]
    lake, payload, bookie = res["lake_dir_bytes"], res["payload_bytes"], res["bookie_bytes"]
    text = (
        f"Bytes: the lake {lake:,} B (data files {o['lake_bytes']:,} B, the rest Iceberg's "
        f"metadata and catalog); the entries' payloads as the ledgers' metadata records them "
        f"{payload:,} B ({lake / payload:.2f}x); "
    )
    if not bookie:
        return text + "one bookie's entry logs and index: not flushed within the wait."
    return text + (
        f"one bookie's entry logs and index grew {bookie:,} B with the same records "
        f"(**{lake / bookie:.2f}x**, target <= 0.5x)."
    )


def _row(label: str, m: dict[str, float] | None, records: int, ratio: str, target: str) -> str:
    if m is None:
        return f"| {label} | — | — | — | — | — | {ratio} | {target} |"
    per = [f"{m[k] / records * 1e6:.1f}" for k in ("own_cpu", "bookie_cpu", "spark_cpu")]
    return (
        f"| {label} | {m['seconds']:.2f} | {records / m['seconds']:,.0f} | {' | '.join(per)} "
        f"| {ratio} | {target} |"
    )


def report(res: dict[str, Any], args: argparse.Namespace) -> str:
    records: int = args.records
    today = datetime.date.today().isoformat()
    ls, le = res["load_start"], res["load_end"]
    lines = [
        f"## Lake: {records:,} order events (`bench/lake.py`, {today})",
        "",
        f"`python bench/lake.py --records {records} --runs {args.runs}` on "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"3 bookie processes (E=Qw=3 Qa=2, nice {res['nice'][0]}), sqlite metadata, a file:// "
        f"lake; {res['offload']['ledgers']} ledgers offloaded. Load average "
        f"{ls[0]:.1f} / {ls[1]:.1f} / {ls[2]:.1f} at start, {le[0]:.1f} / {le[1]:.1f} / "
        f"{le[2]:.1f} at end. Writing a log took {max(res['fill_s']):.1f} s. CPU is µs per "
        "record: this process (reader, offloader and its threads), the bookies, Spark.",
        "",
        "| measure | seconds | records/s | own µs | bookies µs | Spark µs | ratio | target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    plain, off = res["plain"], res["offload_m"]
    r_off = plain["seconds"] / off["seconds"]
    lines += [
        _row("plain reader, bookies, before the offload", plain, records, "", ""),
        _row("`log.offload()`, the same ledgers", off, records, f"{r_off:.2f}x", ">= 0.8x"),
    ]
    ratios: dict[str, list[float]] = {"read": [], "spark": []}
    for n, row in enumerate(res["rounds"], 1):
        r_read = row["read_bookies"]["seconds"] / row["read_lake"]["seconds"]
        ratios["read"].append(r_read)
        lines += [
            _row(
                f"{n}: plain reader, bookies (the other log)", row["read_bookies"], records, "", ""
            ),
            _row(f"{n}: plain reader, lake", row["read_lake"], records, f"{r_read:.2f}x", ">= 1x"),
        ]
        if "spark_bookies" in row:
            sb, sl = row["spark_bookies"], row["spark_lake"]
            lines.append(_row(f"{n}: Spark filtered count, bookies", sb, records, "", ""))
            if sl is None:
                ratio = "not available yet"
            else:
                ratios["spark"].append(sb["seconds"] / sl["seconds"])
                ratio = f"{ratios['spark'][-1]:.2f}x"
            lines.append(_row(f"{n}: Spark filtered count, lake", sl, records, ratio, ">= 3x"))
    spark = _med(ratios["spark"]) if ratios["spark"] else "not available yet"
    lines += [
        "",
        f"Offload {r_off:.2f}x the plain reader's rate over the same ledgers (target >= 0.8x); "
        f"over {len(res['rounds'])} round(s), lake reads {_med(ratios['read'])} the bookies' "
        f"(>= 1x); Spark count with a 10 % timestamp filter, lake against bookies: {spark} "
        "(>= 3x).",
        _bytes_line(res),
    ]
    for what, text in res["profiles"].items():
        lines += ["", f"Profile of this process, {what} (cProfile, by own time):", "", "```"]
        lines += [line for line in text.strip().splitlines() if line.strip()][:24]
        lines.append("```")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None, help="where the bookies and the lake live")
    parser.add_argument("--no-spark", dest="spark", action="store_false")
    parser.add_argument(
        "--profile", action="store_true", help="profile one more offload and lake read"
    )
    parser.add_argument("--no-append", dest="append", action="store_false")
    args = parser.parse_args()
    if args.records < 100 or args.runs < 1:
        parser.error("--records must be >= 100 and --runs >= 1")
    logging.basicConfig(level=logging.WARNING)
    text = report(run(args), args)
    print(text)
    if args.append:
        with DOCS.open("a") as out:
            out.write("\n" + text)


if __name__ == "__main__":
    main()
