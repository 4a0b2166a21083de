"""SIGKILL of the KV service's leader under 64 concurrent clients: a new leader serves writes,
every acknowledged PUT is readable with its value, no command is applied twice, and the whole
recorded history is linearizable (walkit.testing.check_kv_linearizable)."""

from __future__ import annotations

import collections
import json

import httpx
import pytest
import trio

import walkit
from tests.kv._workload import (
    Workload,
    check_acked_readable_and_linearizable,
    kill_leader_under_load,
)
from tests.kv.conftest import dump_output, replicas, wait_caught_up, wait_leader

pytestmark = pytest.mark.processes


async def test_leader_sigkill_under_64_clients_is_linearizable(kv_cluster: str) -> None:
    async with (
        replicas(kv_cluster, "kv-kill", "--lease-timeout", "1") as reps,
        httpx.AsyncClient(limits=httpx.Limits(max_connections=200)) as http,
    ):
        old = await wait_leader(http, reps)
        workload = Workload(reps, clients=64, keys=32, seed=7)
        failover = await kill_leader_under_load(http, workload, old, before=100, after=100)
        new = failover.new
        print(f"failover: first write acknowledged {failover.first_write_after:.2f}s after SIGKILL")
        # Every PUT that got a 200 is readable, with its value; the history is linearizable.
        await check_acked_readable_and_linearizable(http, workload, new)

        # Group commit: concurrent PUTs went out together (several commands per append_batch).
        metrics = (await http.get(f"{new.base}/metrics")).text
        batches = {
            line.split()[0]: float(line.split()[1])
            for line in metrics.splitlines()
            if line.startswith(("kv_commit_batch_size_sum", "kv_commit_batch_size_count"))
        }
        assert batches["kv_commit_batch_size_sum"] > batches["kv_commit_batch_size_count"] > 0
        print(f"group commit: {batches}")

        # No command is in the log twice (the clients never retry; values are unique).
        async with walkit.Client.connect(kv_cluster) as client:
            kv_log = await walkit.Log.open(client, "kv-kill")
            seen: collections.Counter[tuple[str, str]] = collections.Counter()
            async for record in kv_log.reader(follow=False):
                cmd = json.loads(record.payload)
                if cmd["op"] == "set":
                    seen[(cmd["key"], cmd["value"])] += 1
        twice = [k for k, n in seen.items() if n > 1]
        assert not twice, twice

        # The killed replica comes back as a follower and converges.
        await trio.to_thread.run_sync(old.start)
        st = await wait_caught_up(http, old, new)
        assert st["role"] == "follower" and st["leader"] == new.address, dump_output(reps)
        for i in range(32):
            want = await http.get(f"{new.base}/v1/kv/s{i}")
            got = await http.get(f"{old.base}/v1/kv/s{i}")
            assert (got.status_code, got.content) == (want.status_code, want.content)
