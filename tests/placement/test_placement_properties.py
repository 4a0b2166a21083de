"""Property tests over random topologies: the placement rules against an exhaustive oracle."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import TypedDict

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.placement._placement_util import best_feasible, min_racks, racks_feasible, windows
from walkit import BookieId
from walkit.errors import NotEnoughBookiesError
from walkit.placement import (
    BookieInfo,
    DefaultEnsemblePlacementPolicy,
    EnsemblePlacementPolicy,
    PlacementResources,
    RackawareEnsemblePlacementPolicy,
    RegionAwareEnsemblePlacementPolicy,
)

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Topology(TypedDict):
    writable: dict[BookieId, str]
    readonly: dict[BookieId, str]
    exclude: frozenset[BookieId]
    E: int
    Qw: int
    Qa: int
    seed: int


@st.composite
def topologies(draw: st.DrawFn, max_regions: int = 2, max_racks: int = 3) -> Topology:
    """Regions of racks of bookies, some read-only, some excluded, and quorum sizes."""
    n_regions = draw(st.integers(1, max_regions))
    writable: dict[BookieId, str] = {}
    readonly: dict[BookieId, str] = {}
    port = 3181
    for r in range(n_regions):
        for k in range(draw(st.integers(1, max_racks))):
            loc = f"/region-{r}/rack-{k}"
            for _ in range(draw(st.integers(0, 4))):
                port += 1
                b = BookieId("10.0.0.1", port)
                (readonly if draw(st.booleans()) and draw(st.booleans()) else writable)[b] = loc
    everyone = sorted(writable) + sorted(readonly)
    exclude = draw(st.sets(st.sampled_from(everyone), max_size=2)) if everyone else set()
    e = draw(st.integers(1, 8))
    qw = draw(st.integers(1, e))
    qa = draw(st.integers(1, qw))
    return {
        "writable": writable,
        "readonly": readonly,
        "exclude": frozenset(exclude),
        "E": e,
        "Qw": qw,
        "Qa": qa,
        "seed": draw(st.integers(0, 2**32)),
    }


def _setup(
    policy_cls: type[EnsemblePlacementPolicy], topo: Topology, **config: object
) -> tuple[EnsemblePlacementPolicy, dict[BookieId, str]]:
    policy = policy_cls()
    policy.initialize(config, PlacementResources(random=random.Random(topo["seed"])))
    policy.on_cluster_changed(
        {BookieInfo(b, loc) for b, loc in topo["writable"].items()},
        {BookieInfo(b, loc) for b, loc in topo["readonly"].items()},
    )
    candidates = {b: loc for b, loc in topo["writable"].items() if b not in topo["exclude"]}
    return policy, candidates


def _rack_caps(candidates: dict[BookieId, str]) -> list[int]:
    return list(Counter(candidates.values()).values())


def _check_basic(ensemble: list[BookieId], topo: Topology, candidates: dict[BookieId, str]) -> None:
    assert len(ensemble) == topo["E"]
    assert len(set(ensemble)) == len(ensemble), "duplicates"
    assert set(ensemble) <= set(candidates), "a read-only, excluded or unknown bookie was chosen"


@SETTINGS
@given(topologies())
def test_default_policy(topo: Topology) -> None:
    policy, candidates = _setup(DefaultEnsemblePlacementPolicy, topo)
    if len(candidates) < topo["E"]:
        with pytest.raises(NotEnoughBookiesError):
            policy.new_ensemble(topo["E"], topo["Qw"], topo["Qa"], topo["exclude"])
        return
    ensemble = policy.new_ensemble(topo["E"], topo["Qw"], topo["Qa"], topo["exclude"])
    _check_basic(ensemble, topo, candidates)


@SETTINGS
@given(topologies(), st.integers(1, 4), st.booleans())
def test_rackaware_new_ensemble(topo: Topology, min_racks_option: int, enforce: bool) -> None:
    policy, candidates = _setup(
        RackawareEnsemblePlacementPolicy,
        topo,
        min_racks_per_write_quorum=min_racks_option,
        enforce_min_racks=enforce,
    )
    e, qw = topo["E"], topo["Qw"]
    caps = _rack_caps(candidates)
    target = min(min_racks_option, qw)
    possible = len(candidates) >= e and (not enforce or racks_feasible(caps, e, qw, target))
    if not possible:
        with pytest.raises(NotEnoughBookiesError) as info:
            policy.new_ensemble(e, qw, topo["Qa"], topo["exclude"])
        assert f"need {e} bookie(s)" in str(info.value)
        return
    ensemble = policy.new_ensemble(e, qw, topo["Qa"], topo["exclude"])
    _check_basic(ensemble, topo, candidates)
    achieved = min_racks([candidates[b] for b in ensemble], qw)
    # Every write quorum covers two racks (or the configured number) whenever any ensemble can.
    assert achieved >= best_feasible(caps, e, qw, target)
    if racks_feasible(caps, e, qw, min(2, qw)):
        assert achieved >= min(2, qw, target)


@SETTINGS
@given(topologies(), st.data())
def test_rackaware_replace_keeps_rack_rules(topo: Topology, data: st.DataObject) -> None:
    enforce = data.draw(st.booleans())
    policy, candidates = _setup(RackawareEnsemblePlacementPolicy, topo, enforce_min_racks=enforce)
    e, qw, qa = topo["E"], topo["Qw"], topo["Qa"]
    try:
        ensemble = policy.new_ensemble(e, qw, qa, topo["exclude"])
    except NotEnoughBookiesError:
        return
    idx = data.draw(st.integers(0, e - 1))
    extra_exclude = frozenset(data.draw(st.sets(st.sampled_from(sorted(candidates)))))
    exclude = topo["exclude"] | extra_exclude
    pool = {b: loc for b, loc in candidates.items() if b not in exclude and b not in ensemble}
    locs = [candidates[b] for b in ensemble]
    affected = [w for w in windows(e, qw) if idx in w]
    target = min(2, qw)

    def coverage(rack: str) -> int:
        return min(len({rack if j == idx else locs[j] for j in w}) for w in affected)

    best = max((min(coverage(loc), target) for loc in pool.values()), default=None)
    if best is None or (enforce and best < target):
        with pytest.raises(NotEnoughBookiesError):
            policy.replace_bookie(e, qw, qa, ensemble, ensemble[idx], exclude)
        return
    new = policy.replace_bookie(e, qw, qa, ensemble, ensemble[idx], exclude)
    assert new in pool
    assert min(coverage(pool[new]), target) == best


def _region(loc: str) -> str:
    return loc.rsplit("/", 1)[0]


# Region b (two racks) must take the larger share; region a has one rack.
_SHARE_REMAINDER = {
    "writable": {
        BookieId("10.0.0.1", 1): "/region-a/rack-0",
        BookieId("10.0.0.1", 2): "/region-a/rack-0",
        BookieId("10.0.0.1", 3): "/region-b/rack-0",
        BookieId("10.0.0.1", 4): "/region-b/rack-1",
    },
    "readonly": {},
    "exclude": frozenset(),
    "E": 3,
    "Qw": 2,
    "Qa": 1,
    "seed": 1,
}


@SETTINGS
@given(topologies(max_regions=3, max_racks=2), st.booleans())
@example(_SHARE_REMAINDER, True)
@example({**_SHARE_REMAINDER, "seed": 2}, False)
@example({**_SHARE_REMAINDER, "seed": 3}, True)
def test_regionaware_shares_and_racks(topo: Topology, enforce: bool) -> None:
    policy, candidates = _setup(RegionAwareEnsemblePlacementPolicy, topo, enforce_min_racks=enforce)
    e, qw = topo["E"], topo["Qw"]
    target = min(2, qw)
    possible = len(candidates) >= e and any(
        _racks_feasible_with_shares(candidates, shares, e, qw, target)
        for shares in _even_shares(candidates, e)
    )
    if len(candidates) < e or (enforce and not possible):
        with pytest.raises(NotEnoughBookiesError):
            policy.new_ensemble(e, qw, topo["Qa"], topo["exclude"])
        return
    ensemble = policy.new_ensemble(e, qw, topo["Qa"], topo["exclude"])
    _check_basic(ensemble, topo, candidates)
    shares = Counter(_region(candidates[b]) for b in ensemble)
    assert shares in _even_shares(candidates, e), "shares are not equal within one"
    # Inside equal shares the racks rule holds whenever the topology allows it.
    if possible:
        assert min_racks([candidates[b] for b in ensemble], qw) >= target


def _even_shares(candidates: dict[BookieId, str], e: int) -> list[Counter[str]]:
    """Every split of e over the regions with shares equal within one, where a region short
    of bookies gives all it has (enumerated, not computed the policy's way)."""
    available = Counter(_region(loc) for loc in candidates.values())
    regions = sorted(available)
    out = []
    for combo in itertools.product(*(range(available[r] + 1) for r in regions)):
        if sum(combo) != e:
            continue
        shares = dict(zip(regions, combo, strict=True))
        if all(all(s <= shares[r] + 1 for s in combo) for r in regions if shares[r] < available[r]):
            out.append(Counter({r: s for r, s in shares.items() if s}))
    return out


def _racks_feasible_with_shares(
    candidates: dict[BookieId, str], shares: Counter[str], e: int, w: int, t: int
) -> bool:
    """Racks feasibility when each region gives exactly its share, for t <= 2: racks of
    different regions differ, so only the largest rack count m matters, and a cyclic order
    exists iff m < e and ceil(m / (e - m)) <= w - 1 (no run of one rack as long as w)."""
    if t <= 1:
        return True
    m = 0
    for region, share in shares.items():
        racks = Counter(loc for loc in candidates.values() if _region(loc) == region)
        level = 0
        while sum(min(c, level) for c in racks.values()) < share:
            level += 1
        m = max(m, level)
    return m < e and -(-m // (e - m)) <= w - 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 3), min_size=1, max_size=4), st.integers(2, 6), st.data())
def test_oracle_agrees_with_closed_form_for_two_racks(
    caps: list[int], e: int, data: st.DataObject
) -> None:
    """The exhaustive oracle against the closed form for t = 2 (a check of the test itself)."""
    w = data.draw(st.integers(2, e))
    if sum(caps) < e:
        return
    level = 0
    while sum(min(c, level) for c in caps) < e:
        level += 1
    closed = level < e and -(-level // (e - level)) <= w - 1
    assert racks_feasible(caps, e, w, 2) == closed


def _layout_from_caps(caps: list[int]) -> dict[BookieId, str]:
    out: dict[BookieId, str] = {}
    port = 4000
    for k, cap in enumerate(caps):
        for _ in range(cap):
            port += 1
            out[BookieId("10.0.0.2", port)] = f"/dc/rack-{k}"
    return out


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    caps=st.lists(st.integers(1, 7), min_size=2, max_size=5),
    e=st.integers(8, 10),
    data=st.data(),
)
# Orders that the column-by-column layout alone misses (found by an exhaustive comparison).
@example(caps=[4, 6], e=10, data=None)
@example(caps=[1, 3, 3, 3], e=10, data=None)
@example(caps=[1, 1, 1, 2, 7], e=10, data=None)
def test_rackaware_exact_on_larger_ensembles(
    caps: list[int], e: int, data: st.DataObject | None
) -> None:
    """Enforced placement succeeds exactly when some ensemble meets the target, for E up to 10."""
    if data is None:  # the explicit examples: the hard (w, t) pairs
        cases = [(3, 2), (3, 3), (4, 3)]
    else:
        w = data.draw(st.integers(2, min(e, 5)))
        cases = [(w, data.draw(st.integers(2, min(w, 4))))]
    for w, t in cases:
        if w > e:
            continue
        policy = RackawareEnsemblePlacementPolicy()
        policy.initialize(
            {"min_racks_per_write_quorum": t, "enforce_min_racks": True},
            PlacementResources(random=random.Random(sum(caps) * 31 + e)),
        )
        layout = _layout_from_caps(caps)
        policy.on_cluster_changed({BookieInfo(b, loc) for b, loc in layout.items()}, set())
        if racks_feasible(caps, e, w, t):
            ensemble = policy.new_ensemble(e, w, 1)
            assert len(set(ensemble)) == e
            assert min_racks([layout[b] for b in ensemble], w) >= t, (caps, e, w, t)
        else:
            with pytest.raises(NotEnoughBookiesError):
                policy.new_ensemble(e, w, 1)
