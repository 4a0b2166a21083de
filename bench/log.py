"""Benchmark the log: record sets against one record per entry, beside etcd and the disk.

Three bookie processes, E=Qw=3 Qa=2, records of 100 B and 1 KiB:

- ``1 in flight``: one task, one ``append`` at a time (p50/p99 per record);
- ``64 tasks``: 64 tasks each awaiting its own ``append`` (adaptive batching packs them);
- ``append_batch``: one task appending batches of 1,024 records back to back;
- ``tail reader``: a reader reading the whole log back (records/s);

each with the CPU it costs per record: this process (the client) and the three bookies. Each
mode runs on every front, one after the other against the same bookies: the async API on
trio, on asyncio and on uvloop (when installed), and ``walkit.sync`` from threads (64 threads
in place of 64 tasks). The same modes run with ``batch_bytes=1`` too (every record alone in
its entry, as before record sets; trio only), and etcd 3 members (HTTP gateway, fsync) take
the same 1 and 64 in-flight load when ``etcd`` is installed. The disk's 4 KiB fdatasync p50
is measured in the same run, and with uvloop the floor of one append in flight on this machine
(``bench/_floor.py``: three minimal servers doing the journal's write; ``--no-floor`` skips it).

    python bench/log.py [--seconds 3] [--sizes 100,1024] [--fronts trio,asyncio,uvloop,sync]
                        [--records plain,stamped,keyed] [--no-append] [--no-etcd] [--no-floor]
                        [--plot] [--metrics ROUNDS]

``--records`` says what the records carry: ``plain`` (the default: no key, headers or
timestamp, a client without a wall clock), ``stamped`` (the client's wall clock stamps each
entry) or ``keyed`` (stamped, and each record has a 16-byte key and one header).

``--typed ROUNDS`` also measures typed records (docs/log.md, "Typed records"): 100 B-class
values of a dataclass and of a msgspec Struct against bytes records of the same size, appended
from 64 tasks and read back (the reader asks each record for its ``value``), on trio,
alternating the three kinds in each round (after the others); and, in this process, what
encoding (with its check) and decoding one value costs: where the time goes.

``--metrics ROUNDS`` also measures what the client's metrics cost (``metrics_registry``): the
trio front, alternating rounds without and with a registry in the same run (after the others).

Appends a dated section to docs/benchmarks.md unless ``--no-append``; ``--plot`` also draws
throughput against p99 latency per mode as ``docs/log-throughput.svg`` (matplotlib: the
``bench`` extra).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import itertools
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import attrs
import msgspec
import trio
from prometheus_client import CollectorRegistry

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import walkit.sync  # noqa: E402
from bench._floor import one_in_flight_floor  # noqa: E402
from bench._limits import fdatasync_4k  # noqa: E402
from bench.ledger import _cpu_seconds, _percentile, start_bookies  # noqa: E402
from walkit import Client, Log, Record  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
SVG = ROOT / "docs" / "log-throughput.svg"
TASKS = 64
BATCH = 1024
#: Where each front's async code runs: anyio.run's backend and its options.
ASYNC_FRONTS: dict[str, tuple[str, dict[str, Any]]] = {
    "trio": ("trio", {}),
    "asyncio": ("asyncio", {}),
    "uvloop": ("asyncio", {"use_uvloop": True}),
}


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
    async with anyio.create_task_group() as group:
        for _ in range(tasks):
            group.start_soon(loop)
    return count, time.perf_counter() - t0, lat


def _threaded(
    seconds: float, threads: int, one: Callable[[], int]
) -> tuple[int, float, list[float]]:
    """Run ``one`` (returns records done) from ``threads`` threads for ``seconds``."""
    counts = [0] * threads
    lats: list[list[float]] = [[] for _ in range(threads)]
    stop_at = time.perf_counter() + seconds

    def loop(n: int) -> None:
        while time.perf_counter() < stop_at:
            t0 = time.perf_counter()
            counts[n] += one()
            lats[n].append(time.perf_counter() - t0)

    pool = [threading.Thread(target=loop, args=(n,)) for n in range(threads)]
    t0 = time.perf_counter()
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return sum(counts), time.perf_counter() - t0, [x for lat in lats for x in lat]


def _figures(
    count: int, elapsed: float, lat: list[float], cpu: float, bookies_cpu: float
) -> dict[str, float]:
    return {
        "records_per_s": count / elapsed,
        "p50_ms": _percentile(lat, 0.5) * 1e3 if lat else float("nan"),
        "p99_ms": _percentile(lat, 0.99) * 1e3 if lat else float("nan"),
        "client_us": cpu / count * 1e6,
        "bookies_us": bookies_cpu / count * 1e6,
    }


class _Meter:
    """CPU of this process and of the bookies between two points."""

    def __init__(self, bookies: list[int]) -> None:
        self._bookies = bookies
        self._cpu0 = time.process_time()
        self._bk0 = sum(_cpu_seconds(p) for p in bookies)

    def read(self) -> tuple[float, float]:
        return (
            time.process_time() - self._cpu0,
            sum(_cpu_seconds(p) for p in self._bookies) - self._bk0,
        )


KEY = b"user-0123456789ab"
HEADERS = (("trace", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),)


def _client_options(records: str) -> dict[str, Any]:
    return {} if records == "plain" else {"wall_clock": time.time}


def _workload(size: int, records: str) -> tuple[bytes, dict[str, Any], list[Any]]:
    """A payload of ``size`` random bytes, what each append adds (``records``: keyed gets a
    key and headers), and one append_batch's items."""
    data = os.urandom(size)
    extras: dict[str, Any] = {"key": KEY, "headers": HEADERS} if records == "keyed" else {}
    return data, extras, [Record(data, **extras) if extras else data] * BATCH


async def measure_log(
    url: str,
    name: str,
    size: int,
    seconds: float,
    bookies: list[int],
    records: str = "plain",
    client_options: dict[str, Any] | None = None,
    **options: Any,
) -> dict[str, dict[str, float]]:
    data, extras, batch_items = _workload(size, records)
    out: dict[str, dict[str, float]] = {}
    connect_options = {**_client_options(records), **(client_options or {})}
    async with Client.connect(url, **connect_options) as client:
        log = await Log.open(client, name, ensemble_size=3, write_quorum=3, ack_quorum=2, **options)
        async with log.writer() as w:
            await w.append_batch([data] * 64)  # warm up connections

            async def single() -> int:
                await w.append(data, **extras)
                return 1

            async def batch() -> int:
                await w.append_batch(batch_items)
                return BATCH

            for mode, tasks, one in (
                ("1 in flight", 1, single),
                (f"{TASKS} tasks", TASKS, single),
                (f"append_batch {BATCH}", 1, batch),
            ):
                meter = _Meter(bookies)
                count, elapsed, lat = await _timed(seconds, tasks, one)
                out[mode] = _figures(count, elapsed, lat, *meter.read())
        meter = _Meter(bookies)
        t0 = time.perf_counter()
        count = 0
        async for _record in log.reader("earliest", follow=False):
            count += 1
        out["tail reader"] = _figures(count, time.perf_counter() - t0, [], *meter.read())
    return out


class StructOrder(msgspec.Struct):
    """A 100 B-class typed record (its encoding is ~100 bytes), as a Struct."""

    id: int
    user: str
    amount: float
    currency: str
    note: str = ""


def _typed_values(kind: str) -> tuple[Any, list[Any]]:
    """The schema (None: bytes) and the values of ``kind``: bytes of the encoded value's
    size, a dataclass, or a Struct."""
    import dataclasses

    order = dataclasses.make_dataclass(
        "Order",
        [("id", int), ("user", str), ("amount", float), ("currency", str), ("note", str, "")],
    )
    values = [
        order(123_456 + i, f"user-{i % 1000:06d}", 19.99 + i, "EUR", "x" * 40) for i in range(64)
    ]
    if kind == "dataclass":
        return order, values
    if kind == "struct":
        return StructOrder, [StructOrder(**dataclasses.asdict(v)) for v in values]
    size = len(msgspec.msgpack.encode(values[0]))
    return None, [os.urandom(size) for _ in values]


async def measure_typed(
    url: str, name: str, kind: str, seconds: float, bookies: list[int]
) -> dict[str, dict[str, float]]:
    """64 tasks appending values of ``kind`` (bytes, dataclass, struct), then a reader asking
    every record for its value."""
    schema, values = _typed_values(kind)
    out: dict[str, dict[str, float]] = {}
    async with Client.connect(url, wall_clock=None) as client:
        log = await Log.open(
            client, name, ensemble_size=3, write_quorum=3, ack_quorum=2, schema=schema
        )
        async with log.writer() as w:
            await w.append_batch(values)  # warm up connections
            turn = itertools.count()

            async def single() -> int:
                await w.append(values[next(turn) % 64])
                return 1

            meter = _Meter(bookies)
            count, elapsed, lat = await _timed(seconds, TASKS, single)
            out[f"{TASKS} tasks"] = _figures(count, elapsed, lat, *meter.read())
        meter = _Meter(bookies)
        t0 = time.perf_counter()
        count = 0
        async for record in log.reader("earliest", follow=False):
            record.value  # noqa: B018  (what a typed reader does with each record)
            count += 1
        out["tail reader"] = _figures(count, time.perf_counter() - t0, [], *meter.read())
    return out


def typed_costs() -> dict[str, float]:
    """µs per value, in this process: encoding with its check, and decoding."""
    import timeit

    from walkit._core.schema_codec import ValueCodec

    out: dict[str, float] = {}
    for kind in ("dataclass", "struct"):
        schema, values = _typed_values(kind)
        codec = ValueCodec(schema)
        payload = codec.encode(values[0])
        n = 20_000
        encode = functools.partial(codec.encode, values[0])
        decode = functools.partial(codec.decode, payload)
        out[f"{kind} encode+check"] = timeit.timeit(encode, number=n) / n
        out[f"{kind} decode"] = timeit.timeit(decode, number=n) / n
        out[f"{kind} bytes"] = len(payload)
    return {k: v * 1e6 if not k.endswith("bytes") else v for k, v in out.items()}


def measure_sync(
    url: str,
    name: str,
    size: int,
    seconds: float,
    bookies: list[int],
    records: str = "plain",
    **options: Any,
) -> dict[str, dict[str, float]]:
    """The same modes through walkit.sync: threads in place of tasks."""
    data, extras, batch_items = _workload(size, records)
    out: dict[str, dict[str, float]] = {}
    with walkit.sync.Client.connect(url, **_client_options(records)) as client:
        log = walkit.sync.Log.open(
            client, name, ensemble_size=3, write_quorum=3, ack_quorum=2, **options
        )
        with log.writer() as w:
            w.append_batch([data] * 64)

            def single() -> int:
                w.append(data, **extras)
                return 1

            def batch() -> int:
                w.append_batch(batch_items)
                return BATCH

            for mode, threads, one in (
                ("1 in flight", 1, single),
                (f"{TASKS} tasks", TASKS, single),
                (f"append_batch {BATCH}", 1, batch),
            ):
                meter = _Meter(bookies)
                count, elapsed, lat = _threaded(seconds, threads, one)
                out[mode] = _figures(count, elapsed, lat, *meter.read())
        meter = _Meter(bookies)
        t0 = time.perf_counter()
        count = sum(1 for _record in log.reader("earliest", follow=False))
        out["tail reader"] = _figures(count, time.perf_counter() - t0, [], *meter.read())
        log.close()
    return out


def measure_etcd(root: Path, seconds: float) -> dict[str, dict[str, float]]:
    from bench import _kv_load
    from bench._compare import cpu_seconds
    from bench._kv_peers import etcd_cluster

    out: dict[str, dict[str, float]] = {}
    with etcd_cluster(root) as (urls, pids):
        for mode, clients in (("1 in flight", 1), (f"{TASKS} tasks", TASKS)):
            _kv_load.run(urls[0], "etcd-put", seconds=1.0, connections=clients, tag="warm")
            members0 = cpu_seconds(pids)
            m = _kv_load.run(urls[0], "etcd-put", seconds=seconds, connections=clients)
            done = max(1.0, m["ok"])
            out[mode] = {
                "records_per_s": m["per_s"],
                "p50_ms": m["p50_ms"],
                "p99_ms": m["p99_ms"],
                "client_us": m["client_cpu_s"] / done * 1e6,
                "bookies_us": (cpu_seconds(pids) - members0) / done * 1e6,
            }
    return out


Modes = dict[str, dict[str, float]]  # mode -> figures


@attrs.define
class Results:
    disk: dict[str, float]  # fdatasync_4k's figures, measured in the same run
    runs: dict[tuple[str, int], Modes] = attrs.Factory(dict)  # (label, record size) -> modes
    #: Typed records: (kind, round) -> modes, and the codec's costs per value.
    typed: dict[tuple[str, int], Modes] = attrs.Factory(dict)
    typed_costs: dict[str, float] = attrs.Factory(dict)
    #: bench/_floor.py's figures (empty: not measured).
    floor: dict[str, float] = attrs.Factory(dict)


def run(args: argparse.Namespace) -> Results:
    with tempfile.TemporaryDirectory(prefix="log-bench-", dir=args.dir) as tmp:
        root = Path(tmp)
        results = Results(disk=fdatasync_4k(root))
        if args.floor and "uvloop" in args.fronts:
            results.floor = one_in_flight_floor(root, seconds=args.seconds)
        url = f"sqlite:///{root / 'metadata.db'}"
        procs = start_bookies(root, url, 3)
        try:
            pids = [p.pid for p in procs]
            for size in args.sizes:
                for front, records in itertools.product(args.fronts, args.records):
                    name = f"bench-{size}-{front}-{records}"
                    label = front if records == "plain" else f"{front}, {records}"
                    if front == "sync":
                        results.runs[(label, size)] = measure_sync(
                            url, name, size, args.seconds, pids, records
                        )
                        continue
                    backend, backend_options = ASYNC_FRONTS[front]
                    results.runs[(label, size)] = anyio.run(
                        functools.partial(
                            measure_log, url, name, size, args.seconds, pids, records
                        ),
                        backend=backend,
                        backend_options=backend_options,
                    )
                if args.baseline:
                    results.runs[("trio, one record per entry", size)] = trio.run(
                        functools.partial(
                            measure_log,
                            url,
                            f"bench-{size}-one",
                            size,
                            args.seconds,
                            pids,
                            batch_bytes=1,
                        )
                    )
            for round_ in range(args.typed):
                for kind in ("bytes", "dataclass", "struct"):  # alternating, as for metrics
                    results.typed[(kind, round_)] = trio.run(
                        functools.partial(
                            measure_typed,
                            url,
                            f"bench-typed-{kind}-{round_}",
                            kind,
                            args.seconds,
                            pids,
                        )
                    )
            if args.typed:
                results.typed_costs = typed_costs()
            for round_ in range(args.metrics):
                # Alternating, so that a drift of the machine (the disk, other load) falls on
                # both alike.
                for label, registry in (("off", None), ("on", CollectorRegistry())):
                    results.runs[(f"trio, metrics {label} #{round_ + 1}", args.sizes[0])] = (
                        trio.run(
                            functools.partial(
                                measure_log,
                                url,
                                f"bench-metrics-{label}-{round_}",
                                args.sizes[0],
                                args.seconds,
                                pids,
                                client_options={"metrics_registry": registry},
                            )
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
        "| front | size | mode | records/s | p50 ms | p99 ms | client µs | bookies µs |",
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
    rs = results.runs.get(("trio", 100))
    lines += _front_targets(results)
    lines += _uvloop_target(results)
    if rs is not None:
        lines += [
            "",
            "Targets, 100 B records: append_batch "
            f"{rs[f'append_batch {BATCH}']['records_per_s']:,.0f}/s (target 150,000); "
            f"{TASKS} tasks {rs[f'{TASKS} tasks']['records_per_s']:,.0f}/s (target 60,000); "
            f"1 in flight p50 {rs['1 in flight']['p50_ms']:.2f} ms (target "
            f"{2 * sync + 0.3:.2f} ms = 2 x fdatasync p50 + 0.3); tail reader "
            f"{rs['tail reader']['records_per_s']:,.0f}/s (target 500,000).",
        ]
    lines += _typed_report(results)
    if args.plot:
        lines += ["", f"![throughput against p99 latency]({SVG.name})"]
    return "\n".join(lines) + "\n"


def _median(xs: list[float]) -> float:
    ordered = sorted(xs)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _typed_report(results: Results) -> list[str]:
    """Typed records against bytes (medians of the rounds), and where the time goes."""
    if not results.typed:
        return []
    rounds = 1 + max(r for _, r in results.typed)
    lines = [
        "",
        f"Typed records (trio, 100 B-class values, {rounds} round(s) alternating bytes, "
        "dataclass and msgspec Struct; medians):",
        "",
        "| records | 64 tasks records/s | p50 ms | client µs | tail reader records/s (value "
        "read) | client µs | vs bytes: append | vs bytes: read |",
        "|---|---|---|---|---|---|---|---|",
    ]
    many = f"{TASKS} tasks"

    def med(kind: str, mode: str, key: str) -> float:
        return _median([results.typed[(kind, r)][mode][key] for r in range(rounds)])

    base_append = med("bytes", many, "records_per_s")
    base_read = med("bytes", "tail reader", "records_per_s")
    for kind in ("bytes", "dataclass", "struct"):
        append = med(kind, many, "records_per_s")
        read = med(kind, "tail reader", "records_per_s")
        lines.append(
            f"| {kind} | {append:,.0f} | {med(kind, many, 'p50_ms'):.2f} | "
            f"{med(kind, many, 'client_us'):.1f} | {read:,.0f} | "
            f"{med(kind, 'tail reader', 'client_us'):.1f} | {append / base_append:.2f}x | "
            f"{read / base_read:.2f}x |"
        )
    costs = results.typed_costs
    if costs:
        lines += [
            "",
            "Where the time goes (this process, one value of "
            f"{costs['dataclass bytes']:.0f} B): encoding with its check "
            f"{costs['dataclass encode+check']:.2f} µs for the dataclass, "
            f"{costs['struct encode+check']:.2f} µs for the Struct (the check decodes what "
            "was encoded, so that a field of the wrong type fails the append); decoding "
            f"{costs['dataclass decode']:.2f} µs and {costs['struct decode']:.2f} µs. "
            "Targets: append at 64 tasks >= 0.7x bytes, read >= 0.5x.",
        ]
    return lines


def _uvloop_target(results: Results) -> list[str]:
    """The log at one append in flight on asyncio with uvloop, 100 B, against the disk's
    fdatasync p50 measured in the same run (target: at most 0.35 ms above it)."""
    modes = results.runs.get(("uvloop", 100))
    if modes is None:
        return []
    p50, sync = modes["1 in flight"]["p50_ms"], results.disk["fdatasync_4k_p50_ms"]
    lines = [
        "",
        f"uvloop, 100 B, 1 in flight: p50 {p50:.2f} ms = the disk's fdatasync p50 {sync:.2f} ms "
        f"{p50 - sync:+.2f} ms (target: at most +0.35 ms).",
    ]
    if results.floor:
        floor = results.floor["floor_p50_ms"]
        lines[-1] += (
            f" The floor of that shape on this machine (bench/_floor.py: three minimal uvloop "
            f"servers doing the journal's O_DSYNC write, a client waiting for two): p50 "
            f"{floor:.2f} ms; walkit's own share {p50 - floor:.2f} ms."
        )
    return lines


def _front_targets(results: Results) -> list[str]:
    """Each front against trio, 100 B: the targets of the asyncio and sync fronts."""
    trio_modes = results.runs.get(("trio", 100))
    if trio_modes is None:
        return []
    many, single = f"{TASKS} tasks", "1 in flight"
    lines = ["", "Fronts against trio (100 B, same run):", ""]
    for front in ("asyncio", "uvloop", "sync"):
        modes = results.runs.get((front, 100))
        if modes is None:
            continue
        rate = modes[many]["records_per_s"] / trio_modes[many]["records_per_s"]
        reader = modes["tail reader"]["records_per_s"] / trio_modes["tail reader"]["records_per_s"]
        p50 = (modes[single]["p50_ms"] - trio_modes[single]["p50_ms"]) * 1e3
        if front == "sync":
            target = "targets: 64 threads >= 50 %, 1-in-flight p50 within 100 µs"
        else:
            target = "targets: >= 90 % at 64 tasks and reading, p50 within 50 µs"
        lines.append(
            f"- {front}: {many} {rate:.0%} of trio's, tail reader {reader:.0%}, 1-in-flight "
            f"p50 {p50:+.0f} µs ({target})."
        )
    return lines


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


def _record_kinds(text: str) -> list[str]:
    kinds = text.split(",")
    for kind in kinds:
        if kind not in ("plain", "stamped", "keyed"):
            raise argparse.ArgumentTypeError(f"{kind!r}: expected plain, stamped or keyed")
    return kinds


def _available_fronts() -> list[str]:
    fronts = ["trio", "asyncio"]
    try:
        import uvloop  # noqa: F401
    except ImportError:
        pass
    else:
        fronts.append("uvloop")
    return [*fronts, "sync"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument(
        "--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[100, 1024]
    )
    parser.add_argument("--dir", default=None, help="where the bookies keep their data")
    parser.add_argument(
        "--fronts",
        type=lambda s: s.split(","),
        default=_available_fronts(),
        help="trio, asyncio, uvloop (if installed), sync; default: all available",
    )
    parser.add_argument(
        "--records",
        type=_record_kinds,
        default=["plain"],
        help="what records carry: plain (default), stamped (a wall clock), keyed (and a key "
        "and a header); several separated by commas",
    )
    parser.add_argument("--no-append", dest="append", action="store_false")
    parser.add_argument("--no-etcd", dest="etcd", action="store_false")
    parser.add_argument(
        "--no-floor",
        dest="floor",
        action="store_false",
        help="skip bench/_floor.py (the floor of one append in flight, with uvloop)",
    )
    parser.add_argument(
        "--no-baseline",
        dest="baseline",
        action="store_false",
        help="skip the one-record-per-entry runs",
    )
    parser.add_argument("--plot", action="store_true", help=f"draw {SVG.name} (matplotlib)")
    parser.add_argument(
        "--typed",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="also measure typed records (dataclass, msgspec Struct) against bytes, alternating",
    )
    parser.add_argument(
        "--metrics",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="also measure the client's metrics: rounds without and with a registry, alternating",
    )
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
