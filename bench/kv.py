"""Benchmark the replicated KV service (examples/kv_store.py serve) beside etcd 3.4, in one run.

- PUTs: 64 keep-alive connections, 100 B values to distinct keys, to the leader: three replicas
  on three bookie processes (E=Qw=3, Qa=2, sqlite metadata) against a 3-member etcd on
  loopback (its HTTP JSON gateway, ``POST /v3/kv/put`` with base64 key and value, to the
  leader). PUT/s, p50/p99, non-2xx answers, and the server CPU per PUT (every server
  process: replicas and bookies, etcd's members).
- GETs of keys the PUTs wrote: serializable (a follower's applied state, against etcd's
  ``serializable`` range reads on a follower) and linearizable (the leader, against etcd's
  default range reads on its leader).
- Failover: SIGKILL of the leader to the first PUT acknowledged by the new leader (a client
  retrying every 10 ms on the other replicas), with the default lease (1 s) and the shortest
  documented one (0.3 s).

The load generator is wrk (``--load wrk``, the default: C, ~10-20 µs of CPU per request, with
bench/kv_wrk.lua; wrk and etcd are installed by scripts/install-bench-peers.sh when missing) or
the Python client (``--load python``: h11 on trio in this process, ~180 µs per request, which
takes a large share of a 2-core machine from both systems alike). The systems take turns
within a run, in an order that rotates from run to run; each run records the load average and
the disk's fdatasync rate. ``--compare-tree DIR`` adds the service as another checkout has it
(its example and its walkit), for a before/after in the same run. ``--http-servers
kv_http,uvicorn-httptools,uvicorn-h11`` runs the service on each HTTP server in the turns
(``kv_store.py serve --http-server``), with ratios to kv_http's.

    python bench/kv.py [--runs 3] [--seconds 5] [--load wrk|python] [--no-append] [--quick]
        [--http-servers kv_http,uvicorn-httptools,uvicorn-h11] [--no-etcd]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import shutil
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _compare, _kv_load, _wrk  # noqa: E402
from bench._compare import cpu_seconds  # noqa: E402
from bench._kv_peers import (  # noqa: E402
    etcd_cluster,
    failover_once,
    kv_service,
    leader_of,
    pid,
    wait_caught_up,
)
from bench._limits import fdatasync_4k  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
CONNECTIONS = 64
VALUE_SIZE = 100
WARMUP = 1.0
#: The other HTTP servers the service may run on (``--http-servers``).
UVICORN = ("uvicorn-httptools", "uvicorn-h11")
PHASES = ("put", "get_serializable", "get_linearizable")
MODES = {
    "walkit": {"put": "kv-put", "get_serializable": "kv-get", "get_linearizable": "kv-get"},
    "etcd": {
        "put": "etcd-put",
        "get_serializable": "etcd-get-serializable",
        "get_linearizable": "etcd-get",
    },
}

Load = Callable[..., dict[str, float]]
Result = dict[str, float]


def _phase(
    load: Load,
    url: str,
    mode: str,
    tag: str,
    seconds: float,
    groups: dict[str, list[int]],
    connections: int,
) -> Result:
    """A warm-up, then the measured load with the CPU of each group of processes per
    answered request (µs)."""
    warm_tag = f"w{tag}" if mode.endswith("put") else tag
    load(url, mode, seconds=WARMUP, connections=connections, tag=warm_tag)
    before = {name: cpu_seconds(pids) for name, pids in groups.items()}
    m = load(url, mode, seconds=seconds, connections=connections, tag=tag)
    ok = max(1.0, m["ok"])
    total = 0.0
    for name, pids in groups.items():
        used = cpu_seconds(pids) - before[name]
        m[f"cpu_{name}_us"] = used / ok * 1e6
        total += used
    m["cpu_us"] = total / ok * 1e6
    m["cpu_client_us"] = m.pop("client_cpu_s") / ok * 1e6
    return m


def _walkit(
    args: argparse.Namespace,
    load: Load,
    tmp: Path,
    tag: str,
    tree: Path | None,
    server: str = "kv_http",
) -> Result:
    out: Result = {}
    extra = tuple(shlex.split(args.serve_args if tree is None else args.compare_args))
    if server != "kv_http":
        extra += ("--http-server", server)
    with kv_service(tmp / f"kv-{tag}", 1.0, tree, extra) as (reps, bookies):
        leader = leader_of(reps)
        followers = [r for r in reps if r is not leader]
        groups = {
            "leader": [pid(leader)],
            "followers": [pid(r) for r in followers],
            "bookies": bookies,
        }
        targets = {"put": leader, "get_serializable": followers[0], "get_linearizable": leader}
        for phase in PHASES:
            if phase != "put" and args.no_gets:
                continue
            if phase == "get_serializable":
                wait_caught_up(leader, followers[0])
            m = _phase(
                load,
                targets[phase].base,
                MODES["walkit"][phase],
                tag,
                args.seconds,
                groups,
                args.connections,
            )
            out.update({f"{phase}_{k}": v for k, v in m.items()})
        if tree is None and server == "kv_http" and args.failovers:
            times = [failover_once(reps) for _ in range(args.failovers)]
            out["failover_default_s"] = statistics.median(times)
    if tree is None and server == "kv_http" and args.failovers:
        with kv_service(tmp / f"kv-short-{tag}", 0.3) as (reps, _bookies):
            times = [failover_once(reps) for _ in range(args.failovers)]
            out["failover_short_s"] = statistics.median(times)
    return out


def _etcd(args: argparse.Namespace, load: Load, tmp: Path, tag: str) -> Result:
    out: Result = {}
    with etcd_cluster(tmp / f"etcd-{tag}") as (urls, pids):
        targets = {"put": urls[0], "get_serializable": urls[1], "get_linearizable": urls[0]}
        for phase in PHASES:
            if phase != "put" and args.no_gets:
                continue
            m = _phase(
                load,
                targets[phase],
                MODES["etcd"][phase],
                tag,
                args.seconds,
                {"members": pids},
                args.connections,
            )
            out.update({f"{phase}_{k}": v for k, v in m.items()})
    return out


def run_once(index: int, args: argparse.Namespace) -> dict[str, Result]:
    load: Load = _wrk.run if args.load == "wrk" else _kv_load.run
    systems: list[tuple[str, Callable[[Path, str], Result]]] = [
        ("walkit", lambda tmp, tag: _walkit(args, load, tmp, tag, None))
    ]

    def on(server: str) -> Callable[[Path, str], Result]:
        return lambda tmp, tag: _walkit(args, load, tmp, tag, None, server)

    systems += [(server, on(server)) for server in args.http_servers if server != "kv_http"]
    if args.compare_tree is not None:
        tree = args.compare_tree
        systems.append(("before", lambda tmp, tag: _walkit(args, load, tmp, tag, tree)))
    if shutil.which("etcd") and not args.no_etcd:
        systems.append(("etcd", lambda tmp, tag: _etcd(args, load, tmp, tag)))
    systems = _compare.rotated(systems, index)  # each system goes first in some run
    out: dict[str, Result] = {}
    with tempfile.TemporaryDirectory(prefix="kv-bench-") as tmp:
        machine = {"load_1m": os.getloadavg()[0]}
        machine.update(fdatasync_4k(tmp, seconds=1.0))
        for name, go in systems:
            out[name] = go(Path(tmp), f"{name}-r{index}")  # (own dirs: "before" is walkit too)
        machine["load_1m_end"] = os.getloadavg()[0]
        out["machine"] = machine
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--load", choices=["wrk", "python"], default="wrk")
    parser.add_argument("--connections", type=int, default=CONNECTIONS)
    parser.add_argument("--failovers", type=int, default=3, help="kills per lease, per run")
    parser.add_argument("--no-gets", action="store_true", help="PUTs only")
    parser.add_argument("--no-etcd", action="store_true", help="the walkit service only")
    _compare.add_argument(parser, "the service (its example and its walkit)")
    parser.add_argument(
        "--serve-args", default="", metavar="ARGS", help="more options for the replicas"
    )
    parser.add_argument(
        "--compare-args", default="", metavar="ARGS", help="more options for the compared tree's"
    )
    parser.add_argument(
        "--http-servers",
        type=lambda text: [s for s in text.split(",") if s],
        default=["kv_http"],
        metavar="LIST",
        help="also run the service on these HTTP servers (comma-separated: kv_http, "
        "uvicorn-httptools, uvicorn-h11), each its own system in the turns",
    )
    parser.add_argument("--no-append", action="store_true", help="do not touch docs/")
    parser.add_argument("--quick", action="store_true", help="1 run of 2 s, 1 failover each")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.seconds, args.failovers = 1, 2.0, 1
    if args.load == "wrk" or not args.no_etcd:
        _wrk.ensure_installed()
    runs = []
    for i in range(args.runs):
        result = run_once(i, args)
        for name, values in result.items():
            print(
                f"run {i + 1} {name}: " + ", ".join(f"{k}={v:.3f}" for k, v in values.items()),
                flush=True,
            )
        runs.append(result)
    text = report(runs, args)
    print(text)
    if not args.no_append:
        with DOCS.open("a") as f:
            f.write("\n" + text)


# --- the report ------------------------------------------------------------------------------------


def _median(runs: list[dict[str, Result]], system: str, key: str) -> float:
    values = [r[system][key] for r in runs if key in r.get(system, {})]
    return statistics.median(values) if values else float("nan")


def _row(run: str, system: str, r: Result, gets: bool) -> str:
    cells = [
        run,
        system,
        f"{r['put_per_s']:,.0f}",
        f"{r['put_p50_ms']:.1f} / {r['put_p99_ms']:.1f}",
        f"{r['put_non_2xx'] + r['put_errors']:.0f}",
        f"{r['put_cpu_us']:.0f}",
    ]
    if gets:
        for phase in ("get_serializable", "get_linearizable"):
            cells.append(f"{r[f'{phase}_per_s']:,.0f} ({r[f'{phase}_p99_ms']:.1f})")
    return "| " + " | ".join(cells) + " |"


def report(runs: list[dict[str, Result]], args: argparse.Namespace) -> str:
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    systems = [s for s in ("walkit", *UVICORN, "before", "etcd") if s in runs[0]]
    names = {"walkit": "walkit KV", "before": "walkit KV (before)", "etcd": "etcd 3.4 gateway"}
    names.update({s: f"walkit KV on {s}" for s in UVICORN})
    gets = not args.no_gets
    loader = (
        "wrk (bench/kv_wrk.lua, 2 threads)"
        if args.load == "wrk"
        else "the Python client (h11 on trio, in the benchmark's process)"
    )
    lines = [
        f"## KV service beside etcd, {args.load} load ({now})",
        "",
        f"`python bench/kv.py {shlex.join(sys.argv[1:])}` on {platform.machine()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}. {args.connections} "
        f"keep-alive connections from {loader}, {VALUE_SIZE} B values, PUTs to distinct keys on "
        f"the leader for {args.seconds:g} s after a {WARMUP:g} s warm-up. walkit: 3 replicas of "
        "`examples/kv_store.py serve` on 3 bookie processes, E=Qw=3 Qa=2, sqlite metadata. "
        "etcd 3.4 (Debian `etcd-server`): 3 members, JSON gateway (`POST /v3/kv/put`, "
        "`/v3/kv/range`). Server CPU per PUT: user+system of every server process (replicas "
        "and bookies; etcd's members) over the measured seconds, per 2xx answer. GETs read keys "
        "the PUTs wrote: serializable on a follower (etcd: `serializable: true`), "
        "linearizable on the leader (etcd's default range read). Cells: rate (p99 ms).",
        "",
    ]
    head = "| run (load) | system | PUT/s | PUT p50 / p99 ms | non-2xx | server CPU µs/PUT |"
    rule = "|---|---|---|---|---|---|"
    if gets:
        head += " serializable GET/s | linearizable GET/s |"
        rule += "---|---|"
    lines += [head, rule]
    for i, r in enumerate(runs):
        m = r["machine"]
        label = f"{i + 1} ({m['load_1m']:.1f}-{m['load_1m_end']:.1f})"
        for s in systems:
            lines.append(_row(label, names[s], r[s], gets))
    lines.append("")
    disk = [r["machine"]["fdatasync_4k_per_s"] for r in runs]
    lines.append(
        f"- Load average (1 min) at the start and end of each run in the first column; "
        f"4 KiB fdatasync {min(disk):,.0f}-{max(disk):,.0f}/s in the same runs."
    )
    if "etcd" in systems:
        for ours in [s for s in systems if s != "etcd"]:
            ratios = [r[ours]["put_per_s"] / r["etcd"]["put_per_s"] for r in runs]
            text = (
                f"- {names[ours]} / etcd, per run: PUT/s "
                + ", ".join(f"{x:.2f}x" for x in ratios)
                + " (target >= 1.5x); PUT p99 "
                + ", ".join(
                    f"{r[ours]['put_p99_ms']:.1f} vs {r['etcd']['put_p99_ms']:.1f} ms" for r in runs
                )
            )
            if gets:
                for phase, target in (("get_serializable", 2), ("get_linearizable", 1)):
                    ratios = [r[ours][f"{phase}_per_s"] / r["etcd"][f"{phase}_per_s"] for r in runs]
                    text += (
                        f"; {phase.replace('get_', '')} GET/s "
                        + ", ".join(f"{x:.2f}x" for x in ratios)
                        + f" (target >= {target}x)"
                    )
            lines.append(text + ".")
    for s in systems:
        groups = sorted(
            k.removeprefix("put_cpu_").removesuffix("_us")
            for k in runs[0][s]
            if k.startswith("put_cpu_") and k not in ("put_cpu_us", "put_cpu_client_us")
        )
        parts = ", ".join(f"{g} {_median(runs, s, f'put_cpu_{g}_us'):.0f}" for g in groups)
        lines.append(
            f"- {names[s]}, CPU per PUT (µs, medians): servers {_median(runs, s, 'put_cpu_us'):.0f}"
            f" ({parts}); the load generator {_median(runs, s, 'put_cpu_client_us'):.0f}."
        )
    for server in [s for s in systems if s in UVICORN]:
        cells = []
        for phase in PHASES:
            ratios = [r[server][f"{phase}_per_s"] / r["walkit"][f"{phase}_per_s"] for r in runs]
            p99 = [
                f"{r[server][f'{phase}_p99_ms']:.1f} vs {r['walkit'][f'{phase}_p99_ms']:.1f}"
                for r in runs
            ]
            cells.append(
                f"{phase.replace('get_', 'GET ').replace('put', 'PUT')}/s "
                + ", ".join(f"{x:.2f}x" for x in ratios)
                + f" (p99 ms {', '.join(p99)})"
            )
            if gets is False:
                break
        lines.append(f"- {names[server]} / on kv_http, per run: " + "; ".join(cells) + ".")
    if "failover_default_s" in runs[0]["walkit"]:
        for key, lease, bound in (
            ("failover_default_s", "default lease (1 s)", "2"),
            ("failover_short_s", "shortest lease (0.3 s)", "0.5"),
        ):
            values = [r["walkit"][key] for r in runs]
            lines.append(
                f"- Failover, {lease}: medians per run "
                + ", ".join(f"{v:.2f}" for v in values)
                + f" s (target <= {bound} s; {args.failovers} kill(s) per run)."
            )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
