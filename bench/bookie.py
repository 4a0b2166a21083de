"""Benchmark one bookie: adds/s, MiB/s and low-load latency, beside this machine's limits.

One ``walkit-bookie`` process (journal and entry logs on the disk under ``--dir``), one client
connection from this process with many adds in flight, entries of 100 B, 1 KiB and 64 KiB.
The disk and loopback limits are measured in the same run (``bench/_limits.py``) and every
figure is also given as a ratio of them. Figures are medians of ``--runs`` runs.

    python bench/bookie.py [--runs 3] [--seconds 4] [--dir DIR] [--no-append]
    python bench/bookie.py --tls [--runs 1] ...   # the same with and without TLS, side by side

With ``--tls`` each run starts a plain bookie and a TLS one (certificates from ``trustme``,
client certificates required) and the report compares them.

    python bench/bookie.py --compare-tree DIR [--runs 9] [--seconds 3] [--latency-adds 500]
        [--bookie-event-loop auto|asyncio|uvloop|trio] [--compare-event-loop LOOP]

With ``--compare-tree`` each run starts this checkout's bookie and one running DIR's code
(another checkout, e.g. ``git worktree add /tmp/before COMMIT``; run on this interpreter with DIR
first on the import path: bench/_compare.py). Both run at once and take turns at each entry
size, in an order alternating from run to run, the same client driving both. The report gives
each side's medians of adds/s and of the bookie's CPU per add, their ratios this ÷ tree with the
range of the runs' own ratios, each bookie's share of a core, and the client's (it must stay
below one core for the bookie to be what is measured).
``--bookie-event-loop`` is passed to this checkout's bookie as its ``--event-loop``, and
``--compare-event-loop`` to the tree's, only when given (so that an older tree still runs).

Appends a dated section to docs/benchmarks.md unless ``--no-append``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import os
import platform
import shutil
import signal
import ssl
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _compare  # noqa: E402
from bench._compare import cpu_seconds, tree_command  # noqa: E402
from bench._limits import fdatasync_4k, measure_all  # noqa: E402
from walkit._core.digest import DigestManager, master_key  # noqa: E402
from walkit._core.types import BookieId  # noqa: E402
from walkit._core.wire import (  # noqa: E402
    AddRequest,
    FrameDecoder,
    decode_message,
    encode_frame,
)

KEY = master_key(b"bench")
SIZES = (100, 1024, 64 * 1024)
DOCS = ROOT / "docs" / "benchmarks.md"


def start_bookie(
    data: Path, extra: list[str] | None = None, tree: Path = ROOT
) -> tuple[subprocess.Popen[str], BookieId]:
    """A bookie process running ``tree``'s code (bench/_compare.py: this checkout by default)."""
    args = [
        sys.executable, "-m", "walkit_bookie.cli",
        "--data-dir", str(data / "journal"), "--data-dir", str(data / "ledgers"),
        "--log-level", "warning", *(extra or []),
    ]  # fmt: skip
    proc = subprocess.Popen(tree_command(tree, args), cwd=tree, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening on" not in line:
        proc.kill()
        raise RuntimeError(f"bookie did not start: {line!r}")
    return proc, BookieId.parse(line.rsplit(" ", 1)[1].strip())


@functools.cache  # the same adds for every side and run (each run's bookies are new)
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


async def open_stream(bookie: BookieId, tls: ssl.SSLContext | None) -> trio.abc.Stream:
    """A connection to the bookie: TCP, or TLS over it (handshake done)."""
    raw = await trio.open_tcp_stream(bookie.host, bookie.port)
    if tls is None:
        return raw
    stream = trio.SSLStream(raw, tls, server_hostname=bookie.host)
    await stream.do_handshake()
    return stream


async def _receive_answers(stream: trio.abc.Stream, count: int, on_answers: Any = None) -> None:
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
    bookie: BookieId,
    ledger_id: int,
    size: int,
    seconds: float,
    tls: ssl.SSLContext | None = None,
    pid: int | None = None,
) -> dict[str, float]:
    """Many adds in flight on one connection for about ``seconds``; with the bookie's ``pid``,
    its CPU per add over the same window. ``client_cores`` and ``bookie_cores``: each process's
    CPU over the window divided by its length (near 1, that process is the bottleneck; both well
    below, the disk or the machine's other load is)."""
    window = max(16, min(4000, (16 << 20) // (size + 64)))
    # Enough frames for the run, within ~1 GiB (the run ends early if they run out).
    count = min(int(seconds * 100_000), (1 << 30) // (size + 100))
    frames = frames_for(ledger_id, size, count)  # built before the clock starts
    stream = await open_stream(bookie, tls)
    in_flight = 0
    done = 0
    room = trio.Event()

    def on_answers(n: int) -> None:
        nonlocal in_flight, done, room
        in_flight -= n
        done += n
        room.set()

    bookie_cpu = cpu_seconds([pid]) if pid is not None else 0.0
    client_cpu = time.process_time()
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
        client_cpu = time.process_time() - client_cpu
        bookie_cpu = cpu_seconds([pid]) - bookie_cpu if pid is not None else float("nan")
        nursery.cancel_scope.cancel()
    await stream.aclose()
    return {
        "adds_per_s": done / elapsed,
        "mib_per_s": done * size / elapsed / (1 << 20),
        "adds": done,
        "bookie_cpu_us": bookie_cpu / done * 1e6,
        "client_cores": client_cpu / elapsed,
        "bookie_cores": bookie_cpu / elapsed,
    }


async def latency(
    bookie: BookieId, ledger_id: int, size: int, count: int, tls: ssl.SSLContext | None = None
) -> float:
    """p50 of one add at a time (low load), in ms."""
    frames = frames_for(ledger_id, size, count)
    stream = await open_stream(bookie, tls)
    lat = []
    for frame in frames:
        t0 = time.perf_counter()
        await stream.send_all(frame)
        await _receive_answers(stream, 1)
        lat.append(time.perf_counter() - t0)
    await stream.aclose()
    return statistics.median(lat) * 1e3


@dataclasses.dataclass
class Run:
    """One run's figures: by entry size (adds_per_s, mib_per_s, bookie_cpu_us...), and the
    low-load add p50."""

    sizes: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
    p50_ms: float = 0.0


@dataclasses.dataclass
class Side:
    """A bookie to measure: its name in the report, the checkout whose code it runs, more of
    its options, and the client's TLS context for it (None: plain TCP)."""

    name: str
    tree: Path = ROOT
    extra: list[str] = dataclasses.field(default_factory=list)
    context: ssl.SSLContext | None = None


def run_sides(
    tmp: Path, seconds: float, sides: list[Side], turn: int = 0, latency_adds: int = 2000
) -> dict[str, Run]:
    """One bookie process per side, all started at once; at each entry size the sides take
    turns (one idles while the other is measured), in an order rotating with ``turn`` and the
    size, so that the machine's drift falls on every side alike and a pair is measured seconds
    apart. Their data is removed afterwards."""
    procs: list[subprocess.Popen[str]] = []
    try:
        bookies = {}
        for side in sides:
            proc, bookie = start_bookie(tmp / side.name, side.extra, side.tree)
            procs.append(proc)
            bookies[side.name] = (bookie, proc.pid)
        out = {side.name: Run() for side in sides}

        async def main() -> None:
            for i, size in enumerate(SIZES):
                for side in _compare.rotated(sides, turn + i):
                    bookie, pid = bookies[side.name]
                    out[side.name].sizes[size] = await throughput(
                        bookie, 100 + i, size, seconds, side.context, pid
                    )
            for side in _compare.rotated(sides, turn):
                bookie, _ = bookies[side.name]
                out[side.name].p50_ms = await latency(bookie, 200, 1024, latency_adds, side.context)

        trio.run(main)
        return out
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=60)
        for side in sides:
            shutil.rmtree(tmp / side.name, ignore_errors=True)  # 64 KiB runs write GBs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--dir", default=None, help="where the bookie's data goes")
    parser.add_argument("--no-append", action="store_true")
    parser.add_argument("--tls", action="store_true", help="compare with and without TLS")
    _compare.add_argument(parser, "a bookie")
    parser.add_argument(
        "--bookie-event-loop",
        choices=EVENT_LOOPS,
        help="this checkout's bookie's --event-loop (default: the bookie's own default)",
    )
    parser.add_argument(
        "--compare-event-loop",
        choices=EVENT_LOOPS,
        help="the compared tree's bookie's --event-loop (a tree that has the option)",
    )
    parser.add_argument(
        "--latency-adds", type=int, default=2000, help="adds in the low-load p50, per run"
    )
    args = parser.parse_args()
    if args.tls and args.compare_tree:
        parser.error("--tls and --compare-tree: one comparison at a time")
    if args.compare_event_loop and not args.compare_tree:
        parser.error("--compare-event-loop needs --compare-tree")
    if args.tls:
        compare_tls(args)
        return
    if args.compare_tree:
        compare_trees(args)
        return
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp_name:
        tmp = Path(tmp_name)
        print("measuring the machine's limits ...", flush=True)
        limits = measure_all(tmp)
        runs = []
        for r in range(args.runs):
            print(f"run {r + 1}/{args.runs} ...", flush=True)
            side = Side("bookie", extra=_loop_option(args.bookie_event_loop))
            runs.append(
                run_sides(tmp / f"run{r}", args.seconds, [side], 0, args.latency_adds)["bookie"]
            )
            limits_again = measure_all(tmp) if r == args.runs - 1 else None
    if limits_again:
        for k in limits:
            limits[k] = statistics.median([limits[k], limits_again[k]])
    med = {
        size: {
            k: statistics.median(run.sizes[size][k] for run in runs)
            for k in ("adds_per_s", "mib_per_s", "bookie_cpu_us")
        }
        for size in SIZES
    }
    p50 = statistics.median(run.p50_ms for run in runs)
    report(limits, med, p50, args, os.getloadavg()[0])


EVENT_LOOPS = ("auto", "asyncio", "uvloop", "trio")


def _loop_option(loop: str | None) -> list[str]:
    """The bookie's ``--event-loop``, only when asked for (a tree without it still runs)."""
    return [] if loop is None else ["--event-loop", loop]


#: Above this share of one core, the client (one trio task pair in this process) may be what
#: limits the rate rather than the bookie.
CLIENT_BOUND = 0.9
#: Below this share of one core, the bookie was waiting (on the disk, or for a core) rather
#: than running its code flat out.
BOOKIE_BOUND = 0.7


def compare_trees(args: Any) -> None:
    """This checkout's bookie and ``--compare-tree``'s, taking turns at each entry size (the
    order rotating), the same client driving both: adds/s and bookie CPU per add, with ratios."""
    sides = [
        Side("this", ROOT, _loop_option(args.bookie_event_loop)),
        Side("tree", args.compare_tree, _loop_option(args.compare_event_loop)),
    ]
    for side in sides:
        _compare.check_imports(side.tree, "walkit_bookie")
    runs: dict[str, list[Run]] = {"this": [], "tree": []}
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp_name:
        tmp = Path(tmp_name)
        disk = fdatasync_4k(tmp, seconds=1.0)
        for r in range(args.runs):
            print(f"run {r + 1}/{args.runs} ...", flush=True)
            for name, run in run_sides(tmp, args.seconds, sides, r, args.latency_adds).items():
                runs[name].append(run)
                print(f"  {name}: {_run_line(run)}", flush=True)
        disk_end = fdatasync_4k(tmp, seconds=1.0)
    text = compare_report(runs, args, disk, disk_end)
    print(text)
    if args.no_append:
        return
    with DOCS.open("a") as f:
        f.write(text)
    print(f"appended to {DOCS}")


def _run_line(run: Run) -> str:
    return (
        "; ".join(
            f"{_label(size)}: {m['adds_per_s']:,.0f} adds/s, {m['bookie_cpu_us']:.1f} µs/add, "
            f"bookie {m['bookie_cores']:.2f} core, client {m['client_cores']:.2f}"
            for size, m in run.sizes.items()
        )
        + f"; p50 {run.p50_ms:.3f} ms"
    )


def _label(size: int) -> str:
    return f"{size} B" if size < 1024 else f"{size // 1024} KiB"


def compare_report(
    runs: dict[str, list[Run]], args: Any, disk: dict[str, float], disk_end: dict[str, float]
) -> str:
    def med(name: str, size: int, key: str) -> float:
        return statistics.median(run.sizes[size][key] for run in runs[name])

    def spread(size: int, key: str) -> str:
        """The ratio this/tree of each run's pair (the two bookies ran back to back)."""
        pairs = [
            a.sizes[size][key] / b.sizes[size][key]
            for a, b in zip(runs["this"], runs["tree"], strict=True)
        ]
        return f"{min(pairs):.2f} to {max(pairs):.2f}"

    rows = [
        "| entry size | adds/s this | adds/s tree | this ÷ tree (runs) | CPU µs/add this | "
        "tree | this ÷ tree (runs) | bookie cores this / tree | client cores, max |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    client_max = bookie_max = 0.0
    for size in SIZES:
        a, b = med("this", size, "adds_per_s"), med("tree", size, "adds_per_s")
        ca, cb = med("this", size, "bookie_cpu_us"), med("tree", size, "bookie_cpu_us")
        client = max(run.sizes[size]["client_cores"] for rs in runs.values() for run in rs)
        client_max = max(client_max, client)
        ka, kb = med("this", size, "bookie_cores"), med("tree", size, "bookie_cores")
        bookie_max = max(bookie_max, ka, kb)
        rows.append(
            f"| {_label(size)} | {a:,.0f} | {b:,.0f} | {a / b:.2f} ({spread(size, 'adds_per_s')}) "
            f"| {ca:.1f} | {cb:.1f} | {ca / cb:.2f} ({spread(size, 'bookie_cpu_us')}) "
            f"| {ka:.2f} / {kb:.2f} | {client:.2f} |"
        )
    p50 = {name: statistics.median(run.p50_ms for run in rs) for name, rs in runs.items()}
    client_note = (
        f"The client stayed below one core (at most {client_max:.2f} of one in a measured "
        "window), so the bookie, not the client, set the rate."
        if client_max < CLIENT_BOUND
        else f"WARNING: the client used up to {client_max:.2f} of a core in a measured window: "
        "it may be what limits the rate; the adds/s ratio is then a lower bound of the gap."
    )
    if bookie_max < BOOKIE_BOUND:
        client_note += (
            f" Neither bookie used more than {bookie_max:.2f} of a core (medians): the disk or "
            "the machine's other load set the rate, so the adds/s ratio says little about the "
            "code; read the CPU per add, or run again with the machine to itself."
        )
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    loops = f"this bookie's --event-loop {args.bookie_event_loop or '(default)'}"
    if args.compare_event_loop:
        loops += f", the tree's {args.compare_event_loop}"
    return (
        f"\n## Bookie: this checkout against another tree ({now})\n\n"
        f"`python bench/bookie.py --compare-tree TREE --runs {args.runs} --seconds "
        f"{args.seconds:g}{f' --dir {args.dir}' if args.dir else ''}`; TREE = "
        f"{_describe(args.compare_tree)}; {loops}; medians of "
        f"{args.runs} runs, in each of which the two bookies took turns at every entry size (the "
        "order alternating), and in brackets the range of the runs' own ratios; one connection with many adds in flight; "
        "CPU is the bookie process's user + system time per add over the measured window. "
        f"Machine: {os.cpu_count()} cores, Python {platform.python_version()}, 4 KiB fdatasync "
        f"p50 {disk['fdatasync_4k_p50_ms']:.3f} ms at the start and "
        f"{disk_end['fdatasync_4k_p50_ms']:.3f} ms at the end, load average "
        f"{os.getloadavg()[0]:.1f} at the end.\n\n" + "\n".join(rows) + "\n\n"
        f"Add p50 at low load (1 KiB, one at a time): {p50['this']:.3f} ms this, "
        f"{p50['tree']:.3f} ms tree. {client_note}\n"
    )


def _describe(tree: Path) -> str:
    """The tree's commit (``git describe``-like), or its path when it is not a git checkout."""
    done = subprocess.run(
        ["git", "-C", str(tree), "log", "-1", "--format=%h %s"],
        capture_output=True,
        text=True,
        check=False,
    )
    return f"`{done.stdout.strip()[:72]}`" if done.returncode == 0 else str(tree)


def make_pki(directory: Path) -> tuple[list[str], ssl.SSLContext]:
    """A CA, a bookie certificate for 127.0.0.1 and a client one: the bookie's arguments (client
    certificates required) and the client's context."""
    import trustme

    from walkit.net import TLSConfig

    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    for name, cert in {
        "bookie": ca.issue_cert("127.0.0.1"),
        "client": ca.issue_cert("bench.walkit.test", common_name="bench"),
    }.items():
        (directory / f"{name}.pem").write_bytes(b"".join(b.bytes() for b in cert.cert_chain_pems))
        cert.private_key_pem.write_to_path(str(directory / f"{name}.key"))
    args = ["--tls-cert", str(directory / "bookie.pem"), "--tls-key", str(directory / "bookie.key")]
    args += ["--tls-ca", str(directory / "ca.pem"), "--tls-client-auth", "require"]
    client = TLSConfig(
        cert=directory / "client.pem", key=directory / "client.key", ca=directory / "ca.pem"
    )
    return args, client.client_context()


def compare_tls(args: Any) -> None:
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp_name:
        tmp = Path(tmp_name)
        tls = make_pki(tmp)
        plain_runs, tls_runs = [], []
        for r in range(args.runs):
            print(f"run {r + 1}/{args.runs}: plain and TLS, taking turns ...", flush=True)
            sides = [Side("plain"), Side("tls", extra=tls[0], context=tls[1])]
            both = run_sides(tmp, args.seconds, sides, r, args.latency_adds)
            plain_runs.append(both["plain"])
            tls_runs.append(both["tls"])
    cipher = "TLS 1.3 (the ssl module's default suite)"

    def med(runs: list[Run], size: int, key: str) -> float:
        return statistics.median(run.sizes[size][key] for run in runs)

    rows = [
        "| entry size | plain adds/s | TLS adds/s | TLS ÷ plain | plain MiB/s | TLS MiB/s | "
        "bookie CPU µs/add plain | TLS |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for size in SIZES:
        label = f"{size} B" if size < 1024 else f"{size // 1024} KiB"
        p, t = med(plain_runs, size, "adds_per_s"), med(tls_runs, size, "adds_per_s")
        rows.append(
            f"| {label} | {p:,.0f} | {t:,.0f} | {t / p:.2f} | "
            f"{med(plain_runs, size, 'mib_per_s'):,.1f} | {med(tls_runs, size, 'mib_per_s'):,.1f} | "
            f"{med(plain_runs, size, 'bookie_cpu_us'):.1f} | {med(tls_runs, size, 'bookie_cpu_us'):.1f} |"
        )
    p50_plain = statistics.median(run.p50_ms for run in plain_runs)
    p50_tls = statistics.median(run.p50_ms for run in tls_runs)
    rows += [
        "",
        "| add p50 at low load (1 KiB, one at a time) | plain | TLS |",
        "| --- | ---: | ---: |",
        f"| | {p50_plain:.3f} ms | {p50_tls:.3f} ms |",
    ]
    text = "\n".join(rows)
    print(text)
    if args.no_append:
        return
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    section = (
        f"\n## Bookie: the cost of TLS ({now})\n\n"
        f"`python bench/bookie.py --tls --runs {args.runs} --seconds {args.seconds:g}`; "
        f"medians of {args.runs} run(s); machine: {os.cpu_count()} cores, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}; one "
        "bookie process, one connection with many adds in flight, as in the section above; "
        f"the TLS bookie requires client certificates; {cipher}; load average "
        f"{os.getloadavg()[0]:.1f} at the end (other work shares the 2 cores).\n\n" + text + "\n"
    )
    with DOCS.open("a") as f:
        f.write(section)
    print(f"appended to {DOCS}")


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
