"""Helpers for the placement tests: building clusters, and an independent feasibility oracle.

The oracle decides by exhaustive search (memoized depth-first over every cyclic order of rack
labels and every way of taking bookies from racks) whether an ensemble can give every write
quorum at least T racks. It shares no code with walkit.placement.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Mapping, Sequence
from functools import cache

from walkit import BookieId
from walkit.placement import BookieInfo, EnsemblePlacementPolicy, PlacementResources


def bookie(name: str, port: int = 3181) -> BookieId:
    return BookieId(name, port)


def cluster(
    policy: EnsemblePlacementPolicy,
    layout: Mapping[str, Iterable[str]],
    *,
    readonly: Iterable[str] = (),
    config: Mapping[str, object] | None = None,
    resources: PlacementResources | None = None,
    seed: int = 0,
) -> dict[str, BookieId]:
    """Initialize ``policy`` and register bookies by location: {"/region/rack": ["bk1", ...]}.

    Returns name -> BookieId. Bookies named in ``readonly`` are registered read-only.
    """
    if resources is None:
        resources = PlacementResources(random=random.Random(seed))
    policy.initialize(dict(config or {}), resources)
    ids: dict[str, BookieId] = {}
    writable: set[BookieInfo] = set()
    ro: set[BookieInfo] = set()
    ro_names = set(readonly)
    for location, names in layout.items():
        for name in names:
            ids[name] = bookie(name)
            info = BookieInfo(ids[name], location)
            (ro if name in ro_names else writable).add(info)
    policy.on_cluster_changed(writable, ro)
    return ids


def windows(n: int, w: int) -> list[list[int]]:
    return [[(s + j) % n for j in range(w)] for s in range(n)]


def min_racks(labels: Sequence[str], w: int) -> int:
    return min(len({labels[i] for i in win}) for win in windows(len(labels), w))


@cache
def _arrangeable(counts: tuple[int, ...], n: int, w: int, t: int) -> bool:
    """Is there a cyclic sequence with counts[i] copies of label i whose every window of w
    holds at least t distinct labels? (Exhaustive; counts sorted, so the cache is shared.)"""
    k = len(counts)
    head = min(w - 1, n)

    @cache
    def dfs(remaining: tuple[int, ...], prefix: tuple[int, ...], suffix: tuple[int, ...]) -> bool:
        placed = n - sum(remaining)
        if placed == n:
            seq = suffix + prefix  # the windows that wrap around
            tail = len(suffix)
            for s in range(tail):
                win = seq[s : s + w]
                if len(win) == w and len(set(win)) < t:
                    return False
            return True
        for label in range(k):
            if remaining[label] == 0:
                continue
            # Labels with equal remaining counts and no use yet are interchangeable.
            if placed == 0 and label > 0 and remaining[label] == remaining[label - 1]:
                continue
            new_suffix = (*suffix, label)[-(w - 1) :] if w > 1 else ()
            window = (*suffix, label)
            if len(window) == w and len(set(window)) < t:
                continue
            new_prefix = prefix if len(prefix) >= head else (*prefix, label)
            rem = list(remaining)
            rem[label] -= 1
            if dfs(tuple(rem), new_prefix, new_suffix):
                return True
        return False

    if t <= 1:
        return True
    if w > n:
        return False
    return dfs(counts, (), ())


def racks_feasible(capacities: Sequence[int], n: int, w: int, t: int) -> bool:
    """Can n distinct bookies from racks of these sizes give every write quorum t racks?"""
    caps = [c for c in capacities if c > 0]
    if sum(caps) < n:
        return False
    seen: set[tuple[int, ...]] = set()
    for counts in itertools.product(*(range(min(c, n) + 1) for c in caps)):
        if sum(counts) != n:
            continue
        key = tuple(sorted((c for c in counts if c), reverse=True))
        if key in seen:
            continue
        seen.add(key)
        if _arrangeable(key, n, w, t):
            return True
    return False


def best_feasible(capacities: Sequence[int], n: int, w: int, t: int) -> int:
    """The highest target <= t that some ensemble meets."""
    for target in range(t, 0, -1):
        if racks_feasible(capacities, n, w, target):
            return target
    return 0
