"""The network topology, the placement-policy guide's two examples, locations and the default rack."""

from __future__ import annotations

import pytest

from tests.placement._placement_util import bookie, cluster, min_racks
from walkit.errors import ConfigurationError, InvalidArgumentError, NotEnoughBookiesError
from walkit.placement import (
    DEFAULT_RACK,
    BookieInfo,
    DefaultEnsemblePlacementPolicy,
    NetworkTopology,
    RackawareEnsemblePlacementPolicy,
    RegionAwareEnsemblePlacementPolicy,
    normalize_location,
)

# BookKeeper's placement-policy guide, first example: three bookies in region A, two racks.
SEED_ONE = {"/region-a/rack-1": ["bk1", "bk2"], "/region-a/rack-2": ["bk3"]}
# BookKeeper's placement-policy guide, second example: four bookies in two regions, one rack each.
SEED_TWO = {"/region-a/rack-1": ["bk1", "bk2"], "/region-b/rack-2": ["bk3", "bk4"]}


def test_seed_example_one_tree() -> None:
    policy = RackawareEnsemblePlacementPolicy()
    cluster(policy, SEED_ONE)
    assert policy.topology.to_dict() == {
        "region-a": {"rack-1": ["bk1:3181", "bk2:3181"], "rack-2": ["bk3:3181"]}
    }
    assert policy.topology.regions() == ["/region-a"]
    assert policy.topology.racks() == ["/region-a/rack-1", "/region-a/rack-2"]
    assert policy.topology.bookies("/region-a/rack-1") == [bookie("bk1"), bookie("bk2")]
    assert "rack-2" in policy.topology.render()


def test_seed_example_one_placement() -> None:
    policy = RackawareEnsemblePlacementPolicy()
    ids = cluster(policy, SEED_ONE)
    for _ in range(30):
        # E = Qw = 2: one bookie from each rack, every time.
        pair = policy.new_ensemble(2, 2, 2)
        assert ids["bk3"] in pair
        assert {policy.location_of(b) for b in pair} == set(SEED_ONE)
        # E = Qw = 3 takes everyone and still spans both racks.
        assert set(policy.new_ensemble(3, 3, 2)) == set(ids.values())
    # E = 3, Qw = 2: one write quorum must be rack-1 twice; best effort places anyway...
    ensemble = policy.new_ensemble(3, 2, 2)
    assert min_racks([policy.location_of(b) for b in ensemble], 2) == 1
    # ...and enforcing refuses, saying why.
    strict = RackawareEnsemblePlacementPolicy()
    cluster(strict, SEED_ONE, config={"enforce_min_racks": True})
    with pytest.raises(NotEnoughBookiesError, match=r"need 3 bookie\(s\), 3 available.*2 racks"):
        strict.new_ensemble(3, 2, 2)
    assert len(strict.new_ensemble(2, 2, 2)) == 2
    with pytest.raises(NotEnoughBookiesError, match=r"need 4 bookie\(s\), 3 available"):
        policy.new_ensemble(4, 2, 2)


def test_seed_example_two_tree_and_regions() -> None:
    policy = RegionAwareEnsemblePlacementPolicy()
    ids = cluster(policy, SEED_TWO, config={"local_region": "region-a"})
    assert policy.topology.to_dict() == {
        "region-a": {"rack-1": ["bk1:3181", "bk2:3181"]},
        "region-b": {"rack-2": ["bk3:3181", "bk4:3181"]},
    }
    assert policy.topology.regions() == ["/region-a", "/region-b"]
    for _ in range(20):
        two = policy.new_ensemble(2, 2, 2)
        assert {policy.topology.region_of(b) for b in two} == {"/region-a", "/region-b"}
        four = policy.new_ensemble(4, 3, 2)
        assert set(four) == set(ids.values())
        # Regions interleave, so every write quorum spans both regions.
        assert min_racks([policy.topology.region_of(b) or "" for b in four], 2) == 2
    # Reads from region A: two local bookies, then the remote one.
    ensemble = [ids["bk3"], ids["bk1"], ids["bk4"], ids["bk2"]]
    assert policy.reorder_read_sequence(ensemble, [0, 1, 2, 3], {}) == [1, 3, 0, 2]


def test_region_shares_seed_example_fifteen_over_three() -> None:
    layout = {
        f"/region-{r}/rack-{k}": [f"{r}{k}{i}" for i in range(4)] for r in "abc" for k in (1, 2)
    }
    policy = RegionAwareEnsemblePlacementPolicy()
    cluster(policy, layout)
    ensemble = policy.new_ensemble(15, 3, 2)
    regions = [policy.topology.region_of(b) for b in ensemble]
    assert {r: regions.count(r) for r in set(regions)} == {
        "/region-a": 5,
        "/region-b": 5,
        "/region-c": 5,
    }
    # Three regions, Qw = 3: each write quorum has one bookie from each region.
    assert min_racks([r or "" for r in regions], 3) == 3


def test_topology_moves_and_removes() -> None:
    topo = NetworkTopology()
    b = bookie("bk1")
    topo.add(b, "/r/a")
    topo.add(b, "/r/b/")
    assert topo.location_of(b) == "/r/b"
    assert topo.racks() == ["/r/b"]
    assert topo.remove(b) == "/r/b"
    assert topo.remove(b) is None
    assert len(topo) == 0 and topo.regions() == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("/region-a/rack-1", "/region-a/rack-1"),
        ("/region-a/rack-1/", "/region-a/rack-1"),
        (" /r/k ", "/r/k"),
        ("/rack-7", "/default-region/rack-7"),
    ],
)
def test_normalize_location(text: str, expected: str) -> None:
    assert normalize_location(text) == expected


@pytest.mark.parametrize(
    "bad", ["", "/", "region/rack", "/a/b/c", "/a//b", "/a b/c", "/../x", 3, None]
)
def test_normalize_location_refuses(bad: object) -> None:
    with pytest.raises(InvalidArgumentError):
        normalize_location(bad)


def test_unresolvable_bookies_go_to_the_default_rack() -> None:
    policy = RackawareEnsemblePlacementPolicy()
    cluster(policy, {})
    b1, b2 = bookie("h1"), bookie("h2")
    # No registered location, no resolver; a registered location that is garbage.
    policy.on_cluster_changed({BookieInfo(b1), BookieInfo(b2, "not-a-location")}, set())
    assert policy.location_of(b1) == DEFAULT_RACK == policy.location_of(b2)
    assert policy.topology.to_dict() == {"default-region": {"default-rack": ["h1:3181", "h2:3181"]}}
    # One rack only: best effort still places.
    assert len(policy.new_ensemble(2, 2, 2)) == 2


def test_default_rack_is_configurable() -> None:
    policy = RackawareEnsemblePlacementPolicy()
    cluster(policy, {}, config={"default_rack": "/dc1/unknown"})
    policy.on_cluster_changed({bookie("h1")}, set())
    assert policy.location_of(bookie("h1")) == "/dc1/unknown"
    with pytest.raises(ConfigurationError, match="default_rack"):
        RackawareEnsemblePlacementPolicy().initialize({"default_rack": "nope"})


def test_default_policy_ignores_locations() -> None:
    policy = DefaultEnsemblePlacementPolicy()
    ids = cluster(policy, SEED_ONE, config={"location_script": "/does/not/matter"})
    assert {policy.location_of(b) for b in ids.values()} == {DEFAULT_RACK}
    assert sorted(policy.new_ensemble(3, 2, 2)) == sorted(ids.values())


def test_bookie_id_and_info_are_both_accepted() -> None:
    policy = RackawareEnsemblePlacementPolicy()
    cluster(policy, {})
    # A mixed set is beyond the declared type (a set of either kind) but accepted at run time.
    mixed = {bookie("a"), BookieInfo(bookie("b"), "/r/x")}
    policy.on_cluster_changed(mixed, {bookie("c")})  # type: ignore[arg-type]
    assert policy.writable_bookies() == {bookie("a"), bookie("b")}
    assert policy.readonly_bookies() == {bookie("c")}
    # A bookie in both lists, or flagged read-only, counts as read-only.
    mixed = {bookie("a"), BookieInfo(bookie("b"), "/r/x", read_only=True)}
    policy.on_cluster_changed(mixed, {bookie("a")})  # type: ignore[arg-type]
    assert policy.writable_bookies() == set()
    assert policy.readonly_bookies() == {bookie("a"), bookie("b")}
    with pytest.raises(InvalidArgumentError):
        policy.on_cluster_changed({"a:1"}, set())  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        policy.on_cluster_changed("a:1", set())  # type: ignore[arg-type]


def test_bad_arguments_are_refused() -> None:
    policy = RackawareEnsemblePlacementPolicy()
    ids = cluster(policy, SEED_ONE)
    ensemble = [ids["bk1"], ids["bk3"]]
    with pytest.raises(InvalidArgumentError):
        policy.new_ensemble(2, 3, 1)
    with pytest.raises(InvalidArgumentError):
        policy.new_ensemble(2, 2, 2, exclude={"bk1"})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="not in the ensemble"):
        policy.replace_bookie(2, 2, 2, ensemble, ids["bk2"])
    with pytest.raises(InvalidArgumentError, match="ensemble_size"):
        policy.replace_bookie(3, 2, 2, ensemble, ids["bk1"])
    with pytest.raises(InvalidArgumentError, match="duplicates"):
        policy.replace_bookie(2, 2, 2, [ids["bk1"], ids["bk1"]], ids["bk1"])


def test_replace_prefers_the_same_rack_and_says_when_it_cannot() -> None:
    layout = {"/a/r1": ["x1", "x2", "x3"], "/a/r2": ["y1", "y2", "y3"]}
    policy = RackawareEnsemblePlacementPolicy()
    ids = cluster(policy, layout, config={"enforce_min_racks": True})
    ensemble = [ids["x1"], ids["y1"]]
    for _ in range(10):
        assert policy.replace_bookie(2, 2, 2, ensemble, ids["x1"]) in {ids["x2"], ids["x3"]}
    # With the rest of rack r1 excluded, only r2 is left: that would put both copies in r2.
    with pytest.raises(NotEnoughBookiesError, match=r"need 1 bookie\(s\), 2 available.*x1:3181"):
        policy.replace_bookie(2, 2, 2, ensemble, ids["x1"], exclude={ids["x2"], ids["x3"]})
    with pytest.raises(NotEnoughBookiesError, match=r"need 1 bookie\(s\), 0 available"):
        policy.replace_bookie(2, 2, 2, ensemble, ids["x1"], exclude=set(ids.values()))
    lax = RackawareEnsemblePlacementPolicy()
    ids = cluster(lax, layout)
    got = lax.replace_bookie(2, 2, 2, ensemble, ids["x1"], exclude={ids["x2"], ids["x3"]})
    assert got in {ids["y2"], ids["y3"]}


def test_seeded_placement_repeats() -> None:
    layout = {f"/a/r{k}": [f"b{k}{i}" for i in range(3)] for k in range(4)}
    runs = []
    for _ in range(2):
        policy = RegionAwareEnsemblePlacementPolicy()
        cluster(policy, layout, config={"random_seed": 42}, resources=None, seed=7)
        runs.append([policy.new_ensemble(5, 3, 2) for _ in range(5)])
    assert runs[0] == runs[1]
    via_option = RackawareEnsemblePlacementPolicy()
    via_option.initialize({"random_seed": 9})
    via_option2 = RackawareEnsemblePlacementPolicy()
    via_option2.initialize({"random_seed": 9})
    for p in (via_option, via_option2):
        p.on_cluster_changed({BookieInfo(bookie(f"h{i}"), f"/a/r{i % 3}") for i in range(9)}, set())
    assert via_option.new_ensemble(4, 2, 2) == via_option2.new_ensemble(4, 2, 2)


def test_replacing_a_bookie_that_left_uses_its_last_rack() -> None:
    layout = {"/a/r1": ["x1", "x2"], "/a/r2": ["y1", "y2"], "/a/r3": ["z1"]}
    policy = RackawareEnsemblePlacementPolicy()
    ids = cluster(policy, layout)
    ensemble = [ids["x1"], ids["y1"]]
    # x1 dies and its registration goes: it is out of the topology at once (no period).
    remaining = {BookieInfo(ids[n], loc) for loc, ns in layout.items() for n in ns if n != "x1"}
    assert policy.on_cluster_changed(remaining, set()) == {ids["x1"]}
    assert policy.bookie_state(ids["x1"]) == "gone"
    for _ in range(10):
        assert policy.replace_bookie(2, 2, 2, ensemble, ids["x1"]) == ids["x2"]


def test_region_shares_remainder_goes_where_racks_allow() -> None:
    """E = 3 over two regions is 2 + 1; only region b (two racks) can take the 2 without two
    copies of one write quorum landing in one rack."""
    layout = {"/a/r1": ["a1", "a2"], "/b/r1": ["b1"], "/b/r2": ["b2"]}
    for seed in range(20):
        policy = RegionAwareEnsemblePlacementPolicy()
        ids = cluster(policy, layout, config={"enforce_min_racks": True}, seed=seed)
        ensemble = policy.new_ensemble(3, 2, 2)
        assert {ids["b1"], ids["b2"]} <= set(ensemble)
        assert min_racks([policy.location_of(b) for b in ensemble], 2) == 2
