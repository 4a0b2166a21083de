"""Seeded runs: trio's scheduling order is a function of the seed."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel
import trio.testing

from walkit.errors import InvalidArgumentError
from walkit.testing import (
    SEED_ENV,
    SimCluster,
    SimulationStalled,
    StallGuard,
    deterministic_scheduling,
    replay_hint,
    run,
    seed_from_env,
)


async def _race() -> list[int]:
    order: list[int] = []

    async def worker(i: int) -> None:
        for _ in range(3):
            await trio.lowlevel.checkpoint()
            order.append(i)

    async with trio.open_nursery() as nursery:
        for i in range(8):
            nursery.start_soon(worker, i)
    return order


def test_same_seed_same_schedule() -> None:
    first = run(_race, seed=5, announce=False)
    assert run(_race, seed=5, announce=False) == first
    others = {tuple(run(_race, seed=s, announce=False)) for s in range(6, 12)}
    assert len(others | {tuple(first)}) > 1


def test_run_announces_seed(capsys: pytest.CaptureFixture[str]) -> None:
    run(_race, seed=1234)
    assert f"{SEED_ENV}=1234" in capsys.readouterr().err


def test_scheduler_state_is_restored() -> None:
    from trio._core import _run

    flag = _run._ALLOW_DETERMINISTIC_SCHEDULING
    state = _run._r.getstate()
    with deterministic_scheduling(3) as seeded:
        assert seeded
        assert _run._ALLOW_DETERMINISTIC_SCHEDULING
    assert flag == _run._ALLOW_DETERMINISTIC_SCHEDULING
    assert _run._r.getstate() == state


def test_seed_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SEED_ENV, raising=False)
    assert seed_from_env(9) == 9
    assert isinstance(seed_from_env(), int)
    monkeypatch.setenv(SEED_ENV, "0x10")
    assert seed_from_env(9) == 16
    monkeypatch.setenv(SEED_ENV, "ten")
    with pytest.raises(InvalidArgumentError):
        seed_from_env()
    assert "WALKIT_SIM_SEED=42" in replay_hint(42, "E=3")


async def _ticking() -> None:
    for _ in range(100):
        await trio.sleep(0.001)


async def _spin() -> None:
    # Retries forever without letting simulated time move: a livelock.
    while True:
        await trio.lowlevel.checkpoint()


def test_a_livelock_is_reported_not_hung() -> None:
    with pytest.raises(SimulationStalled, match="WALKIT_SIM_SEED=3") as info:
        run(_spin, seed=3, announce=False, stall_steps=1000)
    assert "stood still at t=0" in str(info.value)
    # Time that moves is no stall, however many steps it takes.
    run(_ticking, seed=3, announce=False, stall_steps=5)


async def test_a_livelock_in_a_cluster(autojump_clock: trio.testing.MockClock) -> None:
    with pytest.raises(SimulationStalled, match="WALKIT_SIM_SEED=9"):
        async with SimCluster(bookies=1, seed=9, announce=False, stall_steps=1000):
            await trio.sleep(1)
            await _spin()
    with pytest.raises(InvalidArgumentError):
        StallGuard(0)
