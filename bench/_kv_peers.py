"""The systems bench/kv.py drives: the walkit KV service (three replicas of
``examples/kv_store.py serve`` on three bookie processes) and a three-member etcd 3.4, both on
loopback; their processes' CPU; the failover measurement."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench._compare import tree_command
from tests._cluster import free_port, process_cluster
from tests.kv._replicas import ReplicaProcess


def http(
    method: str, url: str, body: bytes | None = None, timeout: float = 2.0
) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # follows 307
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


# --- the walkit KV service -----------------------------------------------------------------------


class TreeReplica(ReplicaProcess):
    """A replica run from another checkout (``tree``): its example and its walkit, for a
    before/after comparison in one run."""

    def __init__(self, tree: Path, metadata_url: str, port: int, *extra: str, log: str) -> None:
        super().__init__(metadata_url, port, *extra, log=log)
        self.tree = tree

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[1] = str(self.tree / "examples" / "kv_store.py")
        return tree_command(self.tree, cmd)


def leader_of(reps: list[ReplicaProcess], timeout: float = 30.0) -> ReplicaProcess:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in reps:
            if not r.running:
                continue
            code, body = http("GET", f"{r.base}/v1/status", timeout=0.5)
            if code == 200 and json.loads(body)["role"] == "leader":
                return r
        time.sleep(0.02)
    raise RuntimeError("no leader")


def wait_caught_up(leader: ReplicaProcess, follower: ReplicaProcess, timeout: float = 60) -> None:
    """Until ``follower`` has applied what ``leader`` had applied when this was called."""
    target = json.loads(http("GET", f"{leader.base}/v1/status")[1])["applied"]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        code, body = http("GET", f"{follower.base}/v1/status", timeout=1.0)
        if code == 200 and _position(json.loads(body)["applied"]) >= _position(target):
            return
        time.sleep(0.05)
    raise RuntimeError(f"follower {follower.address} did not catch up with {target}")


def _position(text: str) -> tuple[int, ...]:
    return (-1,) if text == "earliest" else tuple(int(x) for x in text.split(":"))


@contextmanager
def kv_service(
    root: Path, lease: float, tree: Path | None = None, extra: tuple[str, ...] = ()
) -> Iterator[tuple[list[ReplicaProcess], list[int]]]:
    """Three bookies and three replicas; yields the replicas and the bookies' pids."""
    root.mkdir(parents=True, exist_ok=True)
    url = f"sqlite://{root / 'metadata.db'}"
    with process_cluster(url, root, 3) as cluster:
        args = ("--lease-timeout", str(lease), *extra)
        reps: list[ReplicaProcess] = [
            ReplicaProcess(url, free_port(), *args, log="bench")
            if tree is None
            else TreeReplica(tree, url, free_port(), *args, log="bench")
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
    deadline = time.monotonic() + 60
    while True:  # a leader that answers (a loaded machine may have moved the lead)
        old = leader_of(reps)
        if http("PUT", f"{old.base}/v1/kv/before", b"x", timeout=5.0)[0] == 200:
            break
        if time.monotonic() > deadline:
            raise RuntimeError("no leader acknowledges a PUT")
    others = [r for r in reps if r is not old]
    killed = time.perf_counter()
    old.kill()
    n = 0
    while True:
        n += 1
        target = others[n % len(others)]
        code, _ = http("PUT", f"{target.base}/v1/kv/after", b"y", timeout=1.0)
        if code == 200:
            elapsed = time.perf_counter() - killed
            break
        time.sleep(0.01)
    old.start()
    return elapsed


def pid(replica: ReplicaProcess) -> int:
    assert replica.process is not None
    return replica.process.pid


# --- etcd ----------------------------------------------------------------------------------------


@contextmanager
def etcd_cluster(root: Path) -> Iterator[tuple[list[str], list[int]]]:
    """Three etcd members on loopback; yields their client URLs (the leader's first) and pids."""
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
        urls = [f"http://127.0.0.1:{p}" for p in clients]
        deadline = time.monotonic() + 30
        while True:
            code, body = http("POST", f"{urls[0]}/v3/maintenance/status", b"{}", 1.0)
            if code == 200 and json.loads(body).get("leader"):
                leader_id = json.loads(body)["leader"]
                break
            if time.monotonic() > deadline:
                raise RuntimeError("etcd did not start")
            time.sleep(0.1)
        for url in urls:
            code, body = http("POST", f"{url}/v3/maintenance/status", b"{}")
            if json.loads(body)["header"]["member_id"] == leader_id:
                urls.remove(url)
                urls.insert(0, url)
                break
        yield urls, [p.pid for p in procs]
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
