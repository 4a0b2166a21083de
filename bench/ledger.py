"""Benchmark the ledger API: one writer, three bookie processes, beside this machine's limits.

For E=Qw=3 Qa=2 and E=Qw=Qa=1, entries of 100 B, 1 KiB and 64 KiB:

- low load: one task, one ``append`` at a time: p50/p99 latency;
- full load: several tasks each looping ``append_batch``: entries/s, MiB/s, and the p50/p99
  latency of a batch (call to acknowledgement of its last entry);
- the CPU each entry costs the client (user and system time of this process) and the CPU of
  the bookie processes, because on a 2-core machine CPU per entry decides the throughput.

The disk and loopback limits (``bench/_limits.py``) are measured in the same run. Figures are
medians of ``--runs`` runs.

    python bench/ledger.py [--runs 3] [--seconds 3] [--dir DIR] [--no-append] [--quick]

Appends a dated section to docs/benchmarks.md unless ``--no-append``.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import structlog
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from walkit.client import Client

try:
    from bench._limits import measure_all
except ImportError:  # pragma: no cover - the limits module belongs to the bookie bench
    measure_all = None  # type: ignore[assignment]

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
SIZES = (100, 1024, 64 * 1024)
QUORUMS = ((3, 3, 2), (1, 1, 1))
MiB = 1024 * 1024


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_bookies(
    root: Path, url: str, count: int, extra: tuple[str, ...] = ()
) -> list[subprocess.Popen[str]]:
    """``count`` bookie processes, data under ``root``; ``extra``: more of their options."""
    procs: list[subprocess.Popen[str]] = []
    for i in range(count):
        args = [
            sys.executable, "-m", "walkit_bookie.cli",
            "--data-dir", str(root / f"bookie-{i}"),
            "--metadata", url, "--log-level", "warning", *extra,
        ]  # fmt: skip
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "listening on" not in line:
            proc.kill()
            for p in procs:
                p.kill()
            raise RuntimeError(f"bookie did not start: {line!r}")
        procs.append(proc)
    return procs


def shape(size: int) -> tuple[int, int]:
    """(tasks, batch) for full load: a few MiB in flight."""
    if size >= 64 * 1024:
        return 4, 16
    return 4, 256


async def measure(
    url: str,
    quorum: tuple[int, int, int],
    size: int,
    seconds: float,
    bookie_pids: list[int],
) -> dict[str, float]:
    e, qw, qa = quorum
    data = os.urandom(size)
    out: dict[str, float] = {}
    async with Client.connect(url) as client:
        lw = await client.create_ledger(e, qw, qa, password=b"bench")
        tasks, batch = shape(size)
        await lw.append_batch([data] * batch)  # warm up connections
        # Low load: one append at a time.
        lat: list[float] = []
        end = time.perf_counter() + min(seconds, 2.0)
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            await lw.append(data)
            lat.append(time.perf_counter() - t0)
        out["low_p50_ms"] = _percentile(lat, 0.5) * 1e3
        out["low_p99_ms"] = _percentile(lat, 0.99) * 1e3
        # Full load: several tasks, each appending batches back to back.
        count = 0
        batch_lat: list[float] = []
        stop_at = time.perf_counter() + seconds
        payloads = [data] * batch

        async def writer() -> None:
            nonlocal count
            while time.perf_counter() < stop_at:
                t0 = time.perf_counter()
                await lw.append_batch(payloads)
                batch_lat.append(time.perf_counter() - t0)
                count += batch

        bookies0 = [_cpu_seconds(p) for p in bookie_pids]
        times0 = os.times()
        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for _ in range(tasks):
                nursery.start_soon(writer)
        elapsed = time.perf_counter() - t0
        times1 = os.times()
        bookies1 = [_cpu_seconds(p) for p in bookie_pids]
        # Half load: open loop at half the rate just measured; each entry's latency runs from
        # when it was due, so a stall also counts for the entries queued behind it.
        half_rate = count / elapsed / 2
        half_lat = await _open_loop(lw, data, half_rate, min(seconds, 2.0))
        out["half_rate"] = half_rate
        out["half_p50_ms"] = _percentile(half_lat, 0.5) * 1e3
        out["half_p99_ms"] = _percentile(half_lat, 0.99) * 1e3
        await lw.close()
        await client.delete_ledger(lw.id, password=b"bench")
    out["entries_per_s"] = count / elapsed
    out["mib_per_s"] = count * size / elapsed / MiB
    out["full_p50_ms"] = _percentile(batch_lat, 0.5) * 1e3
    out["full_p99_ms"] = _percentile(batch_lat, 0.99) * 1e3
    out["client_user_us"] = (times1.user - times0.user) / count * 1e6
    out["client_sys_us"] = (times1.system - times0.system) / count * 1e6
    out["bookies_cpu_pct"] = (
        sum(b1 - b0 for b0, b1 in zip(bookies0, bookies1, strict=True)) / (elapsed) * 100
    )
    out["in_flight"] = tasks * batch
    return out


async def _open_loop(lw: Any, data: bytes, rate: float, seconds: float) -> list[float]:
    """Entries due at ``rate`` per second for ``seconds``; every 1 ms tick appends the entries
    that fell due as one batch (as an application with a steady stream would). Returns each
    entry's latency from the moment it was due."""
    lat: list[float] = []

    async def batch(dues: list[float]) -> None:
        await lw.append_batch([data] * len(dues))
        done = time.perf_counter()
        lat.extend(done - due for due in dues)

    tick = 0.001
    start = time.perf_counter()
    sent = 0
    async with trio.open_nursery() as nursery:
        while (now := time.perf_counter()) < start + seconds:
            due_count = int((now - start) * rate)
            if due_count > sent:
                nursery.start_soon(batch, [start + k / rate for k in range(sent, due_count)])
                sent = due_count
            await trio.sleep(tick)
    return lat


def run_once(root: Path, seconds: float, sizes: tuple[int, ...]) -> dict[tuple[Any, ...], Any]:
    url = f"sqlite://{root / 'metadata.db'}"
    procs = start_bookies(root, url, 3)
    try:
        results: dict[tuple[Any, ...], Any] = {}
        for quorum in QUORUMS:
            for size in sizes:
                pids = [p.pid for p in procs]
                results[(quorum, size)] = trio.run(measure, url, quorum, size, seconds, pids)
        return results
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def median_of(runs: list[dict[tuple[Any, ...], Any]]) -> dict[tuple[Any, ...], dict[str, float]]:
    out: dict[tuple[Any, ...], dict[str, float]] = {}
    for key in runs[0]:
        out[key] = {field: statistics.median(r[key][field] for r in runs) for field in runs[0][key]}
    return out


def report(
    limits: dict[str, float], med: dict[tuple[Any, ...], dict[str, float]], args: Any
) -> str:
    today = datetime.date.today().isoformat()
    lines = [
        "",
        f"## Ledger API: one writer, 3 bookie processes ({today})",
        "",
        f"`python bench/ledger.py --runs {args.runs} --seconds {args.seconds}` on "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        "sqlite metadata; medians of the runs. One writer task at low load; at full load "
        "4 tasks looping `append_batch` (256 entries, 16 for 64 KiB). Full-load latency is "
        "that of a whole batch. Half load: appends started open-loop at half the full-load "
        "rate (the entries due in each 1 ms tick go as one `append_batch`), each timed from "
        "when it was due. Client CPU is this process's user+system time per entry; "
        "bookies' CPU is the sum over the 3 processes (100% = one core).",
        "",
    ]
    if limits:
        lines += [
            "Limits measured in the same run (`bench/_limits.py`): "
            f"4 KiB write+fdatasync {limits.get('fdatasync_4k_per_s', float('nan')):,.0f}/s "
            f"(p50 {limits.get('fdatasync_4k_p50_ms', float('nan')):.2f} ms), "
            f"1 MiB write+fsync {limits.get('fsync_1m_mib_s', float('nan')):,.0f} MiB/s, "
            f"loopback round trip p50 {limits.get('loopback_rtt_p50_ms', float('nan')):.3f} ms "
            f"({limits.get('loopback_rtt_per_s', float('nan')):,.0f}/s one at a time, "
            f"{limits.get('loopback_pipelined_per_s', float('nan')):,.0f}/s pipelined).",
            "",
        ]
    lines += [
        "| E/Qw/Qa | entry | entries/s | MiB/s | low p50 ms | low p99 ms | full p50 ms "
        "| full p99 ms | half-load p50 / p99 ms | client µs/entry (user+sys) | bookies CPU % |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (quorum, size), m in med.items():
        label = f"{size // 1024} KiB" if size >= 1024 else f"{size} B"
        lines.append(
            f"| {quorum[0]}/{quorum[1]}/{quorum[2]} | {label} | {m['entries_per_s']:,.0f} "
            f"| {m['mib_per_s']:.1f} | {m['low_p50_ms']:.2f} | {m['low_p99_ms']:.2f} "
            f"| {m['full_p50_ms']:.1f} | {m['full_p99_ms']:.1f} "
            f"| {m['half_p50_ms']:.2f} / {m['half_p99_ms']:.2f} "
            f"| {m['client_user_us']:.1f}+{m['client_sys_us']:.1f} | {m['bookies_cpu_pct']:.0f} |"
        )
    if limits:
        sync = limits.get("fdatasync_4k_p50_ms")
        rtt = limits.get("loopback_rtt_p50_ms")
        fsync_mib = limits.get("fsync_1m_mib_s")
        lines.append("")
        for (quorum, size), m in med.items():
            if quorum != (3, 3, 2) or size not in (1024, 64 * 1024):
                continue
            parts = []
            if sync and rtt:
                parts.append(
                    f"low-load p50 = {m['low_p50_ms'] / (sync + rtt):.1f}x (fdatasync p50 + "
                    "loopback round trip)"
                )
            if fsync_mib and size == 64 * 1024:
                parts.append(f"{m['mib_per_s'] / fsync_mib:.2f}x the disk's 1 MiB fsync rate")
            label = f"{size // 1024} KiB"
            lines.append(f"- 3/3/2, {label}: " + "; ".join(parts) + ".")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--dir", default=None, help="where bookies keep their data")
    parser.add_argument("--no-append", action="store_true", help="do not touch docs/")
    parser.add_argument("--quick", action="store_true", help="1 KiB only, one run")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    sizes = (1024,) if args.quick else SIZES
    if args.quick:
        args.runs = 1
    limits: dict[str, float] = {}
    if measure_all is not None:
        limits = measure_all(args.dir)
    runs = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="walkit-bench-") as tmp:
            runs.append(run_once(Path(tmp), args.seconds, sizes))
        print(f"run {i + 1}/{args.runs} done", file=sys.stderr)
    text = report(limits, median_of(runs), args)
    print(text)
    if not args.no_append:
        if not DOCS.exists():
            DOCS.write_text("# Benchmarks\n")
        with DOCS.open("a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
