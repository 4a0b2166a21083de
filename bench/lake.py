"""Benchmark the lake: offloading closed ledgers to Parquet, and reading them back.

Two logs of the same records (3 bookie processes, E=Qw=3 Qa=2, sqlite metadata, about ten
ledgers each, record sets of up to 64 KiB): order events of 100-200 B, JSON with a few fields
of varied values, each record with its order's key and its event time (a timestamp per record,
spread over one day). One log is offloaded to a ``file://`` lake with
``offload_deletion_lag=0``, so its bookies' copy is deleted (the last two ledgers, which a
takeover fences, are tiny ones written after); the other stays on the bookies. In one run:

1. **offload rate**: records/s of ``await log.offload()`` over the closed ledgers, against
   a plain ``log.reader(follow=False)`` over the same ledgers, on the bookies, just before
   (target >= 0.8x);
2. **lake reads**: the plain reader over the offloaded log (its ledgers read from the lake)
   against the same reader over the other log (from the bookies), alternating (>= 1x);
3. **Spark**: ``count()`` with a filter on ``timestamp`` that keeps 10 % of the rows, over the
   offloaded log against the other (>= 3x); a Spark source that reads only the bookies
   refuses a log whose ledgers live only in the lake, and the figure says "not available";
4. **bytes**: the lake's data files against one bookie's copy of the same records (<= 0.5x):
   the growth of one bookie's entry logs and index while the log was written, and the entries'
   payload bytes as the log's metadata records them.

Each figure comes with the CPU spent meanwhile: this process (the reader, the offloader and
its pyarrow threads), the three bookies, Spark's JVM and Python workers. The offload is one
pass per log, so each run writes a fresh log to offload; ``--runs N`` makes N of them and
alternates the reads, and the report gives medians with their ranges. Load average at start
and end; the bookies run at this process's niceness (``nice -n 10 python bench/lake.py``
niceness them all alike). ``--profile`` prints where this process's time goes (cProfile) in
one more offload and one more lake read.

    python bench/lake.py [--records 2000000] [--runs 3] [--no-spark] [--profile] [--no-append]

Appends a dated section to docs/benchmarks.md unless ``--no-append``.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import io
import json
import logging
import os
import platform
import pstats
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ledger import start_bookies  # noqa: E402
from bench.spark import cpu_seconds, spark_cpu, spark_session  # noqa: E402
from walkit import Client, Log, Record  # noqa: E402
from walkit.errors import ConfigurationError  # noqa: E402

DOCS: Final = ROOT / "docs" / "benchmarks.md"
BOOKIES_LOG: Final = "bench-bookies"
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
    """The records, batch by batch, the same on every call: order events of 100-200 B with
    the order's key and the event's time."""
    rng = random.Random(20261102)
    step = max(1, SPAN_MS // records)
    first = DAY_MS + 3600 * 1000
    for start in range(0, records, BATCH):
        batch = []
        for i in range(start, min(records, start + BATCH)):
            order = rng.randrange(10_000_000)
            body: dict[str, Any] = {
                "order": f"o-{order:08d}",
                "status": _STATUSES[rng.randrange(len(_STATUSES))],
                "customer": f"c-{rng.randrange(1_000_000):06d}",
                "sku": f"SKU-{rng.randrange(50_000):05d}-{'SMLX'[rng.randrange(4)]}",
                "qty": rng.randrange(1, 12),
                "price": round(rng.uniform(1, 900), 2),
                "currency": _CURRENCIES[rng.randrange(len(_CURRENCIES))],
                "region": _REGIONS[rng.randrange(len(_REGIONS))],
            }
            if rng.random() < 0.4:
                body["coupon"] = f"SAVE{rng.randrange(5, 50)}"
            if rng.random() < 0.3:
                body["note"] = "gift wrap" if rng.random() < 0.5 else "leave at the door"
            payload = json.dumps(body, separators=(",", ":")).encode()
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
    return {"offload_to": f"file://{lake}", "offload_deletion_lag": 0.0}


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


async def fill(url: str, name: str, records: int, options: dict[str, Any]) -> float:
    """Write the records, then two one-record ledgers (the last two, which stay on the
    bookies); seconds it took to write the records."""
    async with Client.connect(url, wall_clock=time.time) as client:
        log = await Log.open(
            client,
            name,
            ensemble_size=3,
            write_quorum=3,
            ack_quorum=2,
            roll_bytes=roll_bytes(records),
            **options,
        )
        t0 = time.perf_counter()
        async with log.writer() as w:
            for batch in events(records):
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
    res: dict[str, Any] = {"load_start": os.getloadavg(), "runs": [], "profiles": {}}
    with tempfile.TemporaryDirectory(prefix="lake-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        url = f"sqlite:///{root / 'metadata.db'}?session_timeout=30"
        procs = start_bookies(root, url, 3, ("--checkpoint-interval", str(CHECKPOINT_S)))
        pids = [p.pid for p in procs]
        res["nice"] = [os.getpriority(os.PRIO_PROCESS, pid) for pid in pids]
        meter = Meter(pids)
        spark = spark_session() if args.spark else None
        try:
            before = tree_bytes(root / "bookie-0")
            res["fill_bookies_s"] = trio.run(fill, url, BOOKIES_LOG, records, {})
            res["payload_bytes"] = trio.run(payload_bytes, url, BOOKIES_LOG)
            res["bookie_bytes"] = one_bookie_copy(root / "bookie-0", before, res["payload_bytes"])
            if spark is not None:
                spark_count(spark, url, BOOKIES_LOG, records)  # start the Python workers
            for n in range(args.runs):
                name = f"bench-lake-{n}"
                opts = lake_options(root / f"lake-{n}")
                before = tree_bytes(root / "bookie-0")
                row: dict[str, Any] = {"fill_s": trio.run(fill, url, name, records, opts)}
                one_bookie_copy(root / "bookie-0", before, res["payload_bytes"])  # (flushed)

                # The plain reader over the ledgers about to be offloaded, on the bookies.
                def plain(name: str = name) -> int:
                    return trio.run(read, url, name, {})

                def lake(name: str = name, opts: dict[str, Any] = opts) -> dict[str, Any]:
                    return trio.run(offload, url, name, opts)

                row["count_before"], row["plain"] = meter(plain)
                row["offload"], row["offload_m"] = meter(lake)
                row["lake_dir_bytes"] = tree_bytes(root / f"lake-{n}")
                # Alternating which goes first, so that a drift of the host falls on both.
                pair = [("lake", name, opts), ("bookies", BOOKIES_LOG, {})]
                for label, log_name, o in pair if n % 2 == 0 else pair[::-1]:
                    row[f"count_{label}"], row[f"read_{label}"] = meter(
                        lambda log_name=log_name, o=o: trio.run(read, url, log_name, o)
                    )
                if spark is not None:
                    for label, log_name, _o in pair if n % 2 == 1 else pair[::-1]:
                        try:
                            row[f"rows_{label}"], row[f"spark_{label}"] = meter(
                                lambda log_name=log_name: spark_count(spark, url, log_name, records)
                            )
                        except Exception as exc:  # Py4J wraps the source's error
                            if "lives only in the lake" not in str(exc) and not isinstance(
                                exc, ConfigurationError
                            ):
                                raise
                            row[f"spark_{label}"] = None
                res["runs"].append(row)
            if args.profile:
                name = "bench-lake-profile"
                opts = lake_options(root / "lake-profile")
                trio.run(fill, url, name, records, opts)
                res["profiles"]["offload"] = profile(lambda: trio.run(offload, url, name, opts))
                res["profiles"]["lake read"] = profile(lambda: trio.run(read, url, name, opts))
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
    for row in res["runs"]:
        expected = records + 2  # and the two marker records
        assert row["count_before"] == row["count_lake"] == row["count_bookies"] == expected, row
        # The first marker's ledger is offloaded too; the last, current one never is.
        assert row["offload"]["records"] == records + 1, row["offload"]
        assert row["offload"]["deleted"] == row["offload"]["listed"] - 2, row["offload"]
        for label in ("lake", "bookies"):
            if row.get(f"spark_{label}") is not None:
                assert row[f"rows_{label}"] == selected_rows(records), row
    return res


def _med(xs: list[float]) -> str:
    mid = statistics.median(xs)
    return f"{mid:.2f}x" if len(xs) == 1 else f"{mid:.2f}x [{min(xs):.2f}-{max(xs):.2f}]"


def _rate(records: int, m: dict[str, float]) -> str:
    return f"{records / m['seconds']:,.0f}"


def _cpu(records: int, m: dict[str, float], who: str) -> str:
    return f"{m[who] / records * 1e6:.1f}"


def _bytes_line(res: dict[str, Any], last: dict[str, Any]) -> str:
    o = last["offload"]
    lake, payload, bookie = last["lake_dir_bytes"], res["payload_bytes"], res["bookie_bytes"]
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


def report(res: dict[str, Any], args: argparse.Namespace) -> str:
    records: int = args.records
    runs = res["runs"]
    today = datetime.date.today().isoformat()
    ls, le = res["load_start"], res["load_end"]
    lines = [
        f"## Lake: {records:,} order events (`bench/lake.py`, {today})",
        "",
        f"`python bench/lake.py --records {records} --runs {args.runs}` on "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"3 bookie processes (E=Qw=3 Qa=2, nice {res['nice'][0]}), sqlite metadata, a file:// "
        f"lake; {runs[0]['offload']['ledgers']} ledgers offloaded per log. Load average "
        f"{ls[0]:.1f} / {ls[1]:.1f} / {ls[2]:.1f} at start, {le[0]:.1f} / {le[1]:.1f} / "
        f"{le[2]:.1f} at end. Writing a log took {statistics.median(r['fill_s'] for r in runs):.1f}"
        " s. CPU is µs per record: this process (reader, offloader), the bookies, Spark.",
        "",
        "| run | measure | seconds | records/s | own µs | bookies µs | Spark µs | ratio | target |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    ratios: dict[str, list[float]] = {"offload": [], "read": [], "spark": []}
    for n, row in enumerate(runs, 1):
        off, plain = row["offload_m"], row["plain"]
        r_off = plain["seconds"] / off["seconds"]
        r_read = row["read_bookies"]["seconds"] / row["read_lake"]["seconds"]
        ratios["offload"].append(r_off)
        ratios["read"].append(r_read)
        cells = [
            ("plain reader, bookies (before offload)", plain, "", ""),
            ("`log.offload()`", off, f"{r_off:.2f}x", ">= 0.8x"),
            ("plain reader, bookies (other log)", row["read_bookies"], "", ""),
            ("plain reader, lake", row["read_lake"], f"{r_read:.2f}x", ">= 1x"),
        ]
        if "spark_bookies" in row:
            sb, sl = row["spark_bookies"], row["spark_lake"]
            cells.append(("Spark filtered count, bookies", sb, "", ""))
            if sl is None:
                cells.append(("Spark filtered count, lake", None, "not available yet", ">= 3x"))
            else:
                r_spark = sb["seconds"] / sl["seconds"]
                ratios["spark"].append(r_spark)
                cells.append(("Spark filtered count, lake", sl, f"{r_spark:.2f}x", ">= 3x"))
        for label, m, ratio, target in cells:
            if m is None:
                lines.append(f"| {n} | {label} | — | — | — | — | — | {ratio} | {target} |")
                continue
            lines.append(
                f"| {n} | {label} | {m['seconds']:.2f} | {_rate(records, m)} | "
                f"{_cpu(records, m, 'own_cpu')} | {_cpu(records, m, 'bookie_cpu')} | "
                f"{_cpu(records, m, 'spark_cpu')} | {ratio} | {target} |"
            )
    last = runs[-1]
    lines += [
        "",
        f"Medians over {len(runs)} run(s): offload {_med(ratios['offload'])} the plain "
        f"reader's rate (target >= 0.8x); lake reads {_med(ratios['read'])} the bookies' "
        "(>= 1x); Spark count with a 10 % timestamp filter "
        + (_med(ratios["spark"]) if ratios["spark"] else "not available yet")
        + " (>= 3x).",
        _bytes_line(res, last),
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
