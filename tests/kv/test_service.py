"""The replicated KV service (examples/kv_store.py serve) as real processes: three replicas on
three real bookie processes, sqlite metadata, HTTP on loopback."""

from __future__ import annotations

import json
import re
import socket
import sys
from urllib.parse import parse_qsl

import httpx
import pytest
import trio

import walkit
from tests.kv._replicas import EXAMPLE, ReplicaProcess
from tests.kv._workload import Workload
from tests.kv.conftest import dump_output, replicas, status, wait_caught_up, wait_leader
from walkit.testing import check_kv_linearizable

pytestmark = pytest.mark.processes


async def test_api_and_bad_requests(kv_cluster: str) -> None:
    async with (
        replicas(kv_cluster, "kv-api", "--max-body", "1000") as reps,
        httpx.AsyncClient() as http,
    ):
        leader = await wait_leader(http, reps)
        follower = next(r for r in reps if r is not leader)
        kv = f"{leader.base}/v1/kv"

        put = await http.put(f"{kv}/greeting", content=b"hello")
        assert put.status_code == 200, put.text
        pos = put.json()["position"]
        walkit.LogPosition.parse(pos)
        got = await http.get(f"{kv}/greeting")
        assert (got.status_code, got.content, got.headers["x-position"]) == (200, b"hello", pos)
        assert (await http.get(f"{kv}/nothing")).status_code == 404

        # Writes on a follower: 307 to the leader (and a client that follows gets it done).
        moved = await http.put(f"{follower.base}/v1/kv/greeting", content=b"hi")
        assert moved.status_code == 307
        assert moved.headers["location"] == f"{kv}/greeting"
        followed = await http.put(
            f"{follower.base}/v1/kv/greeting", content=b"hi", follow_redirects=True
        )
        assert followed.status_code == 200
        pos2 = followed.json()["position"]
        assert walkit.LogPosition.parse(pos2) > walkit.LogPosition.parse(pos)

        # Compare-and-set on the position of the key's last write.
        stale = await http.put(f"{kv}/greeting", content=b"x", headers={"If-Match": pos})
        assert stale.status_code == 412 and stale.json()["position"] == pos2
        swapped = await http.put(f"{kv}/greeting", content=b"cas", headers={"If-Match": pos2})
        assert swapped.status_code == 200
        absent = await http.put(f"{kv}/never", content=b"x", headers={"If-Match": pos2})
        assert absent.status_code == 412

        # Follower reads: applied state, with its position; consistent=true goes to the leader.
        with trio.fail_after(60):
            while True:
                r = await http.get(f"{follower.base}/v1/kv/greeting")
                if r.status_code == 200 and r.content == b"cas":
                    break
                await trio.sleep(0.02)
        assert "x-applied-position" in r.headers
        consistent = await http.get(f"{follower.base}/v1/kv/greeting?consistent=true")
        assert consistent.status_code == 307
        assert consistent.headers["location"] == f"{kv}/greeting?consistent=true"
        # The redirect keeps the query as it was meant: encoded again, nothing injected.
        for raw in ("x=a%26admin%3Dtrue", "x=%C3%A9", "x=%00", "x=%0d%0aSet-Cookie:%20a"):
            odd = await http.get(f"{follower.base}/v1/kv/greeting?consistent=true&{raw}")
            assert odd.status_code == 307, (raw, odd.text)
            where, _, query = odd.headers["location"].partition("?")
            assert where == f"{kv}/greeting", raw
            assert parse_qsl(query) == [("consistent", "true"), *parse_qsl(raw)], raw

        assert (await http.delete(f"{kv}/greeting")).status_code == 200
        assert (await http.delete(f"{kv}/greeting")).status_code == 404
        gone = await http.get(f"{kv}/greeting")
        assert gone.status_code == 404, gone.text

        # Bad requests: a clear 4xx, and the replica serves on.
        long_key = await http.put(f"{kv}/{'k' * 1025}", content=b"v")
        assert long_key.status_code == 400 and "1024" in long_key.json()["error"]
        assert (await http.put(f"{kv}/{'k' * 1024}", content=b"v")).status_code == 200
        big = await http.put(f"{kv}/big", content=b"v" * 1001)
        assert big.status_code == 413 and "1000" in big.json()["error"]
        assert (await http.put(f"{kv}/big", content=b"v" * 1000)).status_code == 200
        bad_match = await http.put(f"{kv}/big", content=b"v", headers={"If-Match": "banana"})
        assert bad_match.status_code == 400 and "If-Match" in bad_match.json()["error"]
        assert (await http.post(f"{kv}/big", content=b"v")).status_code == 405
        assert (await http.get(f"{leader.base}/v2/nope")).status_code == 404
        assert (await http.get(f"{kv}/")).status_code == 400
        with socket.create_connection(("127.0.0.1", leader.port), timeout=5) as sock:
            sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.1 400")
        # A client that waits for "100 Continue" before the body (curl does, over 1 KiB) gets it.
        with socket.create_connection(("127.0.0.1", leader.port), timeout=5) as sock:
            sock.sendall(
                b"PUT /v1/kv/continued HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n"
                b"Expect: 100-continue\r\n\r\n"
            )
            assert sock.recv(100).startswith(b"HTTP/1.1 100")
            sock.sendall(b"body")
            assert sock.recv(1000).startswith(b"HTTP/1.1 200")
        assert (await http.get(f"{kv}/continued")).content == b"body"
        # HEAD: the headers alone (an error's too), and the connection serves on.
        with socket.create_connection(("127.0.0.1", leader.port), timeout=5) as sock:
            sock.sendall(b"HEAD /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.sendall(b"HEAD /v1/kv/continued HTTP/1.1\r\nHost: x\r\n\r\n")
            sock.sendall(b"GET /v1/kv/continued HTTP/1.1\r\nHost: x\r\n\r\n")
            answers = b""
            while not answers.endswith(b"body"):
                chunk = sock.recv(4096)
                assert chunk, answers
                answers += chunk
            assert answers.startswith(b"HTTP/1.1 404"), answers
            assert answers.count(b"HTTP/1.1 200") == 2 and answers.count(b"body") == 1, answers
        # Idempotent writes: a retried PUT is applied once, even after a later write.
        tagged = {"Walkit-Producer": "client-1", "Walkit-Sequence": "1"}
        first = await http.put(f"{kv}/idem", content=b"v1", headers=tagged)
        assert first.status_code == 200 and "duplicate" not in first.json()
        second = await http.put(
            f"{kv}/idem", content=b"v2", headers={**tagged, "Walkit-Sequence": "2"}
        )
        assert second.status_code == 200
        retry = await http.put(f"{kv}/idem", content=b"v1", headers=tagged)
        assert retry.status_code == 200, retry.text
        assert retry.json() == {"position": first.json()["position"], "duplicate": True}
        assert (await http.get(f"{kv}/idem")).content == b"v2"  # not set back to v1
        gone = await http.delete(
            f"{kv}/idem", headers={"Walkit-Producer": "client-1", "Walkit-Sequence": "3"}
        )
        assert gone.status_code == 200
        for headers in (
            {"Walkit-Producer": "client-1"},
            {"Walkit-Sequence": "4"},
            {"Walkit-Producer": "client-1", "Walkit-Sequence": "-4"},
            {"Walkit-Producer": "c" * 256, "Walkit-Sequence": "4"},
            {"Walkit-Producer": "client-1", "Walkit-Sequence": str(2**64)},
        ):
            bad = await http.put(f"{kv}/idem", content=b"v", headers=headers)
            assert bad.status_code == 400 and "Walkit-" in bad.json()["error"], headers
        # Binary values round-trip.
        blob = bytes(range(256))
        assert (await http.put(f"{kv}/blob", content=blob)).status_code == 200
        assert (await http.get(f"{kv}/blob")).content == blob

        st = await status(http, leader)
        assert st is not None and st["role"] == "leader" and st["leader"] == leader.address
        metrics = await http.get(f"{leader.base}/metrics")
        assert metrics.status_code == 200
        assert 'kv_requests_total{code="200",method="PUT"}' in metrics.text
        assert "kv_is_leader 1.0" in metrics.text
        # This client's keep-alive connection at least; nothing refused or timed out.
        assert re.search(r"^kv_http_connections [1-9]", metrics.text, re.M), metrics.text
        assert "kv_http_connections_refused_total 0.0" in metrics.text
        assert "kv_http_timed_out_total 0.0" in metrics.text
        assert all(r.running for r in reps), dump_output(reps)


async def test_the_quota_bounds_what_strangers_can_store(kv_cluster: str) -> None:
    """Every replica holds the whole map in memory and replays it from the log: without a
    bound, anyone's PUTs could grow it until all replicas run out of memory (and again at each
    restart). Past --quota-bytes a PUT that grows the store gets 507; deletes and PUTs that do
    not grow it still go, and concurrent PUTs cannot pass it together. Each key costs its bytes,
    its value's and 200 more (KEY_OVERHEAD)."""
    async with (
        replicas(kv_cluster, "kv-quota", "--quota-bytes", "4000") as reps,
        httpx.AsyncClient(limits=httpx.Limits(max_connections=32)) as http,
    ):
        leader = await wait_leader(http, reps)
        kv = f"{leader.base}/v1/kv"
        assert (await http.put(f"{kv}/a", content=b"x" * 3500)).status_code == 200  # 3701
        full = await http.put(f"{kv}/b", content=b"y" * 100)  # 301 more: 4002 > 4000
        assert full.status_code == 507, full.text
        body = full.json()
        assert "quota exceeded" in body["error"] and "--quota-bytes" in body["error"]
        assert (body["size_bytes"], body["quota_bytes"]) == (3701, 4000)
        assert (await http.get(f"{kv}/b")).status_code == 404
        # Overwriting with less, or the same, is fine; so is a delete, which makes room.
        assert (await http.put(f"{kv}/a", content=b"z" * 3000)).status_code == 200  # 3201
        assert (await http.put(f"{kv}/b", content=b"y" * 100)).status_code == 200  # 3502
        assert (await http.put(f"{kv}/a", content=b"w" * 3000)).status_code == 200
        assert (await http.put(f"{kv}/c", content=b"v" * 600)).status_code == 507  # 4303
        assert (await http.delete(f"{kv}/a")).status_code == 200
        assert (await http.put(f"{kv}/c", content=b"v" * 600)).status_code == 200
        st = await status(http, leader)
        assert st is not None and (st["size_bytes"], st["quota_bytes"]) == (301 + 801, 4000)

        # 40 concurrent PUTs to new keys: those admitted fit, all the others get 507.
        codes: list[int] = []

        async def put(i: int) -> None:
            r = await http.put(f"{kv}/n{i:02d}", content=b"n" * 97)  # 3 + 97 + 200 each
            codes.append(r.status_code)

        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(put, i)
        assert sorted(set(codes)) == [200, 507], codes
        assert codes.count(200) == (4000 - 1102) // 300
        for replica in reps:  # the followers apply the same, whatever their own quota
            st = await wait_caught_up(http, replica, leader)
            assert st["size_bytes"] == 1102 + 300 * codes.count(200) <= 4000
        metrics = (await http.get(f"{leader.base}/metrics")).text
        assert "kv_quota_bytes 4000.0" in metrics
        assert f"kv_state_bytes {st['size_bytes']}.0" in metrics
        assert f"kv_quota_refused_total {2 + codes.count(507)}.0" in metrics
        assert all(r.running for r in reps), dump_output(reps)


async def test_follower_restarted_from_a_snapshot_converges(kv_cluster: str) -> None:
    async with (
        replicas(kv_cluster, "kv-snap", "--snapshot-every", "50") as reps,
        httpx.AsyncClient(limits=httpx.Limits(max_connections=32)) as http,
    ):
        leader = await wait_leader(http, reps)
        follower = next(r for r in reps if r is not leader)
        kv = f"{leader.base}/v1/kv"

        async def put_range(start: int, stop: int) -> None:
            async def one(i: int) -> None:
                r = await http.put(f"{kv}/k{i % 97}", content=f"v{i}".encode())
                assert r.status_code == 200, r.text

            async with trio.open_nursery() as nursery:
                for i in range(start, stop):
                    nursery.start_soon(one, i)

        await put_range(0, 200)
        await trio.to_thread.run_sync(follower.kill)
        await put_range(200, 400)
        async with walkit.Client.connect(kv_cluster) as client:
            md = await (await walkit.Log.open(client, "kv-snap")).metadata()
        assert md.snapshots, "no snapshot was saved"
        assert md.truncated != walkit.LogPosition.EARLIEST, "the log was not truncated"

        await trio.to_thread.run_sync(follower.start)
        st = await wait_caught_up(http, follower, leader)
        leader_applied = st["applied"]
        assert st["role"] == "follower" and st["leader"] == leader.address
        for key in (f"k{i}" for i in range(97)):
            want = await http.get(f"{kv}/{key}")
            r = await http.get(f"{follower.base}/v1/kv/{key}")
            assert want.status_code == 200, want.text
            assert (r.status_code, r.content) == (200, want.content), key
            assert r.headers["x-position"] == want.headers["x-position"]
            assert r.headers["x-applied-position"] == leader_applied


async def test_paused_leader_is_fenced_and_steps_down(kv_cluster: str) -> None:
    async with (
        replicas(kv_cluster, "kv-stop", "--lease-timeout", "1") as reps,
        httpx.AsyncClient() as http,
    ):
        old = await wait_leader(http, reps)
        assert (await http.put(f"{old.base}/v1/kv/k", content=b"before")).status_code == 200
        # Clients keep working throughout, on every replica; their history is checked below.
        workload = Workload(reps, clients=16, keys=8, seed=3)
        stop = trio.Event()
        async with trio.open_nursery() as background:
            background.start_soon(workload.run, http, stop)
            await workload.wait_writes(50)
            new = await _pause_and_resume(http, reps, old)
            stop.set()
        result = check_kv_linearizable(workload.history, time_budget=60)
        print(f"history: {len(workload.history)} operations; {result}")
        assert result.ok, str(result)
        assert (await http.get(f"{new.base}/v1/kv/k")).content == b"after"
        # It follows the new leader's log again.
        assert (await http.put(f"{new.base}/v1/kv/k2", content=b"x")).status_code == 200
        with trio.fail_after(60):
            while (await http.get(f"{old.base}/v1/kv/k2")).status_code != 200:  # noqa: ASYNC110
                await trio.sleep(0.05)
        assert json.loads((await http.get(f"{old.base}/v1/status")).content)["role"] == "follower"


async def test_a_replica_whose_metadata_session_expired_connects_again(kv_cluster: str) -> None:
    """A stall longer than the client's metadata session (1 s here) expires it, and with it
    everything the client holds: the replica connects a new client and serves on, from the
    state it had applied."""
    async with (
        replicas(kv_cluster + "?session_timeout=1", "kv-expire", "--lease-timeout", "1") as reps,
        httpx.AsyncClient() as http,
    ):
        old = await wait_leader(http, reps)
        assert (await http.put(f"{old.base}/v1/kv/k", content=b"before")).status_code == 200
        # Paused until another replica leads: its lease expired, and its client's session,
        # which has the same timeout and stopped beating at the same moment, with it.
        new = await _pause_and_resume(http, reps, old)
        assert (await http.put(f"{new.base}/v1/kv/k2", content=b"x")).status_code == 200
        with trio.fail_after(60):
            while (await http.get(f"{old.base}/v1/kv/k2")).status_code != 200:  # noqa: ASYNC110
                await trio.sleep(0.05)
        assert any("connecting again" in line for line in old.output), dump_output([old])
        assert (await http.get(f"{old.base}/v1/kv/k")).content == b"after"


async def _pause_and_resume(
    http: httpx.AsyncClient, reps: list[ReplicaProcess], old: ReplicaProcess
) -> ReplicaProcess:
    """SIGSTOP the leader ``old`` until another replica leads and has written; then SIGCONT it
    with a read and a write waiting in its socket; check what it answers and that it follows
    again; return the leader it follows."""
    old.pause()
    try:
        new = await wait_leader(http, reps, exclude=(old,))
        assert new is not old
        put = await http.put(f"{new.base}/v1/kv/k", content=b"after")
        assert put.status_code == 200, put.text

        # Requests sent to the paused leader wait in its socket until it resumes.
        answers: dict[str, httpx.Response] = {}

        async def ask(name: str, method: str, body: bytes | None) -> None:
            answers[name] = await http.request(
                method, f"{old.base}/v1/kv/k", content=body, timeout=30
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "read", "GET", None)
            nursery.start_soon(ask, "write", "PUT", b"late")
            await trio.sleep(0.3)  # both are sent (no event to wait on: the peer is frozen)
            old.resume()
    finally:
        old.resume()
    # The old leader can no longer acknowledge anything, nor serve a stale read.
    assert answers["write"].status_code in (307, 503), answers["write"].text
    read = answers["read"]
    assert read.status_code in (307, 503) or read.content == b"after", read.content
    # It follows again. (Usually ``new``; on a loaded machine another replica may have taken
    # the lease from it meanwhile, as the service allows: any leader but itself will do.)
    st = None
    with trio.move_on_after(60) as waited:
        while True:
            st = await status(http, old)
            if (
                st is not None
                and st["role"] == "follower"
                and st["leader"] not in (None, old.address)
            ):
                current = next((r for r in reps if r.address == st["leader"]), None)
                if (
                    current is not None
                    and ((await status(http, current)) or {}).get("role") == "leader"
                ):
                    new = current
                    break
            await trio.sleep(0.05)
    assert not waited.cancelled_caught, f"last status {st}\n{dump_output(reps)}"
    got = await http.get(f"{new.base}/v1/kv/k")
    assert got.content == b"after"
    # (fenced at its next append, or it saw its lease lapse first and stepped down)
    assert any(
        "fenced" in line.lower() or "stopped leading" in line or "lease_not_renewed" in line
        for line in old.output
    ), dump_output([old])
    return new


async def test_clean_stop_hands_the_lead_over_at_once(kv_cluster: str) -> None:
    """SIGTERM: the leader gives its lease up on the way out, so a follower takes over without
    waiting for the lease (60 s here) to expire."""
    async with (
        replicas(kv_cluster, "kv-term", "--lease-timeout", "60") as reps,
        httpx.AsyncClient() as http,
    ):
        old = await wait_leader(http, reps)
        assert (await http.put(f"{old.base}/v1/kv/k", content=b"v")).status_code == 200
        await trio.to_thread.run_sync(old.stop)
        assert old.process is not None and old.process.returncode == 0, dump_output([old])
        new = await wait_leader(http, reps, exclude=(old,), timeout=30)
        got = await http.get(f"{new.base}/v1/kv/k")
        assert (got.status_code, got.content) == (200, b"v")
        assert (await http.put(f"{new.base}/v1/kv/k", content=b"w")).status_code == 200


async def test_leader_fenced_by_another_writer_resigns_and_the_service_recovers(
    kv_cluster: str,
) -> None:
    """Another writer takes the log over (the example's ``set`` command) while the leader still
    holds its lease: the leader's next write is refused (fenced), it gives the lease up, and a
    leader (re-)elected takes the log over again, with the other writer's command applied."""
    async with replicas(kv_cluster, "kv-fence") as reps, httpx.AsyncClient() as http:
        leader = await wait_leader(http, reps)
        assert (await http.put(f"{leader.base}/v1/kv/a", content=b"1")).status_code == 200
        done = await trio.run_process(
            [sys.executable, str(EXAMPLE), kv_cluster, "--log", "kv-fence", "set", "b", "2"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr.decode()
        fenced = await http.put(f"{leader.base}/v1/kv/a", content=b"lost?")
        assert fenced.status_code == 503, fenced.text
        assert "write outcome unknown" in fenced.json()["error"]
        with trio.fail_after(60):
            while True:
                now = await wait_leader(http, reps)
                r = await http.put(f"{now.base}/v1/kv/c", content=b"3")
                if r.status_code == 200:
                    break
                await trio.sleep(0.05)
        for key, value in (("b", b"2"), ("c", b"3")):
            got = await http.get(f"{now.base}/v1/kv/{key}")
            assert (got.status_code, got.content) == (200, value), key
        # The fenced write was never applied: the takeover found it absent (or it was, once).
        a = await http.get(f"{now.base}/v1/kv/a")
        assert a.content in (b"1", b"lost?")
        out = "\n".join(leader.output)
        assert "WriterFencedError" in out and "kv: following" in out, dump_output([leader])
