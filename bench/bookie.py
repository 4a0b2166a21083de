"""Benchmark one bookie: adds/s, MiB/s and low-load latency, beside this machine's limits.

One ``walkit-bookie`` process (journal and entry logs on the disk under ``--dir``), one client
connection from this process with many adds in flight, entries of 100 B, 1 KiB and 64 KiB.
The disk and loopback limits are measured in the same run (``bench/_limits.py``) and every
figure is also given as a ratio of them. Figures are medians of ``--runs`` runs.

    python bench/bookie.py [--runs 3] [--seconds 4] [--dir DIR] [--no-append]

Appends a dated section to docs/benchmarks.md unless ``--no-append``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._limits import measure_all
from walkit._core.digest import DigestManager, master_key
from walkit._core.types import BookieId
from walkit._core.wire import (
    AddRequest,
    FrameDecoder,
    decode_message,
    encode_frame,
)

KEY = master_key(b"bench")
SIZES = (100, 1024, 64 * 1024)
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def start_bookie(data: Path) -> tuple[subprocess.Popen[str], BookieId]:
    args = [
        sys.executable,
        "-m",
        "walkit_bookie.cli",
        "--data-dir",
        str(data / "journal"),
        "--data-dir",
        str(data / "ledgers"),
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise RuntimeError(f"bookie did not start: {line!r}")
    return proc, BookieId.parse(line.rsplit(" ", 1)[1].strip())


def frames_for(ledger_id: int, size: int, count: int) -> list[bytes]:
    dm = DigestManager(ledger_id, "crc32c", b"bench")
    payload = os.urandom(size)
    return [
        encode_frame(AddRequest(i + 1, ledger_id, i, KEY, dm.encode(i, i - 1, 0, payload)))
        for i in range(count)
    ]


# An OK AddResponse frame is 32 bytes: u32 length 28 | u8 version | u8 type 2 | u64 request
# id | i16 status | u64 ledger | i64 entry. The client checks every answer with one
# iter_unpack over whole frames (cheap), and decodes anything else with the codec to report it.
_ANSWER = struct.Struct(">IBBQhQq")


def _check_answers(buf: bytearray) -> int:
    """Consume whole add answers from ``buf``; return how many were OK (raise on any other)."""
    whole = len(buf) - len(buf) % _ANSWER.size
    n = 0
    for length, version, mtype, _rid, status, _lid, _eid in _ANSWER.iter_unpack(
        memoryview(buf)[:whole]
    ):
        if length != 28 or mtype != 2 or status != 0 or version != 1:
            decoder = FrameDecoder()
            decoder.feed(buf[n * _ANSWER.size :])
            body = decoder.next_frame()
            msg = decode_message(body) if body else None
            raise RuntimeError(f"add failed: {msg}")
        n += 1
    del buf[:whole]
    return n


async def _receive_answers(stream: trio.SocketStream, count: int, on_answers: Any = None) -> None:
    buf = bytearray()
    got = 0
    while got < count:
        data = await stream.receive_some(1 << 20)
        if not data:
            raise ConnectionError("bookie closed the connection")
        buf += data
        n = _check_answers(buf)
        got += n
        if on_answers is not None and n:
            on_answers(n)


async def throughput(
    bookie: BookieId, ledger_id: int, size: int, seconds: float
) -> dict[str, float]:
    """Many adds in flight on one connection for about ``seconds``."""
    window = max(16, min(4000, (16 << 20) // (size + 64)))
    # Enough frames for the run, within ~1 GiB (the run ends early if they run out).
    count = min(int(seconds * 100_000), (1 << 30) // (size + 100))
    frames = frames_for(ledger_id, size, count)  # built before the clock starts
    stream = await trio.open_tcp_stream(bookie.host, bookie.port)
    in_flight = 0
    done = 0
    room = trio.Event()

    def on_answers(n: int) -> None:
        nonlocal in_flight, done, room
        in_flight -= n
        done += n
        room.set()

    start = time.perf_counter()
    deadline = start + seconds
    sent = 0
    async with trio.open_nursery() as nursery:
        # The answer count is unknown until we stop sending; read until we saw all of them.
        async def reader() -> None:
            await _receive_answers(stream, 1 << 62, on_answers)

        nursery.start_soon(reader)
        step = max(1, window // 8)
        while sent < count and time.perf_counter() < deadline:
            if in_flight + step > window:
                room = trio.Event()
                await room.wait()
                continue
            chunk = frames[sent : sent + step]
            in_flight += len(chunk)
            sent += len(chunk)
            if size >= 16 * 1024:
                for frame in chunk:  # big frames: no join (a fresh multi-MiB copy costs more)
                    await stream.send_all(frame)
            else:
                await stream.send_all(b"".join(chunk))
        while done < sent:
            room = trio.Event()
            await room.wait()
        elapsed = time.perf_counter() - start
        nursery.cancel_scope.cancel()
    await stream.aclose()
    return {
        "adds_per_s": done / elapsed,
        "mib_per_s": done * size / elapsed / (1 << 20),
        "adds": done,
    }


async def latency(bookie: BookieId, ledger_id: int, size: int, count: int) -> float:
    """p50 of one add at a time (low load), in ms."""
    frames = frames_for(ledger_id, size, count)
    stream = await trio.open_tcp_stream(bookie.host, bookie.port)
    lat = []
    for frame in frames:
        t0 = time.perf_counter()
        await stream.send_all(frame)
        await _receive_answers(stream, 1)
        lat.append(time.perf_counter() - t0)
    await stream.aclose()
    return statistics.median(lat) * 1e3


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_once(tmp: Path, seconds: float) -> dict[str, Any]:
    data = tmp / "bookie"
    proc, bookie = start_bookie(data)
    try:
        out: dict[str, Any] = {}

        async def main() -> None:
            for i, size in enumerate(SIZES):
                before = _cpu_seconds(proc.pid)
                out[size] = await throughput(bookie, 100 + i, size, seconds)
                used = _cpu_seconds(proc.pid) - before
                out[size]["bookie_cpu_us"] = used / out[size]["adds"] * 1e6
            out["p50_ms"] = await latency(bookie, 200, 1024, 2000)

        trio.run(main)
        return out
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--dir", default=None, help="where the bookie's data goes")
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp_name:
        tmp = Path(tmp_name)
        print("measuring the machine's limits ...", flush=True)
        limits = measure_all(tmp)
        runs = []
        for r in range(args.runs):
            print(f"run {r + 1}/{args.runs} ...", flush=True)
            runs.append(run_once(tmp / f"run{r}", args.seconds))
            limits_again = measure_all(tmp) if r == args.runs - 1 else None
    if limits_again:
        for k in limits:
            limits[k] = statistics.median([limits[k], limits_again[k]])
    med = {
        size: {
            k: statistics.median(run[size][k] for run in runs)
            for k in ("adds_per_s", "mib_per_s", "bookie_cpu_us")
        }
        for size in SIZES
    }
    p50 = statistics.median(run["p50_ms"] for run in runs)
    report(limits, med, p50, args, os.getloadavg()[0])


def report(
    limits: dict[str, float], med: dict[int, dict[str, float]], p50: float, args: Any, load: float
) -> None:
    sync_rate = limits["fdatasync_4k_per_s"]
    sync_p50 = limits["fdatasync_4k_p50_ms"]
    bandwidth = limits["fsync_1m_mib_s"]
    target_p50 = 2 * sync_p50 + 0.2
    rows = [
        "| entry size | adds/s | MiB/s | adds/s ÷ fdatasync/s | MiB/s ÷ disk MiB/s | "
        "bookie CPU µs/add | target |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    targets = {100: "", 1024: ">= 40,000 adds/s", 64 * 1024: ">= 250 MiB/s"}
    for size in SIZES:
        m = med[size]
        label = f"{size} B" if size < 1024 else f"{size // 1024} KiB"
        rows.append(
            f"| {label} | {m['adds_per_s']:,.0f} | {m['mib_per_s']:,.1f} | "
            f"{m['adds_per_s'] / sync_rate:,.1f} x | {m['mib_per_s'] / bandwidth:.2f} | "
            f"{m['bookie_cpu_us']:.1f} | {targets[size]} |"
        )
    lat_rows = [
        "| measure | value |",
        "| --- | ---: |",
        f"| add p50 at low load (1 KiB, one at a time) | {p50:.3f} ms |",
        f"| fdatasync p50 (4 KiB) | {sync_p50:.3f} ms |",
        f"| target: 2 x fdatasync p50 + 0.2 ms | {target_p50:.3f} ms |",
        f"| ratio p50 / fdatasync p50 | {p50 / sync_p50:.2f} |",
    ]
    lim_rows = [
        "| limit (same run) | value |",
        "| --- | ---: |",
        f"| 4 KiB write + fdatasync | {sync_rate:,.0f}/s, p50 {sync_p50:.3f} ms |",
        f"| 1 MiB write + fsync | {bandwidth:,.0f} MiB/s |",
        f"| loopback round trips, one at a time (trio, 2 processes) | "
        f"{limits['loopback_rtt_per_s']:,.0f}/s, p50 {limits['loopback_rtt_p50_ms']:.3f} ms |",
    ]
    text = "\n".join([*rows, "", *lat_rows, "", *lim_rows])
    print(text)
    if args.no_append:
        return
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = (
        f"\n## Bookie: one bookie, one connection ({now})\n\n"
        f"`python bench/bookie.py --runs {args.runs} --seconds {args.seconds:g}`; "
        f"medians of {args.runs} runs; machine: {os.cpu_count()} cores, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}; "
        "journal and entry logs on the same disk as the limits below; many adds in flight on "
        "one connection (the client in the benchmark process), low-load latency one add at a "
        f"time; load average {load:.1f} at the end (other work shares the 2 cores and the "
        "disk). Bookie CPU is the bookie process's user + system time per add.\n\n" + text + "\n"
    )
    if not DOCS.exists():
        DOCS.write_text("# Benchmarks\n\nFigures measured on this machine; see bench/.\n")
    with DOCS.open("a") as f:
        f.write(section)
    print(f"appended to {DOCS}")


if __name__ == "__main__":
    main()
