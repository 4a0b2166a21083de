"""Benchmark the log: record sets against one record per entry, beside etcd and the disk.

Three bookie processes, E=Qw=3 Qa=2, records of 100 B and 1 KiB:

- ``1 in flight``: one task, one ``append`` at a time (p50/p99 per record);
- ``64 tasks``: 64 tasks each awaiting its own ``append`` (adaptive batching packs them);
- ``append_batch``: one task appending batches of 1,024 records back to back;
- ``tail reader``: a reader reading the whole log back (records/s);

each with the CPU it costs per record: this process (the client) and the three bookies. The
same modes run with ``batch_bytes=1`` too (every record alone in its entry, as before record
sets), and etcd 3 members (HTTP gateway, fsync) take the same 1 and 64 in-flight load when
``etcd`` is installed. The disk's 4 KiB fdatasync p50 is measured in the same run.

    python bench/log.py [--seconds 3] [--sizes 100,1024] [--no-append] [--no-etcd] [--plot]

Appends a dated section to docs/benchmarks.md unless ``--no-append``; ``--plot`` also draws
throughput against p99 latency per mode as ``docs/log-throughput.svg`` (matplotlib: the
``bench`` extra).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench._limits import fdatasync_4k  # noqa: E402
from bench.ledger import _cpu_seconds, _percentile, start_bookies  # noqa: E402
from walkit import Client, Log  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
SVG = ROOT / "docs" / "log-throughput.svg"
TASKS = 64
BATCH = 1024


async def _timed(
    seconds: float, tasks: int, one: Callable[[], Awaitable[int]]
) -> tuple[int, float, list[float]]:
    """Run ``one`` (returns records done) from ``tasks`` tasks for ``seconds``."""
    count = 0
    lat: list[float] = []
    stop_at = time.perf_counter() + seconds

    async def loop() -> None:
        nonlocal count
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            done = await one()
            lat.append(time.perf_counter() - t0)
            count += done  # after the await: ``count += await`` would lose the others' counts

    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for _ in range(tasks):
            nursery.start_soon(loop)
    return count, time.perf_counter() - t0, lat


async def measure_log(
    url: str, name: str, size: int, seconds: float, bookies: list[int], **options: Any
) -> dict[str, dict[str, float]]:
    data = os.urandom(size)
    out: dict[str, dict[str, float]] = {}
    async with Client.connect(url) as client:
        log = await Log.open(client, name, ensemble_size=3, write_quorum=3, ack_quorum=2, **options)
        async with log.writer() as w:
            await w.append_batch([data] * 64)  # warm up connections

            async def single() -> int:
                await w.append(data)
                return 1

            async def batch() -> int:
                await w.append_batch([data] * BATCH)
                return BATCH

            for mode, tasks, one in (
                ("1 in flight", 1, single),
                (f"{TASKS} tasks", TASKS, single),
                (f"append_batch {BATCH}", 1, batch),
            ):
                cpu0, bk0 = time.process_time(), sum(_cpu_seconds(p) for p in bookies)
                count, elapsed, lat = await _timed(seconds, tasks, one)
                cpu1, bk1 = time.process_time(), sum(_cpu_seconds(p) for p in bookies)
                out[mode] = {
                    "records_per_s": count / elapsed,
                    "p50_ms": _percentile(lat, 0.5) * 1e3,
                    "p99_ms": _percentile(lat, 0.99) * 1e3,
                    "client_us": (cpu1 - cpu0) / count * 1e6,
                    "bookies_us": (bk1 - bk0) / count * 1e6,
                }
        cpu0, bk0 = time.process_time(), sum(_cpu_seconds(p) for p in bookies)
        t0 = time.perf_counter()
        count = 0
        async for _record in log.reader("earliest", follow=False):
            count += 1
        elapsed = time.perf_counter() - t0
        cpu1, bk1 = time.process_time(), sum(_cpu_seconds(p) for p in bookies)
        out["tail reader"] = {
            "records_per_s": count / elapsed,
            "p50_ms": float("nan"),
            "p99_ms": float("nan"),
            "client_us": (cpu1 - cpu0) / count * 1e6,
            "bookies_us": (bk1 - bk0) / count * 1e6,
        }
    return out


def measure_etcd(root: Path, seconds: float) -> dict[str, dict[str, float]]:
    from bench.kv import _cpu, etcd_cluster, etcd_put, load

    out: dict[str, dict[str, float]] = {}
    with etcd_cluster(root) as (addresses, pids):
        for mode, clients in (("1 in flight", 1), (f"{TASKS} tasks", TASKS)):
            cpu0, members0 = time.process_time(), _cpu(pids)
            m = trio.run(load, addresses[0], etcd_put, 1.0, seconds, clients)
            done = max(1.0, m["all_ok"])
            out[mode] = {
                "records_per_s": m["puts_per_s"],
                "p50_ms": m["p50_ms"],
                "p99_ms": m["p99_ms"],
                "client_us": (time.process_time() - cpu0) / done * 1e6,
                "bookies_us": (_cpu(pids) - members0) / done * 1e6,
            }
    return out


Modes = dict[str, dict[str, float]]  # mode -> figures


@attrs.define
class Results:
    disk: dict[str, float]  # fdatasync_4k's figures, measured in the same run
    runs: dict[tuple[str, int], Modes] = attrs.Factory(dict)  # (label, record size) -> modes


def run(args: argparse.Namespace) -> Results:
    with tempfile.TemporaryDirectory(prefix="log-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        results = Results(disk=fdatasync_4k(root))
        url = f"sqlite:///{root / 'metadata.db'}"
        procs = start_bookies(root, url, 3)
        try:
            pids = [p.pid for p in procs]
            for size in args.sizes:
                for label, options in (
                    ("record sets", {}),
                    ("one record per entry", {"batch_bytes": 1}),
                ):
                    if label != "record sets" and not args.baseline:
                        continue
                    name = f"bench-{size}-{options.get('batch_bytes', 'rs')}"
                    results.runs[(label, size)] = trio.run(
                        functools.partial(
                            measure_log, url, name, size, args.seconds, pids, **options
                        )
                    )
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=10)
        if args.etcd and shutil.which("etcd"):
            results.runs[("etcd 3.x", 100)] = measure_etcd(root, args.seconds)
    return results


def report(results: Results, args: argparse.Namespace) -> str:
    disk = results.disk
    sync = disk["fdatasync_4k_p50_ms"]
    lines = [
        f"## Log throughput: record sets ({datetime.date.today()}, bench/log.py)",
        "",
        f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}. "
        f"3 bookie processes, E=Qw=3 Qa=2, sqlite metadata, {args.seconds:g} s per mode, one "
        f"run. Disk in the same run: 4 KiB fdatasync p50 {sync:.2f} ms "
        f"({disk['fdatasync_4k_per_s']:.0f}/s). CPU is µs per record: the client process, and "
        "the three bookies together (for etcd: its three members).",
        "",
        "| records | size | mode | records/s | p50 ms | p99 ms | client µs | bookies µs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (label, size), modes in results.runs.items():
        for mode, m in modes.items():
            p50 = "—" if m["p50_ms"] != m["p50_ms"] else f"{m['p50_ms']:.2f}"
            p99 = "—" if m["p99_ms"] != m["p99_ms"] else f"{m['p99_ms']:.2f}"
            lines.append(
                f"| {label} | {size} B | {mode} | {m['records_per_s']:,.0f} | {p50} | {p99} | "
                f"{m['client_us']:.1f} | {m['bookies_us']:.1f} |"
            )
    rs = results.runs.get(("record sets", 100))
    if rs is not None:
        lines += [
            "",
            "Targets (issue 12), 100 B records: append_batch "
            f"{rs[f'append_batch {BATCH}']['records_per_s']:,.0f}/s (target 150,000); "
            f"{TASKS} tasks {rs[f'{TASKS} tasks']['records_per_s']:,.0f}/s (target 60,000); "
            f"1 in flight p50 {rs['1 in flight']['p50_ms']:.2f} ms (target "
            f"{2 * sync + 0.3:.2f} ms = 2 x fdatasync p50 + 0.3); tail reader "
            f"{rs['tail reader']['records_per_s']:,.0f}/s (target 500,000).",
        ]
    if args.plot:
        lines += ["", f"![throughput against p99 latency]({SVG.name})"]
    return "\n".join(lines) + "\n"


def plot(results: Results) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for (label, size), modes in results.runs.items():
        xs = [m["records_per_s"] for m in modes.values() if m["p99_ms"] == m["p99_ms"]]
        ys = [m["p99_ms"] for m in modes.values() if m["p99_ms"] == m["p99_ms"]]
        names = [k for k, m in modes.items() if m["p99_ms"] == m["p99_ms"]]
        ax.plot(xs, ys, marker="o", label=f"{label}, {size} B")
        for x, y, n in zip(xs, ys, names, strict=True):
            ax.annotate(n, (x, y), fontsize=7, textcoords="offset points", xytext=(4, 4))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("records/s")
    ax.set_ylabel("p99 latency (ms)")
    ax.set_title("walkit log: throughput against p99 latency (3 bookies, E=Qw=3 Qa=2)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(SVG)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument(
        "--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[100, 1024]
    )
    parser.add_argument("--dir", default=None, help="where the bookies keep their data")
    parser.add_argument("--no-append", dest="append", action="store_false")
    parser.add_argument("--no-etcd", dest="etcd", action="store_false")
    parser.add_argument(
        "--no-baseline",
        dest="baseline",
        action="store_false",
        help="skip the one-record-per-entry runs",
    )
    parser.add_argument("--plot", action="store_true", help=f"draw {SVG.name} (matplotlib)")
    args = parser.parse_args()
    results = run(args)
    text = report(results, args)
    print(text)
    if args.plot:
        plot(results)
    if args.append:
        with DOCS.open("a") as f:
            f.write("\n" + text)


if __name__ == "__main__":
    main()
