"""Fixtures for the KV service tests: three real bookie processes (sqlite metadata) shared by
the module, and three replica processes per test, each test on a log of its own."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import trio

from tests._cluster import free_port, process_cluster
from tests.kv._replicas import ReplicaProcess


@pytest.fixture(scope="module")
def kv_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Three bookie processes; yields the sqlite metadata URL."""
    root = tmp_path_factory.mktemp("kv-bookies")
    url = f"sqlite://{root / 'metadata.db'}"
    with process_cluster(url, root, 3):
        yield url


@contextlib.asynccontextmanager
async def replicas(
    url: str, log: str, *extra: str, count: int = 3
) -> AsyncIterator[list[ReplicaProcess]]:
    started = [ReplicaProcess(url, free_port(), *extra, log=log) for _ in range(count)]
    try:
        for r in started:
            await trio.to_thread.run_sync(r.start)
        yield started
    finally:
        for r in started:
            await trio.to_thread.run_sync(r.stop)


async def status(http: httpx.AsyncClient, replica: ReplicaProcess) -> dict[str, Any] | None:
    try:
        response = await http.get(f"{replica.base}/v1/status", timeout=1.0)
    except httpx.HTTPError:
        return None
    result: dict[str, Any] = json.loads(response.content)
    return result


async def wait_leader(
    http: httpx.AsyncClient,
    reps: list[ReplicaProcess],
    *,
    exclude: tuple[ReplicaProcess, ...] = (),
    timeout: float = 40.0,
) -> ReplicaProcess:
    """The replica that says it leads, once every other live one agrees."""
    live = [r for r in reps if r not in exclude]
    with trio.fail_after(timeout):
        while True:
            statuses = [await status(http, r) for r in live]
            leaders = [
                r for r, s in zip(live, statuses, strict=True) if s and s["role"] == "leader"
            ]
            if len(leaders) == 1 and all(
                s is not None and s["leader"] == leaders[0].address for s in statuses
            ):
                return leaders[0]
            await trio.sleep(0.05)


async def wait_caught_up(
    http: httpx.AsyncClient, replica: ReplicaProcess, leader: ReplicaProcess
) -> dict[str, Any]:
    """Wait until ``replica`` has applied what ``leader`` had applied when this was called;
    returns its status then."""
    wanted = (await status(http, leader) or {}).get("applied")
    assert wanted is not None, "the leader did not answer"
    with trio.fail_after(60):
        while True:
            st = await status(http, replica)
            if st is not None and st["applied"] == wanted:
                return st
            await trio.sleep(0.05)


def dump_output(reps: list[ReplicaProcess]) -> str:
    return "\n".join(f"--- replica {r.address}\n" + "\n".join(r.output[-30:]) for r in reps)
