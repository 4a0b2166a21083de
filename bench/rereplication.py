"""Benchmark rereplication: time to heal after a bookie loss, and foreground appends meanwhile.

Six ``walkit-bookie`` processes (``--no-autorecovery``: this process does the healing, so it
can time it) on sqlite metadata under ``--dir``. ``--mib`` MiB of 64 KiB entries are written
across ``--ledgers`` ledgers (E=Qw=3, Qa=2). Then, three times:

1. a foreground writer (``bench/_foreground.py``, a process of its own, as an application is)
   appends 1 KiB entries, one at a time, to a new ledger, and its latency is measured for a
   few seconds with no healing (the baseline);
2. the bookie the most ledgers list is SIGKILLed and ``walkit.autorecovery.rereplicate_bookie``
   heals every ledger that listed it, while a new foreground writer appends; time to heal, MiB/s copied and the
   foreground p50/p99 are recorded.

The first loss is healed without a rate limit, the replacements copying the fragments from
the replicas themselves (COPY_FRAGMENT: the bytes do not pass through the rereplicator); the second
without a rate limit, every byte through the rereplicator (``copies_by_replacement=False``, as
before COPY_FRAGMENT); the third with the default limits. Then a second cluster of five, whose
bookies run their own autorecovery (``--lost-bookie-delay 0``, no rate
limit), loses a bookie and heals by itself: its workers copy to their own bookie where the
placement policy allows, with no network hop; timed from the loss being seen (the lost
bookie's registration gone) to no ledger listing it and no marker left. The disk's
1 MiB write+fsync rate, and the rate of a plain copy on the same disk, are measured in the same
run, before and after the heals (ratios against the mean). Appends a section to
docs/benchmarks.md unless ``--no-append``.

    python bench/rereplication.py [--mib 1024] [--ledgers 16] [--dir DIR] [--no-append]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import attrs
import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._limits import copy_1m, fsync_1m
from tests._cluster import BookieProcess, ProcessCluster, process_cluster
from walkit.autorecovery import AutorecoveryOptions, rereplicate_bookie
from walkit.client import Client
from walkit.metadata import UnderreplicationManager, list_bookies

DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
ENTRY = 64 * 1024
BASELINE_SECONDS = 4.0


async def write_data(client: Client, mib: int, ledgers: int) -> list[int]:
    per_ledger = max(1, mib * 1024 * 1024 // ENTRY // ledgers)
    payload = bytes(range(256)) * (ENTRY // 256)
    ids = []
    for _ in range(ledgers):
        lw = await client.create_ledger(3, 3, 2)
        for start in range(0, per_ledger, 64):
            await lw.append_batch([payload] * min(64, per_ledger - start))
        await lw.close()
        ids.append(lw.id)
    return ids


class Foreground:
    """``bench/_foreground.py`` in a child process: an application appending beside the
    cluster, not sharing an event loop (or a core) with the healing."""

    def __init__(self, url: str, out: Path) -> None:
        self._url = url
        self._out = out
        self._process: subprocess.Popen[str] | None = None

    def load(self) -> None:
        """Start the process and let it import (call from a thread): ``go`` then connects."""
        self._out.unlink(missing_ok=True)
        script = Path(__file__).resolve().parent / "_foreground.py"
        self._process = subprocess.Popen(
            [sys.executable, str(script), self._url, str(self._out)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self._expect("loaded")

    def go(self) -> None:
        """Let the loaded process connect; return once its first append is durable."""
        process = self._process
        assert process is not None and process.stdin is not None
        process.stdin.write("go\n")
        process.stdin.flush()
        self._expect("ready")

    def start(self) -> None:
        """``load`` then ``go`` (call from a thread)."""
        self.load()
        self.go()

    def _expect(self, word: str) -> None:
        process = self._process
        assert process is not None and process.stdout is not None
        line = process.stdout.readline()
        if line.strip() != word:
            process.kill()
            raise RuntimeError(f"foreground writer did not start: {line!r}")

    def stop(self) -> list[float]:
        """Stop it; the latencies (ms) of its appends after the first (call from a thread)."""
        process = self._process
        assert process is not None
        process.send_signal(signal.SIGTERM)
        code = process.wait()
        if code != 0:
            raise RuntimeError(f"foreground writer exited with {code}")
        return [float(line) for line in self._out.read_text().splitlines()]


def p(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def most_listed(cluster: ProcessCluster, url: str) -> BookieProcess:
    """The running bookie the most ledgers list: the one to lose, so each run heals about the
    same amount of data (a bookie picked by its index was in 7 to 12 of the 16 ledgers)."""
    running = [b for b in cluster.bookies if b.running]
    counts = dict.fromkeys((b.address for b in running), 0)
    async with Client.connect(url) as client:
        for lid in await client.list_ledgers():
            for bookie in (await client.ledger_metadata(lid)).all_bookies():
                if bookie in counts:
                    counts[bookie] += 1
    return max(running, key=lambda b: counts[b.address])


async def heal_once(
    cluster: ProcessCluster,
    url: str,
    options: AutorecoveryOptions,
    out: Path,
) -> dict[str, Any]:
    victim = await most_listed(cluster, url)
    fg = Foreground(url, out)
    await trio.to_thread.run_sync(fg.start)
    await trio.sleep(BASELINE_SECONDS)
    base = await trio.to_thread.run_sync(fg.stop)
    async with Client.connect(url) as client:
        victim.kill()
        # Let the bookie's registration expire so the placement policy stops offering it.
        while victim.address in (await list_bookies(client.metadata_store)).writable:  # noqa: ASYNC110
            await trio.sleep(0.1)
    # A fresh writer: its ledger's ensemble is chosen without the lost bookie.
    await trio.to_thread.run_sync(fg.start)
    async with Client.connect(url) as client:
        t0 = time.perf_counter()
        report = await rereplicate_bookie(client, victim.address, options=options)
        elapsed = time.perf_counter() - t0
    during = await trio.to_thread.run_sync(fg.stop)
    assert report.ok, report.failed
    return {
        "ledgers": len(report.rereplicated),
        "entries": report.entries,
        "mib": report.bytes / 1048576,
        "seconds": elapsed,
        "mib_s": report.bytes / 1048576 / elapsed,
        "base_p50": p(base, 0.5),
        "base_p99": p(base, 0.99),
        "heal_p50": p(during, 0.5),
        "heal_p99": p(during, 0.99),
    }


async def heal_by_workers(cluster: ProcessCluster, url: str, out: Path) -> dict[str, Any]:
    """SIGKILL a bookie of a cluster whose bookies run autorecovery; time their healing."""
    victim = await most_listed(cluster, url)
    async with Client.connect(url) as client:
        ids = await client.list_ledgers()
        listing = {}
        for lid in ids:
            md = await client.ledger_metadata(lid)
            if victim.address in md.all_bookies():
                listing[lid] = md.last_entry_id + 1  # E = Qw: the victim had every entry
        fg = Foreground(url, out)
        await trio.to_thread.run_sync(fg.start)
        await trio.sleep(BASELINE_SECONDS)
        base = await trio.to_thread.run_sync(fg.stop)
        # The next writer's process is started now; it connects once the loss is seen.
        await trio.to_thread.run_sync(fg.load)
        victim.kill()
        while victim.address in (await list_bookies(client.metadata_store)).writable:  # noqa: ASYNC110
            await trio.sleep(0.05)
        # The loss is seen (the auditor marks at once): the clock starts, and the foreground
        # writer makes its ledger (which must not list the lost bookie, or the workers would
        # fence it once its writer's grace period is over).
        t0 = time.perf_counter()
        urm = UnderreplicationManager(client.metadata_store)
        left = set(listing)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, fg.go)
            while left or set(listing) & set(await urm.list_ids()):
                for lid in list(left):
                    if victim.address not in (await client.ledger_metadata(lid)).all_bookies():
                        left.discard(lid)
                await trio.sleep(0.05)
            elapsed = time.perf_counter() - t0
    during = await trio.to_thread.run_sync(fg.stop)
    entries = sum(listing.values())
    mib = entries * ENTRY / 1048576
    return {
        "ledgers": len(listing),
        "entries": entries,
        "mib": mib,
        "seconds": elapsed,
        "mib_s": mib / elapsed,
        "base_p50": p(base, 0.5),
        "base_p99": p(base, 0.99),
        "heal_p50": p(during, 0.5),
        "heal_p99": p(during, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="data written before the loss")
    parser.add_argument("--ledgers", type=int, default=16)
    parser.add_argument("--dir", type=Path, default=None)
    parser.add_argument("--window", type=int, default=None, help="entries copied at once")
    parser.add_argument("--no-append", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        disk_before = fsync_1m(root, total_mib=256)["fsync_1m_mib_s"]
        direct_before = fsync_1m(root, total_mib=256, direct=True)["fsync_1m_direct_mib_s"]
        copy_before = copy_1m(root, total_mib=256)["copy_1m_mib_s"]
        url = f"sqlite:///{root / 'metadata.db'}"
        with process_cluster(url, root, 6, extra_args=["--no-autorecovery"]) as cluster:
            append_rate: list[float] = []

            async def run() -> list[dict[str, Any]]:
                async with Client.connect(url) as client:
                    t0 = time.perf_counter()
                    await write_data(client, args.mib, args.ledgers)
                    append_rate.append(args.mib / (time.perf_counter() - t0))
                window = {} if args.window is None else {"window": args.window}
                unlimited = AutorecoveryOptions(entries_per_second=0, bytes_per_second=0, **window)
                out = root / "foreground.txt"
                here = attrs.evolve(unlimited, copies_by_replacement=False)
                first = await heal_once(cluster, url, unlimited, out)
                second = await heal_once(cluster, url, here, out)
                third = await heal_once(cluster, url, AutorecoveryOptions(**window), out)
                return [first, second, third]

            results = trio.run(run)
        url2 = f"sqlite:///{root / 'metadata-workers.db'}"
        workers_args = [
            "--lost-bookie-delay",
            "0",
            "--rereplication-entries-per-second",
            "0",
            "--rereplication-bytes-per-second",
            "0",
        ]
        with process_cluster(url2, root / "workers", 5, extra_args=workers_args) as cluster2:

            async def run_workers() -> dict[str, Any]:
                async with Client.connect(url2) as client:
                    await write_data(client, args.mib, args.ledgers)
                return await heal_by_workers(cluster2, url2, root / "foreground2.txt")

            results.append(trio.run(run_workers))
        # Again once the bookies are gone: this disk's rate drifts by 1.5x within an hour, so
        # the ratios are taken against the mean of both, and both are printed.
        disk_after = fsync_1m(root, total_mib=256)["fsync_1m_mib_s"]
        direct_after = fsync_1m(root, total_mib=256, direct=True)["fsync_1m_direct_mib_s"]
        copy_after = copy_1m(root, total_mib=256)["copy_1m_mib_s"]
    disk = (disk_before + disk_after) / 2
    disk_copy = (copy_before + copy_after) / 2
    defaults = AutorecoveryOptions()
    lines = [
        "",
        f"## Rereplication ({datetime.date.today()}, {platform.machine()}, "
        f"{args.mib} MiB of 64 KiB entries in {args.ledgers} ledgers, E=Qw=3 Qa=2, 6 bookies "
        "then 5)",
        "",
        f"Disk: 1 MiB write + fsync {disk:,.0f} MiB/s (mean of {disk_before:,.0f} before and "
        f"{disk_after:,.0f} after the heals; with O_DIRECT, without the copy into the page "
        f"cache: {direct_before:,.0f} / {direct_after:,.0f}); a plain copy on the same disk "
        "(read 1 MiB "
        f"not in the page cache, write it, fsync) {disk_copy:,.0f} MiB/s ({copy_before:,.0f} / "
        f"{copy_after:,.0f}), the bound of any copier "
        f"that reads what it writes from one disk; the client's own `append_batch` of the "
        f"data: {append_rate[0]:,.0f} MiB/s (x3 replicas; same run). One bookie SIGKILLed, then "
        "`rereplicate_bookie` heals every ledger that listed it (first three rows, one loss after "
        "the other in a cluster of six: the replacements copying the fragments themselves, then "
        "every byte through `rereplicate_bookie`, then the default limits); in the last row, "
        "a second cluster's five bookies heal by themselves (their own autorecovery workers, "
        "`--lost-bookie-delay 0`, no rate limit, copying to their own bookie where the "
        "placement allows), timed from the lost bookie's registration going to no ledger "
        "listing it. A foreground writer (a process of its own) appends 1 KiB "
        "entries one at a time before (baseline) and during the healing.",
        "",
        "| rate limit | ledgers | copied | time to heal | copy rate | vs disk | vs plain copy | "
        "fg p50 before / during | fg p99 before / during |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for label, r in zip(
        (
            "none, copies by the replacements",
            "none, copies through `rereplicate_bookie`",
            f"default ({defaults.entries_per_second:,.0f} entries/s, "
            f"{(defaults.bytes_per_second or 0) / 1048576:.0f} MiB/s)",
            "none, the bookies' own workers",
        ),
        results,
        strict=True,
    ):
        lines.append(
            f"| {label} | {r['ledgers']} | {r['mib']:,.0f} MiB ({r['entries']:,} entries) | "
            f"{r['seconds']:.1f} s | {r['mib_s']:,.0f} MiB/s | {r['mib_s'] / disk:.0%} | "
            f"{r['mib_s'] / disk_copy:.0%} | "
            f"{r['base_p50']:.2f} / {r['heal_p50']:.2f} ms | "
            f"{r['base_p99']:.2f} / {r['heal_p99']:.2f} ms |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    if not args.no_append:
        with DOCS.open("a") as f:
            f.write(text)


if __name__ == "__main__":
    main()
