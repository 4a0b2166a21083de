"""The stabilized topology: a departed bookie leaves the topology only after the period.

Time comes from trio's MockClock (jumped, never slept)."""

from __future__ import annotations

import pytest
import trio
from trio.testing import MockClock

from tests.placement._placement_util import bookie, cluster
from walkit import BookieId
from walkit.errors import ClientClosedError, ConfigurationError, NotEnoughBookiesError
from walkit.placement import BookieInfo, PlacementResources, RackawareEnsemblePlacementPolicy

LAYOUT = {"/a/r1": ["b1", "b2"], "/a/r2": ["b3"]}


def _setup(
    period: float, clock: MockClock
) -> tuple[RackawareEnsemblePlacementPolicy, dict[str, BookieId]]:
    policy = RackawareEnsemblePlacementPolicy()
    ids = cluster(
        policy,
        LAYOUT,
        config={"stabilize_period": period},
        resources=PlacementResources(clock=clock.current_time),
    )
    return policy, ids


def _infos(ids: dict[str, BookieId], *names: str) -> set[BookieInfo]:
    where = {n: loc for loc, names_ in LAYOUT.items() for n in names_}
    return {BookieInfo(ids[n], where[n]) for n in names}


def test_departed_bookie_stays_until_the_period_ends() -> None:
    clock = MockClock()
    policy, ids = _setup(10, clock)
    assert policy.on_cluster_changed(_infos(ids, "b1", "b2"), set()) == set()
    b3 = ids["b3"]
    # Still in the topology (its rack too), but never a placement candidate.
    assert b3 in policy.topology
    assert policy.topology.racks() == ["/a/r1", "/a/r2"]
    assert policy.bookie_state(b3) == "departing"
    assert b3 not in policy.new_ensemble(2, 2, 2)
    with pytest.raises(NotEnoughBookiesError, match="1 recently departed"):
        policy.new_ensemble(3, 2, 2)
    clock.jump(9.5)
    assert policy.on_cluster_changed(_infos(ids, "b1", "b2"), set()) == set()
    assert b3 in policy.topology
    clock.jump(0.5)
    assert policy.on_cluster_changed(_infos(ids, "b1", "b2"), set()) == {b3}
    assert b3 not in policy.topology
    assert policy.topology.racks() == ["/a/r1"]
    assert policy.bookie_state(b3) == "gone"
    # Reported once only.
    assert policy.on_cluster_changed(_infos(ids, "b1", "b2"), set()) == set()


def test_flapping_bookie_is_never_reported() -> None:
    clock = MockClock()
    policy, ids = _setup(10, clock)
    for _ in range(5):
        assert policy.on_cluster_changed(_infos(ids, "b1", "b2"), set()) == set()
        clock.jump(6)
        assert policy.on_cluster_changed(_infos(ids, "b1", "b2", "b3"), set()) == set()
        clock.jump(6)
    assert policy.bookie_state(ids["b3"]) == "writable"
    assert policy.location_of(ids["b3"]) == "/a/r2"


def test_a_new_departure_restarts_the_period() -> None:
    clock = MockClock()
    policy, ids = _setup(10, clock)
    policy.on_cluster_changed(_infos(ids, "b1", "b2"), set())
    clock.jump(8)
    policy.on_cluster_changed(_infos(ids, "b1", "b2", "b3"), set())
    policy.on_cluster_changed(_infos(ids, "b1", "b2"), set())
    clock.jump(8)
    assert policy.on_cluster_changed(_infos(ids, "b1", "b2"), set()) == set()
    clock.jump(2)
    assert policy.on_cluster_changed(_infos(ids, "b1", "b2"), set()) == {ids["b3"]}


def test_expiry_between_changes_is_reported_at_the_next_change() -> None:
    clock = MockClock()
    policy, ids = _setup(5, clock)
    policy.on_cluster_changed(_infos(ids, "b1", "b2"), set())
    clock.jump(6)
    assert ids["b3"] not in policy.topology  # the topology is always current
    assert policy.on_cluster_changed(_infos(ids, "b1", "b2"), set()) == {ids["b3"]}


def test_going_read_only_is_not_leaving() -> None:
    clock = MockClock()
    policy, ids = _setup(5, clock)
    assert policy.on_cluster_changed(_infos(ids, "b1", "b2"), _infos(ids, "b3")) == set()
    clock.jump(100)
    assert policy.on_cluster_changed(_infos(ids, "b1", "b2"), _infos(ids, "b3")) == set()
    assert policy.bookie_state(ids["b3"]) == "readonly"
    assert ids["b3"] not in policy.new_ensemble(2, 2, 2)


def test_without_a_period_bookies_leave_at_once() -> None:
    clock = MockClock()
    policy, ids = _setup(0, clock)
    assert policy.on_cluster_changed(_infos(ids, "b1"), set()) == {ids["b2"], ids["b3"]}
    assert policy.topology.bookies() == [ids["b1"]]


async def test_default_clock_is_trios(mock_clock: MockClock) -> None:
    policy = RackawareEnsemblePlacementPolicy()
    policy.initialize({"stabilize_period": 3})  # no clock given: trio.current_time
    b1, b2 = bookie("b1"), bookie("b2")
    policy.on_cluster_changed({b1, b2}, set())
    assert policy.on_cluster_changed({b1}, set()) == set()
    mock_clock.jump(3)
    assert policy.on_cluster_changed({b1}, set()) == {b2}
    await trio.lowlevel.checkpoint()


def test_period_without_any_clock_is_a_clear_error() -> None:
    policy = RackawareEnsemblePlacementPolicy()
    policy.initialize({"stabilize_period": 3})
    policy.on_cluster_changed({bookie("b1")}, set())
    with pytest.raises(ConfigurationError, match="clock"):
        policy.on_cluster_changed(set(), set())


def test_closed_policy_refuses_work() -> None:
    clock = MockClock()
    policy, _ = _setup(5, clock)
    policy.close()
    with pytest.raises(ClientClosedError):
        policy.new_ensemble(1, 1, 1)
    with pytest.raises(ClientClosedError):
        policy.on_cluster_changed(set(), set())
    policy.initialize({})  # a closed policy can be initialized again
    policy.on_cluster_changed({bookie("b1")}, set())
    assert policy.new_ensemble(1, 1, 1) == [bookie("b1")]
