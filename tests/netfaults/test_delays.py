"""Slow networks between real processes, through ``walkit.testing.FaultProxy``: this kernel has
no ``sch_netem``, so delays are made in user space, Toxiproxy's way.

- A slow bookie: reads it is asked first are answered by the next replica after the
  speculative read timeout, and writes to it time out after the add timeout and are moved to
  another bookie (an ensemble change); nothing acknowledged is lost (the history checkers).
- A slow ZooKeeper under a KV leader: with round trips well inside its lease, the leader keeps
  the lead under a concurrent client workload; when its ZooKeeper stops answering at all (a
  half-open stall), it steps down and another replica takes over; the clients' history stays
  linearizable throughout.

The proxied bookie listens on 127.0.0.1 and registers 127.0.0.2 (``--advertised-address``),
where the proxy listens on the same port: clients reach it only through the proxy.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

import walkit
from tests._cluster import BookieProcess, free_port, process_cluster
from tests._zookeeper import ZooKeeperServer, unique_root
from tests.kv._replicas import ReplicaProcess
from tests.kv._workload import Workload, check_acked_readable_and_linearizable
from tests.kv.conftest import status, wait_leader
from tests.netfaults._lab import PASSWORD, read_back, start_tail, wait_until
from walkit import BookieId
from walkit.testing import FaultProxy, History, assert_ok, check_all

pytestmark = pytest.mark.processes

PROXIED_HOST = "127.0.0.2"
#: Answers from the slow bookie come this late: far beyond the speculative read timeout and
#: the add timeout, and beyond how long the phases that rely on it take.
SLOW = 10.0
SPECULATIVE_READ_TIMEOUT = 0.2
ADD_TIMEOUT = 1.0


def _check(history: History, what: str) -> None:
    results = check_all(history)
    assert_ok(results, what)
    counts = {r.name: dict(r.counts) for r in results}
    assert counts["no_lost_acks"]["verified"] == counts["no_lost_acks"]["acked"] > 0, counts


async def test_a_slow_bookie_gets_speculative_reads_and_is_replaced_on_writes(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    port = free_port()
    quiet = ["--no-autorecovery"]
    slow = BookieProcess(
        url, tmp_path / "slow", port, extra_args=[*quiet, "--advertised-address", PROXIED_HOST]
    )
    slow_id = BookieId(PROXIED_HOST, port)
    fast = [
        BookieProcess(url, tmp_path / f"fast-{i}", free_port(), extra_args=quiet) for i in range(2)
    ]
    spare = BookieProcess(url, tmp_path / "spare", free_port(), extra_args=quiet)
    history = History()
    with FaultProxy(
        ("127.0.0.1", port), listen=(PROXIED_HOST, port), rng=random.Random(7)
    ) as proxy:
        try:
            for bookie in [slow, *fast]:
                await trio.to_thread.run_sync(bookie.start)
            options: dict[str, Any] = {
                "add_timeout": ADD_TIMEOUT,
                "read_timeout": 3 * SLOW,  # only speculation can answer before the slow one
                "speculative_read_timeout": SPECULATIVE_READ_TIMEOUT,
            }
            async with (
                walkit.Client.connect(url, **options) as writer_client,
                walkit.Client.connect(url, **options) as reader_client,
                trio.open_nursery() as nursery,
            ):
                w = await writer_client.create_ledger(3, 3, 2, password=PASSWORD)
                assert slow_id in w.metadata.current_ensemble
                tailed = await start_tail(nursery, history, url, w.id)
                for n in range(60):
                    await history.append("writer", w, b"w-%d" % n)
                await trio.to_thread.run_sync(spare.start)  # room for an ensemble change
                reader = await reader_client.open_ledger(w.id, password=PASSWORD)
                assert reader.last_add_confirmed >= 58

                # Reads: a third of the entries ask the slow bookie first. They are all read
                # while not one byte from it is delivered: the next replicas answered them,
                # asked speculatively (the read timeout is far away).
                proxy.delay(SLOW, direction="downstream")
                sent, delivered = proxy.delivered["upstream"], proxy.delivered["downstream"]
                with trio.fail_after(SLOW / 2):
                    entries = await reader.read(0, reader.last_add_confirmed)
                assert [e.payload for e in entries] == [
                    b"w-%d" % n for n in range(reader.last_add_confirmed + 1)
                ]
                assert proxy.delivered["downstream"] == delivered, "the slow bookie answered"
                assert proxy.delivered["upstream"] > sent, "the slow bookie was never asked"
                history.record_read("reader", w.id, 0, [(e.entry_id, e.payload) for e in entries])

                # Writes: the slow bookie's acks come after the add timeout: it is replaced
                # (a new fragment without it) and the writer goes on.
                proxy.delay(SLOW)
                with trio.fail_after(20 * ADD_TIMEOUT):
                    n = 60
                    while slow_id in w.metadata.current_ensemble:
                        await history.append("writer", w, b"w-%d" % n)
                        n += 1
                    for _ in range(40):
                        await history.append("writer", w, b"w-%d" % n)
                        n += 1
                assert len(w.metadata.fragments) == 2, w.metadata
                proxy.heal()
                await history.close("writer", w)
                await wait_until(lambda: bool(tailed), 60, "the tailing reader to reach the end")
            md = await read_back(history, url, w.id)
            assert slow_id not in md.current_ensemble
            assert tailed == [md.last_entry_id + 1], (tailed, md.last_entry_id)
            _check(history, "a slow bookie (delay through the proxy)")
        finally:
            for bookie in [slow, *fast, spare]:
                bookie.stop()


@pytest.mark.zookeeper
async def test_a_slow_zookeeper_does_not_unseat_a_leader_whose_lease_is_valid(
    zookeeper_server: ZooKeeperServer, tmp_path: Path
) -> None:
    root = unique_root("slow-zookeeper")
    direct = zookeeper_server.url(root)
    lease = 2.0
    with (
        process_cluster(direct, tmp_path, 3),
        FaultProxy(("127.0.0.1", zookeeper_server.port), rng=random.Random(11)) as proxy,
    ):
        slow_url = f"zk://127.0.0.1:{proxy.address[1]}{root}"
        extra = ("--lease-timeout", str(lease))
        a = ReplicaProcess(slow_url, free_port(), *extra, log="kv-slow-zk")
        others = [ReplicaProcess(direct, free_port(), *extra, log="kv-slow-zk") for _ in range(2)]
        reps = [a, *others]
        try:
            async with httpx.AsyncClient() as http:
                await trio.to_thread.run_sync(a.start)  # first: it takes the lease
                for replica in others:
                    await trio.to_thread.run_sync(replica.start)
                assert await wait_leader(http, reps) is a
                workload = Workload(reps, clients=8, keys=8, seed=17)
                stop = trio.Event()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(workload.run, http, stop)
                    await workload.wait_writes(20)

                    # Round trips of 0.2-0.6 s: slow, yet a lease read (every third of the
                    # lease) still lands well within the lease. Over several leases, on
                    # writes and consistent reads, the leader must stay.
                    proxy.delay(0.1, jitter=0.2)
                    started = trio.current_time()
                    while trio.current_time() < started + 4 * lease:
                        await workload.wait_writes(len(workload.write_oks) + 10)
                    statuses = [await status(http, r) for r in reps]
                    assert all(s is not None and s["leader"] == a.address for s in statuses), (
                        statuses
                    )
                    assert await _step_downs(http, a) == 0

                    # ZooKeeper stops answering it (half-open): its lease cannot be renewed,
                    # so it steps down by itself and another replica takes over.
                    proxy.stall()
                    new = await wait_leader(http, reps, exclude=(a,), timeout=60)
                    await workload.wait_writes(len(workload.write_oks) + 30)
                    proxy.heal()
                    stop.set()
                with trio.fail_after(60):
                    while await _step_downs(http, a) != 1:  # noqa: ASYNC110 (its metrics)
                        await trio.sleep(0.1)
                await check_acked_readable_and_linearizable(http, workload, new)
        finally:
            for replica in reps:
                await trio.to_thread.run_sync(replica.stop)


async def _step_downs(http: httpx.AsyncClient, replica: ReplicaProcess) -> float:
    text = (await http.get(f"{replica.base}/metrics")).text
    line = next(line for line in text.splitlines() if line.startswith("kv_step_downs_total "))
    return float(line.split()[1])
