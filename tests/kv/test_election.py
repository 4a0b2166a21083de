"""LeaderElection on every metadata driver: one leader, failover when its session ends,
resignation, and confirm() as the leader's check before a linearizable read."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
import trio

from walkit.errors import ConfigurationError
from walkit.recipes import LeaderElection, Role


async def wait_for(condition: Callable[[], bool], timeout: float = 15.0) -> None:
    with trio.fail_after(timeout):
        while not condition():  # noqa: ASYNC110
            await trio.sleep(0.01)


def candidates(url: str, count: int) -> list[LeaderElection]:
    return [
        LeaderElection(
            url, "/election/leader", f"node-{i}", lease_timeout=1.0, rng=random.Random(i)
        )
        for i in range(count)
    ]


async def test_one_leader_then_failover_then_resign(metadata_url: str) -> None:
    elections = candidates(metadata_url, 3)
    async with trio.open_nursery() as nursery:
        for e in elections:
            await nursery.start(e.run)
        leaders = [e for e in elections if e.is_leader]
        assert len(leaders) == 1
        first = leaders[0]
        await wait_for(lambda: all(e.leader == first.advertise for e in elections))
        assert await first.confirm()
        assert not any([await e.confirm() for e in elections if e is not first])

        # The leader's session ends (a crash or a partition would do the same).
        store = first._store
        assert store is not None
        await store.expire_session()
        assert not await first.confirm()
        await wait_for(lambda: sum(e.is_leader for e in elections) == 1 and not first.is_leader)
        second = next(e for e in elections if e.is_leader)
        await wait_for(lambda: all(e.leader == second.advertise for e in elections))
        assert first.step_downs == 1
        assert first.role is Role.FOLLOWER
        assert await second.confirm()

        # Resigning hands the lead to someone else.
        await second.resign()
        assert not second.is_leader and second.leader is None  # at once
        await wait_for(lambda: sum(e.is_leader for e in elections) == 1 and not second.is_leader)
        third = next(e for e in elections if e.is_leader)
        await wait_for(lambda: all(e.leader == third.advertise for e in elections))
        assert await third.confirm()
        nursery.cancel_scope.cancel()
    assert all(e.role is Role.STOPPED for e in elections)


async def test_confirm_is_shared_by_concurrent_callers(tmp_path: object) -> None:
    url = f"sqlite://{tmp_path}/m.db"
    (e,) = candidates(url, 1)
    async with trio.open_nursery() as nursery:
        await nursery.start(e.run)
        assert e.is_leader
        results: list[bool] = []

        async def one() -> None:
            results.append(await e.confirm())

        async with trio.open_nursery() as inner:
            for _ in range(50):
                inner.start_soon(one)
        assert results == [True] * 50
        assert e._rounds_done <= 3  # 50 callers, a few store reads
        nursery.cancel_scope.cancel()


def test_bad_lease_timeout() -> None:
    for bad in (0, -1, True, "1"):
        with pytest.raises(ConfigurationError):
            LeaderElection("memory://x", "/e", "a", lease_timeout=bad, rng=random.Random())  # type: ignore[arg-type]
    for path in ("", "relative", "/trailing/", "/a//b"):
        with pytest.raises(ConfigurationError, match="bad election path"):
            LeaderElection("memory://x", path, "a", rng=random.Random())
