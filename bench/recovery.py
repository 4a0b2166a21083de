"""Benchmark the failure paths: ledger recovery, and the stall of an ensemble change.

1. Recovery: a writer appends 1,000 entries of 1 KiB (E=Qw=3, Qa=2) in one pipelined batch with
   explicit LAC off, so every entry carries LAC -1 and the bookies' LAC never moves: recovery
   finds the whole ledger unconfirmed and must read, confirm and write back all 1,000 entries.
   The writer is then abandoned (not closed) and another client runs open_ledger(recovery=True).
   Target: <= 0.5 s.
2. Ensemble change: a writer appends 1 KiB entries at full speed to E=3 Qw=2 Qa=2 on 4 bookies;
   one bookie of its ensemble is SIGKILLed (the connection breaks at once) or SIGSTOPped (it
   hangs; detected by ``add_timeout``). The stall is the longest gap between acknowledgements
   after the fault, minus the detection time. Target: <= 50 ms beyond detection.

    python bench/recovery.py [--runs 5] [--no-append]

Appends a dated section to docs/benchmarks.md unless ``--no-append``.
"""

from __future__ import annotations

import argparse
import datetime
import logging
import os
import platform
import signal
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import structlog
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import itertools

from bench.ledger import start_bookies
from walkit.client import Client
from walkit.metadata import list_bookies, open_metadata_store

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
PW = b"bench"
ENTRY = b"x" * 1024
ADD_TIMEOUT = 1.0


async def recovery_once(url: str, entries: int) -> float:
    async with Client.connect(url, explicit_lac_interval=None) as writer_client:
        lw = await writer_client.create_ledger(3, 3, 2, password=PW)
        await lw.append_batch([ENTRY] * entries)
        async with Client.connect(url) as reader_client:
            await reader_client.list_ledgers()  # warm the metadata session
            started = trio.current_time()
            lr = await reader_client.open_ledger(lw.id, password=PW, recovery=True)
            elapsed = trio.current_time() - started
        assert lr.last_add_confirmed == entries - 1, lr.last_add_confirmed
        return elapsed


async def stall_once(url: str, pids: dict[str, int], how: signal.Signals) -> dict[str, float]:
    ack_times: list[float] = []
    async with Client.connect(url, add_timeout=ADD_TIMEOUT) as client:
        lw = await client.create_ledger(3, 2, 2, password=PW)
        victim = str(lw.metadata.current_ensemble[0])
        fault_at = 0.0

        async def write() -> None:
            while True:
                await lw.append_batch([ENTRY] * 32)
                now = trio.current_time()
                ack_times.append(now)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(write)
            await trio.sleep(1.5)
            fault_at = trio.current_time()
            os.kill(pids[victim], how)
            await trio.sleep(1.5 + ADD_TIMEOUT)
            nursery.cancel_scope.cancel()
        if how == signal.SIGSTOP:
            os.kill(pids[victim], signal.SIGCONT)
        changed = len(lw.metadata.fragments) > 1
    before = [b - a for a, b in itertools.pairwise(ack_times) if b < fault_at]
    after = [
        b - a for a, b in itertools.pairwise(ack_times) if b >= fault_at and a >= fault_at - 0.5
    ]
    detection = ADD_TIMEOUT if how == signal.SIGSTOP else 0.0
    longest = max(after) if after else float("nan")
    return {
        "typical_gap_ms": statistics.median(before) * 1000 if before else float("nan"),
        "longest_gap_ms": longest * 1000,
        "stall_beyond_detection_ms": (longest - detection) * 1000,
        "ensemble_changed": float(changed),
    }


async def bookie_pids(url: str, procs: list[Any]) -> dict[str, int]:
    """Map bookie address -> pid (each bookie prints its address when it starts)."""
    async with await open_metadata_store(url) as store:
        listing = await list_bookies(store)
    addresses = sorted(str(b) for b in listing.writable)
    by_port = {proc.pid: proc for proc in procs}
    result: dict[str, int] = {}
    for address in addresses:
        port = int(address.rsplit(":", 1)[1])
        for pid in by_port:
            if _listens_on(pid, port):
                result[address] = pid
    return result


def _listens_on(pid: int, port: int) -> bool:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if (
                fields[3] == "0A"
                and int(fields[1].rsplit(":", 1)[1], 16) == port
                and fields[9] in inodes
            ):
                return True
    return False


def run(runs: int) -> dict[str, Any]:
    results: dict[str, Any] = {"recovery_s": [], "kill": [], "hang": []}
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="walkit-bench-") as tmp:
            root = Path(tmp)
            url = f"sqlite:///{root / 'metadata.db'}"
            procs = start_bookies(root, url, 4)
            try:
                results["recovery_s"].append(trio.run(recovery_once, url, 1000))
                pids = trio.run(bookie_pids, url, procs)
                results["kill"].append(trio.run(stall_once, url, pids, signal.SIGKILL))
            finally:
                for proc in procs:
                    proc.kill()
                    proc.wait()
        with tempfile.TemporaryDirectory(prefix="walkit-bench-") as tmp:
            root = Path(tmp)
            url = f"sqlite:///{root / 'metadata.db'}"
            procs = start_bookies(root, url, 4)
            try:
                pids = trio.run(bookie_pids, url, procs)
                results["hang"].append(trio.run(stall_once, url, pids, signal.SIGSTOP))
            finally:
                for proc in procs:
                    os.kill(proc.pid, signal.SIGCONT)
                    proc.kill()
                    proc.wait()
    return results


def _median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def report(results: dict[str, Any], runs: int) -> str:
    rec = results["recovery_s"]
    lines = [
        f"## Failure paths ({datetime.date.today().isoformat()}, {platform.node()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()})",
        "",
        f"`python bench/recovery.py --runs {runs}`; medians of {runs} runs (min-max in brackets).",
        "",
        "| measurement | result | target |",
        "| --- | --- | --- |",
        f"| recovery of a 1,000 x 1 KiB unconfirmed tail, E=Qw=3 Qa=2 | {statistics.median(rec) * 1000:.0f} ms "
        f"[{min(rec) * 1000:.0f}-{max(rec) * 1000:.0f}] | <= 500 ms |",
    ]
    for key, label, detection in (
        ("kill", "bookie SIGKILLed (connection breaks at once)", "0 ms"),
        (
            "hang",
            f"bookie SIGSTOPped (add_timeout {ADD_TIMEOUT:g} s)",
            f"{ADD_TIMEOUT * 1000:.0f} ms",
        ),
    ):
        rows = results[key]
        lines.append(
            f"| append stall, {label}: longest gap {_median(rows, 'longest_gap_ms'):.0f} ms "
            f"(typical {_median(rows, 'typical_gap_ms'):.1f} ms), detection {detection} | "
            f"{_median(rows, 'stall_beyond_detection_ms'):.0f} ms beyond detection; ensemble changed in "
            f"{sum(r['ensemble_changed'] for r in rows):.0f}/{len(rows)} runs | <= 50 ms |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    text = report(run(args.runs), args.runs)
    print(text)
    if not args.no_append:
        with DOCS.open("a") as out:
            out.write("\n" + text)


if __name__ == "__main__":
    main()
