"""Read ordering (BookKeeper's placement-policy guide): writable without failures, writable with failures (oldest first),
read-only, departed but still in the topology, then gone."""

from __future__ import annotations

import pytest
from trio.testing import MockClock

from tests.placement._placement_util import bookie, cluster
from walkit.errors import InvalidArgumentError
from walkit.placement import (
    BookieInfo,
    DefaultEnsemblePlacementPolicy,
    PlacementResources,
    RackawareEnsemblePlacementPolicy,
    RegionAwareEnsemblePlacementPolicy,
)

LAYOUT = {"/a/r1": ["w1", "w2", "w3"], "/a/r2": ["w4", "ro1"], "/b/r3": ["w5"]}


@pytest.mark.parametrize(
    "policy_cls",
    [
        DefaultEnsemblePlacementPolicy,
        RackawareEnsemblePlacementPolicy,
        RegionAwareEnsemblePlacementPolicy,
    ],
)
def test_read_order_classes(policy_cls: type[RackawareEnsemblePlacementPolicy]) -> None:
    policy = policy_cls()
    ids = cluster(policy, LAYOUT, readonly=["ro1"])
    gone = bookie("gone")
    ensemble = [gone, ids["ro1"], ids["w1"], ids["w2"], ids["w3"], ids["w4"]]
    failures = {ids["w1"]: 50.0, ids["w2"]: 10.0, ids["ro1"]: 1.0, gone: 5.0}
    order = policy.reorder_read_sequence(ensemble, [0, 1, 2, 3, 4, 5], failures)
    # w3, w4 healthy (write-set order); w2 failed longer ago than w1; then read-only; then gone.
    assert [ensemble[i] for i in order] == [
        ids["w3"],
        ids["w4"],
        ids["w2"],
        ids["w1"],
        ids["ro1"],
        gone,
    ]
    # A write set is a subset of the ensemble; the answer is a permutation of it.
    assert sorted(policy.reorder_read_sequence(ensemble, [5, 0, 2], failures)) == [0, 2, 5]
    assert policy.reorder_read_sequence(ensemble, [5, 0, 2], failures) == [5, 2, 0]
    assert policy.reorder_read_lac_sequence(ensemble, [0, 5], {}) == [5, 0]


def test_departed_bookie_reads_before_gone_ones() -> None:
    clock = MockClock()
    policy = RackawareEnsemblePlacementPolicy()
    ids = cluster(
        policy,
        LAYOUT,
        config={"stabilize_period": 30},
        resources=PlacementResources(clock=clock.current_time),
    )
    everyone = {BookieInfo(b, "/a/r1") for name, b in ids.items() if name != "w1"}
    policy.on_cluster_changed(everyone, set())
    ensemble = [bookie("never-seen"), ids["w1"], ids["w2"]]
    assert policy.bookie_state(ids["w1"]) == "departing"
    assert policy.reorder_read_sequence(ensemble, [0, 1, 2], {}) == [2, 1, 0]
    clock.jump(31)
    assert policy.bookie_state(ids["w1"]) == "gone"
    assert policy.reorder_read_sequence(ensemble, [0, 1, 2], {}) == [2, 0, 1]


def test_region_aware_two_local_then_one_remote() -> None:
    layout = {
        "/local/r1": ["l1", "l2"],
        "/local/r2": ["l3", "l4"],
        "/remote/r1": ["x1", "x2"],
    }
    policy = RegionAwareEnsemblePlacementPolicy()
    ids = cluster(policy, layout, config={"local_region": "/local"})
    ensemble = [ids[n] for n in ("x1", "l1", "x2", "l2", "l3", "l4")]
    order = policy.reorder_read_sequence(ensemble, list(range(6)), {})
    assert [ensemble[i].host for i in order] == ["l1", "l2", "x1", "l3", "l4", "x2"]
    # Failed bookies still go after every healthy one, local or not.
    order = policy.reorder_read_sequence(ensemble, list(range(6)), {ids["l1"]: 3.0})
    assert [ensemble[i].host for i in order] == ["l2", "l3", "x1", "l4", "x2", "l1"]
    # Without a local region it is the rack-aware order.
    plain = RegionAwareEnsemblePlacementPolicy()
    cluster(plain, layout)
    assert plain.reorder_read_sequence(ensemble, list(range(6)), {}) == list(range(6))


def test_local_region_from_local_host() -> None:
    policy = RegionAwareEnsemblePlacementPolicy()
    cluster(
        policy,
        {"/east/r1": ["e1"], "/west/r1": ["w1", "w2"]},
        config={"local_host": "me.example", "locations": {"me.example": "/west/r9"}},
    )
    assert policy.local_region == "/west"


def test_reordering_can_be_turned_off_and_bad_input_is_refused() -> None:
    policy = RackawareEnsemblePlacementPolicy()
    ids = cluster(policy, LAYOUT, readonly=["ro1"], config={"reorder_reads": "false"})
    ensemble = [ids["ro1"], ids["w1"]]
    assert policy.reorder_read_sequence(ensemble, [0, 1], {}) == [0, 1]
    with pytest.raises(InvalidArgumentError):
        policy.reorder_read_sequence(ensemble, [0, 2], {})
    with pytest.raises(InvalidArgumentError):
        policy.reorder_read_sequence(ensemble, [1, 1], {})
    on = RackawareEnsemblePlacementPolicy()
    cluster(on, LAYOUT)
    with pytest.raises(InvalidArgumentError, match="failure_history"):
        on.reorder_read_sequence(ensemble, [0, 1], {ids["w1"]: "yesterday"})  # type: ignore[dict-item]
