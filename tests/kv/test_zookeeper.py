"""The KV service on ZooKeeper metadata: the lease is a ZooKeeper ephemeral node, so a
SIGKILLed leader is replaced once its ZooKeeper session expires (the server's minimum
session timeout, several seconds); clients' history stays linearizable."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import trio

from tests._cluster import process_cluster
from tests.kv._workload import Workload
from tests.kv.conftest import replicas, wait_leader
from walkit.testing import check_kv_linearizable

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]


async def test_leader_sigkill_on_zookeeper(zookeeper_url: str, tmp_path: Path) -> None:
    with process_cluster(zookeeper_url, tmp_path, 3):
        async with (
            replicas(zookeeper_url, "kv-zk", "--lease-timeout", "2") as reps,
            httpx.AsyncClient() as http,
        ):
            old = await wait_leader(http, reps)
            workload = Workload(reps, clients=8, keys=8, seed=11)
            stop = trio.Event()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(workload.run, http, stop)
                with trio.fail_after(60):
                    while len(workload.write_oks) < 30:  # noqa: ASYNC110 (the clients' progress)
                        await trio.sleep(0.05)
                killed_at = trio.current_time()
                await trio.to_thread.run_sync(old.kill)
                new = await wait_leader(http, reps, exclude=(old,), timeout=40)
                with trio.fail_after(60):
                    while not any(t > killed_at for t, _ in workload.write_oks):  # noqa: ASYNC110
                        await trio.sleep(0.05)
                stop.set()
            assert new is not old
            for key, value in workload.unique_acked.items():
                r = await http.get(f"{new.base}/v1/kv/{key}")
                assert (r.status_code, r.content) == (200, value), key
            result = check_kv_linearizable(workload.history, time_budget=60)
            assert result.ok, str(result)
