"""A client workload against the KV service that records every operation for the
linearizability checker (walkit.testing.check_kv_linearizable)."""

from __future__ import annotations

import random
from typing import Literal

import attrs
import httpx
import trio

from tests.kv._replicas import ReplicaProcess
from tests.kv.conftest import wait_leader
from walkit.testing import KVOperation, check_kv_linearizable


@attrs.define
class Workload:
    """``clients`` concurrent clients, each one operation at a time, on ``keys`` shared keys
    (reads with ?consistent=true, writes of unique values, deletes, compare-and-sets) plus
    writes to keys of their own."""

    replicas: list[ReplicaProcess]
    clients: int = 64
    keys: int = 32
    seed: int = 1
    history: list[KVOperation] = attrs.field(factory=list)
    #: key -> value of every write to a key of its own that got 200.
    unique_acked: dict[str, bytes] = attrs.field(factory=dict)
    #: (invoked, completed) trio times of every write that got a 200.
    write_oks: list[tuple[float, float]] = attrs.field(factory=list)

    async def run(self, http: httpx.AsyncClient, stop: trio.Event) -> None:
        async with trio.open_nursery() as nursery:
            for c in range(self.clients):
                nursery.start_soon(self._client, http, c, stop)

    async def wait_writes(self, count: int) -> None:
        """Until ``count`` writes got a 200 (a guard against a stuck service, not a timing
        assertion)."""
        with trio.fail_after(60):
            while len(self.write_oks) < count:  # noqa: ASYNC110 (the clients' progress)
                await trio.sleep(0.05)

    async def _client(self, http: httpx.AsyncClient, c: int, stop: trio.Event) -> None:
        rng = random.Random(self.seed * 1000 + c)
        target = rng.choice(self.replicas)
        i = 0
        while not stop.is_set():
            i += 1
            if not target.running:
                target = rng.choice([r for r in self.replicas if r.running])
            key = f"s{rng.randrange(self.keys)}"
            value = f"c{c}-{i}".encode()
            roll = rng.random()
            ok = True
            if roll < 0.15:
                ok = await self._write(http, target, c, f"u-{c}-{i}", value, unique=True)
            elif roll < 0.55:
                ok = await self._write(http, target, c, key, value)
            elif roll < 0.85:
                ok = (await self._read(http, target, c, key)) is not False
            elif roll < 0.92:
                ok = await self._delete(http, target, c, key)
            else:
                ok = await self._cas(http, target, c, key, value)
            if not ok:
                target = rng.choice([r for r in self.replicas if r.running])
                await trio.sleep(0.02)  # the service is between leaders: do not spin

    async def _send(
        self,
        http: httpx.AsyncClient,
        method: str,
        url: str,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response | Literal[False] | None:
        """The answer; None if there was none (the request may or may not have been
        executed); False if it surely was not (it could not connect, or the service said that
        there was no leader to take it)."""
        try:
            r = await http.request(
                method, url, content=body, headers=headers, follow_redirects=True, timeout=5
            )
        except httpx.ConnectError:
            return False
        except httpx.HTTPError:
            return None
        if r.status_code == 503 and b"no leader at the moment" in r.content:
            return False
        return r

    async def _write(
        self,
        http: httpx.AsyncClient,
        target: ReplicaProcess,
        c: int,
        key: str,
        value: bytes,
        *,
        unique: bool = False,
    ) -> bool:
        invoked = trio.current_time()
        r = await self._send(http, "PUT", f"{target.base}/v1/kv/{key}", value)
        if r is False:
            return False  # not executed: nothing to record
        done = trio.current_time() if r is not None and r.status_code == 200 else None
        self.history.append(KVOperation(c, key, "write", value, invoked, done))
        if done is not None:
            self.write_oks.append((invoked, done))
            if unique:
                self.unique_acked[key] = value
        return done is not None

    async def _read(
        self, http: httpx.AsyncClient, target: ReplicaProcess, c: int, key: str
    ) -> tuple[bytes | None, str | None] | bool:
        invoked = trio.current_time()
        r = await self._send(http, "GET", f"{target.base}/v1/kv/{key}?consistent=true")
        if not isinstance(r, httpx.Response) or r.status_code not in (200, 404):
            return False  # no answer: constrains nothing
        value = r.content if r.status_code == 200 else None
        self.history.append(KVOperation(c, key, "read", value, invoked, trio.current_time()))
        return value, r.headers.get("x-position")

    async def _delete(
        self, http: httpx.AsyncClient, target: ReplicaProcess, c: int, key: str
    ) -> bool:
        invoked = trio.current_time()
        r = await self._send(http, "DELETE", f"{target.base}/v1/kv/{key}")
        if r is False:
            return False
        if r is not None and r.status_code in (200, 404):
            found: bool | None = r.status_code == 200
            done: float | None = trio.current_time()
        else:
            found = done = None
        self.history.append(KVOperation(c, key, "delete", None, invoked, done, found=found))
        return done is not None

    async def _cas(
        self, http: httpx.AsyncClient, target: ReplicaProcess, c: int, key: str, value: bytes
    ) -> bool:
        seen = await self._read(http, target, c, key)
        if seen is False:
            return False
        assert not isinstance(seen, bool)
        current, position = seen
        if current is None or position is None:
            return True
        # Values are unique per write, so "the key's last write is at `position`" is "the key
        # holds `current`": a compare-and-set on the value, as the register model has it.
        invoked = trio.current_time()
        r = await self._send(
            http, "PUT", f"{target.base}/v1/kv/{key}", value, {"If-Match": position}
        )
        if r is False:
            return False
        if r is not None and r.status_code in (200, 412):
            found: bool | None = r.status_code == 200
            done: float | None = trio.current_time()
        else:
            found = done = None
        self.history.append(
            KVOperation(c, key, "cas", value, invoked, done, expected=current, found=found)
        )
        return done is not None


@attrs.frozen
class Failover:
    old: ReplicaProcess
    new: ReplicaProcess
    #: Seconds from the SIGKILL to the first 200 to a write sent after it.
    first_write_after: float


async def kill_leader_under_load(
    http: httpx.AsyncClient,
    workload: Workload,
    old: ReplicaProcess,
    *,
    before: int,
    after: int,
    election_timeout: float = 40.0,
) -> Failover:
    """Run ``workload``; SIGKILL the leader ``old`` once ``before`` writes got a 200; stop
    once a new leader acknowledged a write sent after the kill and ``after`` more succeeded."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(workload.run, http, stop)
        await workload.wait_writes(before)
        killed_at = trio.current_time()
        await trio.to_thread.run_sync(old.kill)
        new = await wait_leader(http, workload.replicas, exclude=(old,), timeout=election_timeout)
        with trio.fail_after(60):
            while not any(t > killed_at for t, _ in workload.write_oks):  # noqa: ASYNC110
                await trio.sleep(0.05)
        first_ok = min(done for t, done in workload.write_oks if t > killed_at)
        await workload.wait_writes(len(workload.write_oks) + after)
        stop.set()
    assert new is not old
    return Failover(old, new, first_ok - killed_at)


async def check_acked_readable_and_linearizable(
    http: httpx.AsyncClient, workload: Workload, leader: ReplicaProcess
) -> None:
    """Every write to a key of its own that got a 200 is readable from ``leader`` with its
    value, and the whole history is linearizable."""
    for key, value in workload.unique_acked.items():
        r = await http.get(f"{leader.base}/v1/kv/{key}")
        assert (r.status_code, r.content) == (200, value), key
    result = check_kv_linearizable(workload.history, time_budget=60)
    answered = sum(op.completed is not None for op in workload.history)
    print(f"history: {len(workload.history)} operations, {answered} answered; {result}")
    assert result.ok, str(result)
