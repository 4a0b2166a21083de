"""LeaderElection under trio, asyncio and uvloop, on every metadata driver: one of two
candidates leads; when its session expires, when it resigns and when its task is cancelled
(asyncio's ``task.cancel()`` too), the other takes over. A candidate used from another event
loop raises WrongEventLoopError."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import anyio
import pytest

from tests._event_loops import ASYNCIO_LOOPS, EVENT_LOOPS, run_on
from walkit.errors import WrongEventLoopError
from walkit.metadata import open_metadata_store
from walkit.recipes import Claim, LeaderElection, Role

#: Only a guard against hangs; nothing is asserted about how fast things happen.
HANG_GUARD = 30.0
DECIDED = (Role.LEADER, Role.FOLLOWER)


def pair(url: str) -> tuple[LeaderElection, LeaderElection]:
    # Every hand-over here is caused (an expiry, a resignation, a cancellation), so the lease
    # can be long: a busy machine cannot then make a leader miss its renewal.
    a, b = (
        LeaderElection(url, "/election/leader", name, lease_timeout=5.0, rng=random.Random(seed))
        for seed, name in enumerate(("a", "b"))
    )
    return a, b


async def until(election: LeaderElection, condition: Callable[[], bool]) -> None:
    """Wait for ``election``'s changes until ``condition()`` holds."""
    with anyio.fail_after(HANG_GUARD):
        while not condition():
            await election.wait_changed(election.generation)


def leader_and_follower(
    a: LeaderElection, b: LeaderElection
) -> tuple[LeaderElection, LeaderElection]:
    assert [a.is_leader, b.is_leader].count(True) == 1
    return (a, b) if a.is_leader else (b, a)


async def hand_over(
    old: LeaderElection,
    new: LeaderElection,
    end_lease: Callable[[LeaderElection], Awaitable[None]],
) -> None:
    """End ``old``'s lease until ``new`` leads. ``old`` waits its rejoin delay, then runs
    again with a new claim; on a slow machine ``new`` may see the node go only after that,
    and ``old`` may win it back: then end it again."""
    with anyio.fail_after(HANG_GUARD):
        while True:
            claim = old._state.claim
            await end_lease(old)
            await until(old, lambda c=claim: old._state.claim != c and old.role in DECIDED)  # type: ignore[misc]
            if old.role is Role.FOLLOWER:
                break
        await until(new, lambda: new.is_leader)


async def expire(election: LeaderElection) -> None:
    store = election._store
    assert store is not None
    await store.expire_session()  # as a crash or a partition would


async def resign(election: LeaderElection) -> None:
    await election.resign()


async def failovers(url: str) -> None:
    a, b = pair(url)
    async with anyio.create_task_group() as tasks:
        await tasks.start(a.run)
        await tasks.start(b.run)
        leader, follower = leader_and_follower(a, b)
        await until(follower, lambda: follower.leader == leader.advertise)
        assert await leader.confirm()
        assert not await follower.confirm()

        # The leader's session expires: the other takes over.
        await hand_over(leader, follower, expire)
        assert await follower.confirm()
        assert not await leader.confirm()
        await until(leader, lambda: leader.leader == follower.advertise)

        # The new leader resigns: the first one leads again.
        await hand_over(follower, leader, resign)
        assert await leader.confirm()
        assert leader.step_downs >= 1 and follower.step_downs >= 1
        tasks.cancel_scope.cancel()
    assert a.role is b.role is Role.STOPPED


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_failovers(loop: str, metadata_url: str) -> None:
    run_on(loop, failovers, metadata_url)


async def leader_task_cancelled(url: str) -> None:
    a, b = pair(url)
    runs = [asyncio.ensure_future(e.run()) for e in (a, b)]
    for e in (a, b):
        await until(e, lambda e=e: e.leader is not None)  # type: ignore[misc]
    leader, follower = leader_and_follower(a, b)
    first = runs[0 if leader is a else 1]
    first.cancel()  # asyncio's own cancellation: the leader ends its session on the way out
    with pytest.raises(asyncio.CancelledError):
        await first
    assert leader.role is Role.STOPPED
    await until(follower, lambda: follower.is_leader)
    async with await open_metadata_store(url) as store:
        holder = Claim.decode((await store.get("/election/leader")).value)
    assert holder.advertise == follower.advertise
    second = runs[1 if leader is a else 0]
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert follower.role is Role.STOPPED


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_leader_task_cancelled_by_asyncio(loop: str, metadata_url: str) -> None:
    run_on(loop, leader_task_cancelled, metadata_url)


async def used_from_elsewhere(url: str) -> None:
    (a, _) = pair(url)
    async with anyio.create_task_group() as tasks:
        await tasks.start(a.run)
        assert a.is_leader

        def elsewhere() -> None:
            with pytest.raises(WrongEventLoopError):
                asyncio.run(a.confirm())
            with pytest.raises(WrongEventLoopError):
                asyncio.run(a.wait_changed(a.generation))

        await anyio.to_thread.run_sync(elsewhere)
        assert await a.confirm()
        tasks.cancel_scope.cancel()


@pytest.mark.parametrize("loop", ["trio", "asyncio"])
def test_used_from_another_loop(loop: str, tmp_path: object) -> None:
    run_on(loop, used_from_elsewhere, f"sqlite://{tmp_path}/m.db")
