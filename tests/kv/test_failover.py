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
from tests.kv._workload import Workload
from tests.kv.conftest import dump_output, replicas, status, wait_leader
from walkit.testing import check_kv_linearizable

pytestmark = pytest.mark.processes


async def test_leader_sigkill_under_64_clients_is_linearizable(kv_cluster: str) -> None:
    async with (
        replicas(kv_cluster, "kv-kill", "--lease-timeout", "1") as reps,
        httpx.AsyncClient(limits=httpx.Limits(max_connections=200)) as http,
    ):
        old = await wait_leader(http, reps)
        workload = Workload(reps, clients=64, keys=32, seed=7)
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(workload.run, http, stop)
            with trio.fail_after(60):  # a guard for a loaded machine, not a timing assertion
                while len(workload.write_oks) < 100:  # noqa: ASYNC110 (the clients' progress)
                    await trio.sleep(0.05)
            killed_at = trio.current_time()
            await trio.to_thread.run_sync(old.kill)
            new = await wait_leader(http, reps, exclude=(old,))
            with trio.fail_after(60):
                while not any(t > killed_at for t, _ in workload.write_oks):  # noqa: ASYNC110
                    await trio.sleep(0.05)
            first_ok = min(done for t, done in workload.write_oks if t > killed_at)
            after = len(workload.write_oks)
            with trio.fail_after(60):
                while len(workload.write_oks) < after + 100:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            stop.set()
        print(f"failover: first write acknowledged {first_ok - killed_at:.2f}s after SIGKILL")
        assert new is not old

        # Every PUT that got a 200 is readable from the new leader, with its value.
        for key, value in workload.unique_acked.items():
            r = await http.get(f"{new.base}/v1/kv/{key}")
            assert (r.status_code, r.content) == (200, value), key

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
        assert (
            len(seen)
            >= len([op for op in workload.history if op.completed and op.kind != "read"]) // 2
        )

        # The recorded history, timeouts and failures included, is linearizable.
        result = check_kv_linearizable(workload.history, time_budget=60)
        answered = sum(op.completed is not None for op in workload.history)
        print(f"history: {len(workload.history)} operations, {answered} answered; {result}")
        assert result.ok, str(result)

        # The killed replica comes back as a follower and converges.
        await trio.to_thread.run_sync(old.start)
        leader_applied = (await status(http, new))["applied"]  # type: ignore[index]
        with trio.fail_after(60):
            while True:
                st = await status(http, old)
                if st is not None and st["applied"] == leader_applied:
                    break
                await trio.sleep(0.05)
        assert st["role"] == "follower" and st["leader"] == new.address, dump_output(reps)
        for i in range(32):
            want = await http.get(f"{new.base}/v1/kv/s{i}")
            got = await http.get(f"{old.base}/v1/kv/s{i}")
            assert (got.status_code, got.content) == (want.status_code, want.content)
