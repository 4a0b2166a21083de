"""Benchmark the replicated KV service (examples/kv_store.py serve) beside etcd 3.4.

- PUT/s and p50/p99 latency over HTTP/1.1 with 64 concurrent keep-alive clients, 100 B values,
  three replicas on three bookie processes (E=Qw=3, Qa=2, sqlite metadata), all to the leader;
- the same load on a 3-member etcd cluster on loopback (its HTTP JSON gateway, ``/v3/kv/put``,
  sent to the leader), if ``etcd`` is installed (Debian ``etcd-server``), in the same run;
- failover time: SIGKILL of the leader to the first PUT acknowledged by the new leader (a
  client retrying every 10 ms on the other replicas, following redirects), with the default
  lease (1 s) and the shortest documented one (0.3 s).

The load client is the same for both (h11 on trio, in this process). Figures are medians of
``--runs`` runs.

    python bench/kv.py [--runs 3] [--seconds 5] [--no-append] [--quick]
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import h11
import trio

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests._cluster import free_port, process_cluster  # noqa: E402
from tests.kv._replicas import ReplicaProcess  # noqa: E402

DOCS = ROOT / "docs" / "benchmarks.md"
CLIENTS = 64
VALUE = b"v" * 100

RequestMaker = Callable[[int, int], tuple[str, str, bytes]]


def _cpu(pids: list[int]) -> float:
    """User+system CPU seconds of these processes so far."""
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


# --- the load client ---------------------------------------------------------------------------


async def _connection(
    address: tuple[str, int],
    make: RequestMaker,
    client: int,
    start_at: float,
    stop_at: float,
    latencies: list[float],
    failures: list[int],
    done: list[int],
) -> None:
    host, port = address
    stream = await trio.open_tcp_stream(host, port)
    conn = h11.Connection(h11.CLIENT)
    i = 0
    try:
        while True:
            now = time.perf_counter()
            if now >= stop_at:
                return
            i += 1
            method, target, body = make(client, i)
            data = conn.send(
                h11.Request(
                    method=method,
                    target=target,
                    headers=[("host", f"{host}:{port}"), ("content-length", str(len(body)))],
                )
            )
            data += conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
            t0 = time.perf_counter()
            await stream.send_all(data)
            status = 0
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await stream.receive_some(65536))
                    continue
                if isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    raise RuntimeError("server closed the connection")
            t1 = time.perf_counter()
            done[0] += status == 200
            if t0 >= start_at:
                if status == 200:
                    latencies.append(t1 - t0)
                else:
                    failures.append(status)
            conn.start_next_cycle()
    finally:
        await stream.aclose()


async def load(
    address: tuple[str, int],
    make: RequestMaker,
    warmup: float,
    seconds: float,
    clients: int = CLIENTS,
) -> dict[str, float]:
    latencies: list[float] = []
    failures: list[int] = []
    done = [0]  # every 200, warm-up included (for the CPU per PUT)
    start_at = time.perf_counter() + warmup
    stop_at = start_at + seconds
    async with trio.open_nursery() as nursery:
        for c in range(clients):
            nursery.start_soon(
                _connection, address, make, c, start_at, stop_at, latencies, failures, done
            )
    return {
        "all_ok": float(done[0]),
        "puts_per_s": len(latencies) / seconds,
        "p50_ms": _percentile(latencies, 0.5) * 1e3,
        "p99_ms": _percentile(latencies, 0.99) * 1e3,
        "failures": float(len(failures)),
    }


def kv_put(client: int, i: int) -> tuple[str, str, bytes]:
    return "PUT", f"/v1/kv/c{client}-{i % 1000}", VALUE


def etcd_put(client: int, i: int) -> tuple[str, str, bytes]:
    key = base64.b64encode(f"c{client}-{i % 1000}".encode()).decode()
    body = json.dumps({"key": key, "value": base64.b64encode(VALUE).decode()}).encode()
    return "POST", "/v3/kv/put", body


# --- the KV service ------------------------------------------------------------------------------


def _http(
    method: str, url: str, body: bytes | None = None, timeout: float = 2.0
) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # follows 307
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


def _leader(reps: list[ReplicaProcess], timeout: float = 30.0) -> ReplicaProcess:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in reps:
            if not r.running:
                continue
            code, body = _http("GET", f"{r.base}/v1/status", timeout=0.5)
            if code == 200 and json.loads(body)["role"] == "leader":
                return r
        time.sleep(0.02)
    raise RuntimeError("no leader")


@contextmanager
def kv_service(root: Path, lease: float) -> Iterator[tuple[list[ReplicaProcess], list[int]]]:
    """Three bookies and three replicas; yields the replicas and the bookies' pids."""
    root.mkdir(parents=True, exist_ok=True)
    url = f"sqlite://{root / 'metadata.db'}"
    with process_cluster(url, root, 3) as cluster:
        reps = [
            ReplicaProcess(url, free_port(), "--lease-timeout", str(lease), log="bench")
            for _ in range(3)
        ]
        try:
            for r in reps:
                r.start()
            yield reps, [b.process.pid for b in cluster.bookies if b.process is not None]
        finally:
            for r in reps:
                r.stop()


def failover_once(reps: list[ReplicaProcess]) -> float:
    """SIGKILL the leader; seconds until a PUT on another replica gets a 200 (the killed one
    is restarted afterwards, as a follower)."""
    old = _leader(reps)
    others = [r for r in reps if r is not old]
    assert _http("PUT", f"{old.base}/v1/kv/before", b"x")[0] == 200
    killed = time.perf_counter()
    old.kill()
    n = 0
    while True:
        n += 1
        target = others[n % len(others)]
        code, _ = _http("PUT", f"{target.base}/v1/kv/after", b"y", timeout=1.0)
        if code == 200:
            elapsed = time.perf_counter() - killed
            break
        time.sleep(0.01)
    old.start()
    return elapsed


# --- etcd --------------------------------------------------------------------------------------


@contextmanager
def etcd_cluster(root: Path) -> Iterator[tuple[list[tuple[str, int]], list[int]]]:
    clients = [free_port() for _ in range(3)]
    peers = [free_port() for _ in range(3)]
    initial = ",".join(f"e{i}=http://127.0.0.1:{peers[i]}" for i in range(3))
    procs = []
    try:
        for i in range(3):
            args = [
                "etcd", "--name", f"e{i}", "--data-dir", str(root / f"etcd-{i}"),
                "--listen-client-urls", f"http://127.0.0.1:{clients[i]}",
                "--advertise-client-urls", f"http://127.0.0.1:{clients[i]}",
                "--listen-peer-urls", f"http://127.0.0.1:{peers[i]}",
                "--initial-advertise-peer-urls", f"http://127.0.0.1:{peers[i]}",
                "--initial-cluster", initial, "--initial-cluster-state", "new",
                "--initial-cluster-token", "bench", "--log-level", "error",
            ]  # fmt: skip
            procs.append(
                subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
        addresses = [("127.0.0.1", p) for p in clients]
        deadline = time.monotonic() + 30
        while True:
            code, body = _http(
                "POST", f"http://127.0.0.1:{clients[0]}/v3/maintenance/status", b"{}", 1.0
            )
            if code == 200 and json.loads(body).get("leader"):
                leader_id = json.loads(body)["leader"]
                break
            if time.monotonic() > deadline:
                raise RuntimeError("etcd did not start")
            time.sleep(0.1)
        for address in addresses:
            code, body = _http(
                "POST", f"http://{address[0]}:{address[1]}/v3/maintenance/status", b"{}"
            )
            if json.loads(body)["header"]["member_id"] == leader_id:
                addresses.remove(address)
                addresses.insert(0, address)
                break
        yield addresses, [p.pid for p in procs]  # the leader first
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


# --- runs --------------------------------------------------------------------------------------


def run_once(seconds: float, failovers: int) -> dict[str, float]:
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="kv-bench-") as tmp:
        with kv_service(Path(tmp) / "kv", 1.0) as (reps, bookies):
            leader = _leader(reps)
            groups = {
                "leader": [_pid(leader)],
                "followers": [_pid(r) for r in reps if r is not leader],
                "bookies": bookies,
            }
            m = _measure(("127.0.0.1", leader.port), kv_put, seconds, groups)
            out.update({f"kv_{k}": v for k, v in m.items()})
            times = [failover_once(reps) for _ in range(failovers)]
            out["failover_default_s"] = statistics.median(times)
        with kv_service(Path(tmp) / "kv-short", 0.3) as (reps, _bookies):
            times = [failover_once(reps) for _ in range(failovers)]
            out["failover_short_s"] = statistics.median(times)
        if shutil.which("etcd"):
            with etcd_cluster(Path(tmp)) as (addresses, pids):
                m = _measure(addresses[0], etcd_put, seconds, {"members": pids})
                out.update({f"etcd_{k}": v for k, v in m.items()})
    return out


def _pid(replica: ReplicaProcess) -> int:
    assert replica.process is not None
    return replica.process.pid


def _measure(
    address: tuple[str, int], make: RequestMaker, seconds: float, groups: dict[str, list[int]]
) -> dict[str, float]:
    """The load, and the CPU per PUT (µs) of each group of processes and of the client."""
    before = {name: _cpu(pids) for name, pids in groups.items()}
    client = time.process_time()
    m = trio.run(load, address, make, 1.0, seconds)
    client = time.process_time() - client
    ok = max(1.0, m.pop("all_ok"))
    for name, pids in groups.items():
        m[f"cpu_{name}_us"] = (_cpu(pids) - before[name]) / ok * 1e6
    m["cpu_client_us"] = client / ok * 1e6
    return m


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--failovers", type=int, default=3, help="kills per lease, per run")
    parser.add_argument("--no-append", action="store_true", help="do not touch docs/")
    parser.add_argument("--quick", action="store_true", help="1 run of 2 s, 1 failover each")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.seconds, args.failovers = 1, 2.0, 1
    runs = []
    for i in range(args.runs):
        result = run_once(args.seconds, args.failovers)
        print(f"run {i + 1}: " + ", ".join(f"{k}={v:.3f}" for k, v in result.items()), flush=True)
        runs.append(result)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    text = report(med, runs, args)
    print(text)
    if not args.no_append:
        with DOCS.open("a") as f:
            f.write("\n" + text)


def report(med: dict[str, float], runs: list[dict[str, float]], args: argparse.Namespace) -> str:
    today = datetime.date.today().isoformat()
    load = os.getloadavg()[0]

    def spread(key: str, fmt: str) -> str:
        values = [r[key] for r in runs]
        return f"{format(med[key], fmt)} [{format(min(values), fmt)}-{format(max(values), fmt)}]"

    lines = [
        f"## KV service over HTTP, beside etcd ({today})",
        "",
        f"`python bench/kv.py --runs {args.runs} --seconds {args.seconds}` on "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()} "
        f"(load average {load:.1f} at the end); medians of {args.runs} runs [min-max]. "
        f"{CLIENTS} keep-alive HTTP/1.1 clients (h11 on trio, in one process), 100 B values, "
        "PUTs to the leader. walkit: 3 replicas of `examples/kv_store.py serve` on 3 bookie "
        "processes, E=Qw=3 Qa=2, sqlite metadata. etcd 3.4 (Debian `etcd-server`): 3 members on "
        "loopback, its HTTP JSON gateway `POST /v3/kv/put`, to the leader. Failover: SIGKILL "
        "of the leader to the first PUT acknowledged by the new leader (a client retrying every "
        f"10 ms), {args.failovers} kill(s) per run.",
        "",
        "| system | PUT/s | p50 ms | p99 ms |",
        "|---|---|---|---|",
        f"| walkit KV | {spread('kv_puts_per_s', ',.0f')} | {med['kv_p50_ms']:.1f} | "
        f"{med['kv_p99_ms']:.1f} |",
    ]
    if "etcd_puts_per_s" in med:
        lines.append(
            f"| etcd 3.4 gateway | {spread('etcd_puts_per_s', ',.0f')} | "
            f"{med['etcd_p50_ms']:.1f} | {med['etcd_p99_ms']:.1f} |"
        )
    lines.append("")
    cpu = (
        f"- CPU per PUT (user+system µs): walkit leader {med['kv_cpu_leader_us']:.0f}, "
        f"2 followers {med['kv_cpu_followers_us']:.0f}, 3 bookies {med['kv_cpu_bookies_us']:.0f}, "
        f"load client {med['kv_cpu_client_us']:.0f}"
    )
    if "etcd_puts_per_s" in med:
        cpu += (
            f"; etcd's 3 members {med['etcd_cpu_members_us']:.0f}, "
            f"load client {med['etcd_cpu_client_us']:.0f}"
        )
    lines.append(cpu + ".")
    if "etcd_puts_per_s" in med:
        ratio = med["kv_puts_per_s"] / med["etcd_puts_per_s"]
        lines.append(f"- PUT rate: {ratio:.2f}x etcd's in the same run (target >= 2x).")
    lines.append(
        f"- Failover, default lease (1 s): {spread('failover_default_s', '.2f')} s (target <= 2 s)."
    )
    lines.append(
        f"- Failover, shortest lease (0.3 s): {spread('failover_short_s', '.2f')} s "
        "(target <= 0.5 s)."
    )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
