"""The KV replicas' ``/livez`` and ``/readyz`` (examples/kv_health.py), on real processes:
ready in their roles (the leader's lease confirmed, followers caught up with the log), and
not ready, with the reasons, while ZooKeeper is down under them; ready again once it is back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests._cluster import process_cluster
from tests._zookeeper import missing_zookeeper, running_zookeeper
from tests.kv._replicas import ReplicaProcess
from tests.kv.conftest import dump_output, replicas, wait_leader

pytestmark = pytest.mark.processes


async def _probe(http: httpx.AsyncClient, replica: ReplicaProcess, path: str) -> tuple[int, Any]:
    # A follower's readiness reads the log: with the store down, up to its operation timeout.
    answer = await http.get(f"{replica.base}{path}", timeout=30)
    return answer.status_code, answer.json()


async def _wait_all(
    http: httpx.AsyncClient, reps: list[ReplicaProcess], status: int, timeout: float
) -> list[Any]:
    """Poll every replica's /readyz until each answers ``status`` (there is no event for a
    check flipping); their bodies."""
    bodies: list[Any] = []
    with trio.move_on_after(timeout):
        while True:
            answers = [await _probe(http, r, "/readyz") for r in reps]
            bodies = [body for _, body in answers]
            if all(code == status for code, _ in answers):
                return bodies
            await trio.sleep(0.2)
    raise AssertionError(f"not all {status} in {timeout} s: {bodies}\n{dump_output(reps)}")


async def _ready_or_not_live(http: httpx.AsyncClient, replica: ReplicaProcess) -> str:
    """Poll until ``replica`` is ready ("ready") or not live ("not live")."""
    with trio.fail_after(120):
        while True:
            if (await _probe(http, replica, "/readyz"))[0] == 200:
                return "ready"
            code, body = await _probe(http, replica, "/livez")
            if code == 503:
                assert any(r.startswith("follow:") for r in body["reasons"]), body
                return "not live"
            await trio.sleep(0.5)


async def test_replicas_are_live_and_ready_in_their_roles(kv_cluster: str) -> None:
    async with replicas(kv_cluster, "kv-health") as reps, httpx.AsyncClient() as http:
        leader = await wait_leader(http, reps)
        for i in range(20):
            put = await http.put(f"{leader.base}/v1/kv/k{i}", content=b"v%d" % i)
            assert put.status_code == 200, put.text
        for replica in reps:
            code, body = await _probe(http, replica, "/livez")
            assert code == 200 and body["status"] == "ok", body
        code, body = await _probe(http, leader, "/readyz")
        assert code == 200, body
        assert body["role"] == "leader" and body["checks"]["lease"]["ok"] is True, body
        for follower in (r for r in reps if r is not leader):
            code, body = await _probe(http, follower, "/readyz")
            assert code == 200, body
            assert body["role"] == "follower", body
            assert body["checks"]["role"]["detail"] == f"follower of {leader.address}"
            assert "applied" in body["checks"]["applied"]["detail"], body
        assert (await http.post(f"{leader.base}/readyz")).status_code == 404


@pytest.mark.zookeeper
async def test_replicas_are_not_ready_while_zookeeper_is_down(tmp_path: Path) -> None:
    problem = missing_zookeeper()
    if problem:
        pytest.fail(problem, pytrace=False)
    with running_zookeeper(tmp_path / "zookeeper") as zookeeper:
        url = zookeeper.url("/kv-health")
        with process_cluster(url, tmp_path, 3):
            async with (
                replicas(url, "kv-zk-health", "--lease-timeout", "2") as reps,
                httpx.AsyncClient() as http,
            ):
                leader = await wait_leader(http, reps)
                put = await http.put(f"{leader.base}/v1/kv/k", content=b"v")
                assert put.status_code == 200, put.text
                await _wait_all(http, reps, 200, 30)
                await trio.to_thread.run_sync(zookeeper.stop)
                bodies = await _wait_all(http, reps, 503, 60)
                reasons = [reason for body in bodies for reason in body["reasons"]]
                print(f"readyz with ZooKeeper down: {reasons}")
                assert any(r.startswith(("lease:", "applied:", "role:")) for r in reasons), reasons
                for replica in reps:  # live: serving, and not failing for long
                    code, body = await _probe(http, replica, "/livez")
                    assert code == 200, body
                await trio.to_thread.run_sync(zookeeper.restart)
                # Each replica is ready again by itself, or, if its client's metadata session
                # expired meanwhile (the client does not open a new one), its follow loop
                # keeps failing and /livez says so after FOLLOW_FAILING_LIMIT: it is then
                # restarted, as an orchestrator would, and is ready after that.
                restarted = [r for r in reps if await _ready_or_not_live(http, r) == "not live"]
                for replica in restarted:
                    await trio.to_thread.run_sync(replica.restart)
                await _wait_all(http, reps, 200, 90)
                print(f"after ZooKeeper came back, {len(restarted)} replica(s) needed a restart")
