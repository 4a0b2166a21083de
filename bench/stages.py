"""Where the time of one append in flight goes: the log's hot path, step by step.

Three bookie processes and one log writer on uvloop, as ``bench/log.py`` runs its
``1 in flight`` mode (E=Qw=3 Qa=2, sqlite metadata, 100 B records, one ``append`` at a time).
Every process stamps the steps of each append with the machine's monotonic clock, which all
processes share (``bench/_stage_probe.py`` wraps the functions that do them):

- the writer: the append starts, its entry is made, the sends to the three bookies return
  (reported beside the path: a bookie may receive before the last send returns),
  each answer arrives, the quorum acknowledges it, the appending task wakes, the append
  returns;
- each bookie: the request is received, submitted to the group commit, the journal write
  starts and ends, the answer is written.

For each append the bookie on the critical path is the one whose answer completed the ack
quorum; the writer's and the bookies' stamps carry the entry id, so an append pairs with its
own adds (the bookie outside the quorum may still be journaling the entry before). The
report gives the p50 of each stage in µs, beside the disk's fdatasync p50 and the floor of
the same shape (``bench/_floor.py``), and the CPU and run-queue wait per append
of each process (``/proc/PID/schedstat``: time ready to run but without a core).

    python bench/stages.py [--seconds 5] [--dir DIR]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _stage_probe  # noqa: E402
from bench._floor import one_in_flight_floor  # noqa: E402
from bench._limits import fdatasync_4k  # noqa: E402

#: Beside the path: how long the writer's sends to all three bookies took.
SENDS = "entry made → sends to all three returned"
#: The stages, in the order of the path: (name, from step, to step, whose clock).
STAGES = (
    ("append → entry made", "t0", "entry", "writer"),
    # (not "sent to all three": the critical bookie may receive before the third send)
    ("entry made → critical bookie received", "entry", "received", "bookie"),
    ("received → submitted", "received", "submitted", "bookie"),
    ("submitted → journal write", "submitted", "journal_write", "bookie"),
    ("journal write (O_DSYNC)", "journal_write", "journal_written", "bookie"),
    ("written → answer sent", "journal_written", "wrote", "bookie"),
    ("answer sent → quorum answer read", "wrote", "answer", "writer"),
    ("quorum answer → append's task woken", "answer", "woken", "writer"),
    ("woken → append returned", "woken", "t1", "writer"),
)


def _schedstat(pid: int) -> tuple[int, int]:
    """(ns on a core, ns ready without one) of every thread of ``pid``."""
    run = wait = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            on, ready, _ = map(int, (task / "schedstat").read_text().split())
        except (OSError, ValueError):
            continue
        run, wait = run + on, wait + ready
    return run, wait


def _start_bookies(root: Path, url: str, stamps: Path) -> list[subprocess.Popen[str]]:
    launch = (
        "import sys, runpy; sys.path.insert(0, sys.argv.pop(1)); "
        "import bench._stage_probe as p; p.install(sys.argv.pop(1)); "
        "runpy.run_module('walkit_bookie.cli', run_name='__main__', alter_sys=True)"
    )
    procs: list[subprocess.Popen[str]] = []
    for i in range(3):
        args = [
            sys.executable, "-c", launch, str(ROOT), str(stamps),
            "--data-dir", str(root / f"bookie-{i}"), "--metadata", url, "--log-level", "warning",
        ]  # fmt: skip
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "listening on" not in line:
            for p in [*procs, proc]:
                p.kill()
            raise RuntimeError(f"bookie did not start: {line!r}")
        procs.append(proc)
    return procs


async def _appends(url: str, seconds: float, pids: list[int]) -> dict[str, Any]:
    from walkit import Client, Log

    data = b"x" * 100
    async with Client.connect(url) as client:
        log = await Log.open(client, "stages", ensemble_size=3, write_quorum=3, ack_quorum=2)
        async with log.writer() as writer:
            for _ in range(300):  # warm up: connections, caches
                await writer.append(data)
            before = {pid: _schedstat(pid) for pid in pids}
            cpu0 = time.process_time()
            count = 0
            end = time.perf_counter() + seconds
            mark = _stage_probe.mark
            while time.perf_counter() < end:
                mark("t0")
                await writer.append(data)
                mark("t1")
                count += 1
            cpu = time.process_time() - cpu0
            after = {pid: _schedstat(pid) for pid in pids}
    per = {
        pid: ((after[pid][0] - before[pid][0]) / count, (after[pid][1] - before[pid][1]) / count)
        for pid in pids
    }
    return {"count": count, "client_cpu_ns": cpu * 1e9 / count, "per_process": per}


def _events(path: Path) -> list[list[Any]]:
    return [
        [int(ns), step, int(entry)] for ns, step, entry in (line.split() for line in path.open())
    ]


def _bookie_adds(events: list[list[Any]]) -> dict[int, list[dict[str, int]]]:
    """Each entry's adds a bookie journaled alone, by entry id: its steps' times, from the
    receive before it to the answer written after its journal write."""
    adds: dict[int, list[dict[str, int]]] = {}
    received: int | None = None
    add: dict[str, int] | None = None
    for ns, step, entry_id in events:
        if step == "received":
            received = ns
        elif step == "submitted" and received is not None:
            add = {"received": received, "submitted": ns, "entry_id": entry_id}
        elif add is not None and step in ("journal_write", "journal_written"):
            add.setdefault(step, ns)
        elif add is not None and step == "wrote" and "journal_written" in add:
            add["wrote"] = ns
            adds.setdefault(add["entry_id"], []).append(add)
            add = None
    return adds


def timeline(writer: list[list[Any]], bookies: list[list[list[Any]]]) -> dict[str, list[float]]:
    """Each stage's durations (µs) over the appends the stamps fully describe."""
    adds: dict[int, list[dict[str, int]]] = {}
    for events in bookies:
        for entry_id, entry_adds in _bookie_adds(events).items():
            adds.setdefault(entry_id, []).extend(entry_adds)
    stages: dict[str, list[float]] = {name: [] for name, *_ in STAGES}
    stages["total"] = []
    stages[SENDS] = []
    window: dict[str, Any] | None = None
    for ns, step, entry_id in writer:
        if step == "t0":
            window = {"t0": ns, "answer": [], "entry_ids": set()}
        elif window is None:
            continue
        elif step == "answer":
            window["answer"].append(ns)
        elif step != "t1":
            window.setdefault(step, ns)
            if step == "entry":
                window["entry_ids"].add(entry_id)
        else:
            window["t1"] = ns
            steps = _critical_path(window, adds)
            if steps is not None:
                for name, start, stop, _ in STAGES:
                    stages[name].append((steps[stop] - steps[start]) / 1e3)
                stages["total"].append((ns - window["t0"]) / 1e3)
                stages[SENDS].append((steps["sent"] - steps["entry"]) / 1e3)
            window = None
    return stages


def _critical_path(
    window: dict[str, Any], adds: dict[int, list[dict[str, int]]]
) -> dict[str, int] | None:
    """The append's steps, with the bookie whose answer completed the quorum (None: the
    stamps do not tell, e.g. an append that went out in another's entry, or one whose
    bookies journaled its entry in a group with another)."""
    if not all(k in window for k in ("entry", "sent", "acknowledged", "woken")):
        return None
    if len(window["entry_ids"]) != 1:
        return None
    quorum = [a for a in window["answer"] if a <= window["acknowledged"]]
    if not quorum:
        return None
    (entry_id,) = window["entry_ids"]
    answered = [a for a in adds.get(entry_id, ()) if a["wrote"] <= quorum[-1]]
    if len(answered) < 2:
        return None
    critical = max(answered, key=lambda a: a["wrote"])
    return {**window, **critical, "answer": quorum[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--dir", default=None, help="where the bookies keep their data")
    args = parser.parse_args()
    print(report(measure(args.seconds, args.dir)))


def measure(seconds: float, directory: str | None = None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="stages-", dir=directory) as tmp:
        root = Path(tmp)
        stamps = root / "stamps"
        stamps.mkdir()
        disk = fdatasync_4k(root)
        floor = one_in_flight_floor(root, seconds=min(seconds, 3.0))
        url = f"sqlite:///{root / 'metadata.db'}"
        procs = _start_bookies(root, url, stamps)
        _stage_probe.install()
        try:
            run = anyio.run(
                functools.partial(_appends, url, seconds, [p.pid for p in procs]),
                backend="asyncio",
                backend_options={"use_uvloop": True},
            )
        finally:
            _stage_probe.uninstall()
            for p in procs:
                p.terminate()
            for p in procs:
                p.wait(timeout=30)
        bookies = [_events(stamps / f"{p.pid}.txt") for p in procs]
        stages = timeline(list(_stage_probe.EVENTS), bookies)
    return {"disk": disk, "floor": floor, "run": run, "stages": stages}


def report(m: dict[str, Any]) -> str:
    stages, run = m["stages"], m["run"]
    described = len(stages["total"])
    lines = [
        f"One append in flight, uvloop, 100 B, E=Qw=3 Qa=2: {run['count']:,} appends, "
        f"{described:,} with every step stamped; {os.cpu_count()} cores.",
        "",
        "| stage | p50 µs | mean µs |",
        "| --- | ---: | ---: |",
    ]
    for name, values in stages.items():
        if values and name != SENDS:
            lines.append(
                f"| {name} | {statistics.median(values):.0f} | {statistics.mean(values):.0f} |"
            )
    if stages[SENDS]:
        lines += [
            "",
            f"The writer's sends to all three returned p50 {statistics.median(stages[SENDS]):.0f}"
            " µs after the entry was made (the critical bookie may receive before the last).",
        ]
    lines += [
        "",
        f"Disk 4 KiB fdatasync p50 {m['disk']['fdatasync_4k_p50_ms']:.2f} ms; the floor of "
        f"this shape (bench/_floor.py) p50 {m['floor']['floor_p50_ms']:.2f} ms.",
        f"Per append: the writer's CPU {run['client_cpu_ns'] / 1e3:.0f} µs; each bookie on a "
        "core / ready without one: "
        + ", ".join(
            f"{on / 1e3:.0f} / {ready / 1e3:.0f} µs" for on, ready in run["per_process"].values()
        )
        + ".",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
