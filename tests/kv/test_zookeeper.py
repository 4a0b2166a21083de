"""The KV service on ZooKeeper metadata: the lease is a ZooKeeper ephemeral node, so a
SIGKILLed leader is replaced once its ZooKeeper session expires (the server's minimum
session timeout, several seconds); clients' history stays linearizable."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests._cluster import process_cluster
from tests.kv._workload import (
    Workload,
    check_acked_readable_and_linearizable,
    kill_leader_under_load,
)
from tests.kv.conftest import replicas, wait_leader

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]


async def test_leader_sigkill_on_zookeeper(zookeeper_url: str, tmp_path: Path) -> None:
    with process_cluster(zookeeper_url, tmp_path, 3):
        async with (
            replicas(zookeeper_url, "kv-zk", "--lease-timeout", "2") as reps,
            httpx.AsyncClient() as http,
        ):
            old = await wait_leader(http, reps)
            workload = Workload(reps, clients=8, keys=8, seed=11)
            failover = await kill_leader_under_load(http, workload, old, before=30, after=10)
            await check_acked_readable_and_linearizable(http, workload, failover.new)
