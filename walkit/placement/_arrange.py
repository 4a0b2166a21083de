"""Pure arithmetic of rack-aware placement: how many bookies per rack, and in what order.

Entry ``e`` is written to ensemble indexes ``e % E .. e % E + Qw - 1`` (taken cyclically), so
the write quorums are the E cyclic windows of Qw consecutive positions. Whether every window
can span at least T racks depends only on how many bookies each rack gives:

1. counts: take bookies from racks as evenly as their capacities allow (water-filling). This
   makes the largest share as small as possible, which is the best any choice can do.
2. order: try quick constructions first: the bookies grouped by rack (largest group first)
   laid column by column (``0, g, 2g, ..``, then ``1, 1+g, ..``) for every stride ``g``, and
   the largest group cut into even runs with one other bookie between runs. For T = 2 these
   are exact: stride 2 works whenever no rack has more than half the ensemble, the runs
   whenever one does and the longest run stays below Qw, which is the condition for any order
   to exist. For T > 2, if no construction works, an exhaustive search (memoized,
   bounded at ``SEARCH_BUDGET`` steps) decides.

``tests/placement`` compares the result with an independent exhaustive search on random
topologies; it was also checked on every rack layout up to E = 10 with five racks.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from functools import lru_cache

from walkit._logging import get_logger

log = get_logger(__name__)

Score = tuple[int, ...]

#: Steps the exhaustive order search may take before it gives up (it then reports "no order").
SEARCH_BUDGET = 50_000
#: Ensembles larger than this are only arranged by the quick constructions.
SEARCH_MAX_SIZE = 64


def write_windows(ensemble_size: int, write_quorum: int) -> list[list[int]]:
    """The ensemble indexes of each write quorum (one per starting index)."""
    return [[(s + j) % ensemble_size for j in range(write_quorum)] for s in range(ensemble_size)]


def distinct_per_window(labels: Sequence[str], write_quorum: int) -> list[int]:
    """How many distinct labels each cyclic window of ``write_quorum`` holds."""
    n = len(labels)
    return [len({labels[(s + j) % n] for j in range(write_quorum)}) for s in range(n)]


def min_distinct(labels: Sequence[str], write_quorum: int) -> int:
    """The fewest distinct labels in any write quorum (0 for an empty sequence)."""
    return min(distinct_per_window(labels, write_quorum), default=0)


def waterfill(
    capacities: Mapping[str, int], total: int, rng: random.Random
) -> dict[str, int] | None:
    """Counts per key summing to ``total``, each within its capacity, as even as possible.

    Returns None when the capacities add up to less than ``total``. Which keys get the one
    extra at the top level is chosen with ``rng``.
    """
    split = waterfill_split(capacities, total)
    if split is None:
        return None
    base, eligible, rest = split
    return with_extra(base, rng.sample(eligible, rest))


def waterfill_split(
    capacities: Mapping[str, int], total: int
) -> tuple[dict[str, int], list[str], int] | None:
    """The even split before its last step: (base counts, keys that may take one more, how
    many of them do). Every even split is ``base`` plus one for ``rest`` of ``eligible``."""
    keys = sorted(k for k, c in capacities.items() if c > 0)
    if sum(capacities[k] for k in keys) < total:
        return None
    if total <= 0:
        return {}, [], 0
    level = 0
    while sum(min(capacities[k], level) for k in keys) < total:
        level += 1
    base = {k: min(capacities[k], level - 1) for k in keys}
    rest = total - sum(base.values())
    return base, [k for k in keys if capacities[k] >= level], rest


def with_extra(base: Mapping[str, int], extra: Iterable[str]) -> dict[str, int]:
    counts = dict(base)
    for k in extra:
        counts[k] += 1
    return {k: c for k, c in counts.items() if c > 0}


def column_major(grouped: Sequence[str], stride: int) -> list[str]:
    """Place ``grouped[i]`` at the i-th position of ``0, g, 2g, .., 1, 1+g, ..``."""
    n = len(grouped)
    order = [p for start in range(stride) for p in range(start, n, stride)]
    seq = [""] * n
    for pos, label in zip(order, grouped, strict=True):
        seq[pos] = label
    return seq


def runs_around_largest(grouped: Sequence[str]) -> list[str] | None:
    """The largest group cut into even runs, one other label between consecutive runs.

    None when the largest group is smaller than the rest (then some runs would be empty).
    """
    big = grouped[0]
    size = sum(1 for lab in grouped if lab == big)
    others = [lab for lab in grouped if lab != big]
    if not others or size < len(others):
        return None
    base, extra = divmod(size, len(others))
    seq: list[str] = []
    for i, sep in enumerate(others):
        seq.extend([big] * (base + (1 if i < extra else 0)))
        seq.append(sep)
    return seq


def _searched(grouped: Sequence[str], write_quorum: int, target: int) -> list[str] | None:
    """Exhaustive search on the canonical form (labels numbered largest group first)."""
    labels = list(dict.fromkeys(grouped))
    counts = tuple(sum(1 for lab in grouped if lab == label) for label in labels)
    found = _search(counts, write_quorum, target)
    return None if found is None else [labels[i] for i in found]


class _OutOfBudget(Exception):
    pass


@lru_cache(maxsize=256)
def _search(counts: tuple[int, ...], w: int, t: int) -> tuple[int, ...] | None:
    """A cyclic sequence with counts[i] copies of label i whose every window of w has t
    distinct labels, or None (none exists, or the search ran out of budget)."""
    n = sum(counts)
    if n > SEARCH_MAX_SIZE or w > n:
        return None
    k = len(counts)
    head = w - 1
    seq: list[int] = []
    remaining = list(counts)
    dead: set[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = set()
    steps = 0

    def wraps_ok() -> bool:
        return all(len({seq[(s + j) % n] for j in range(w)}) >= t for s in range(n - head, n))

    def dfs() -> bool:
        nonlocal steps
        if len(seq) == n:
            return wraps_ok()
        key = (tuple(remaining), tuple(seq[:head]), tuple(seq[len(seq) - head :]))
        if key in dead:
            return False
        steps += 1
        if steps > SEARCH_BUDGET:
            raise _OutOfBudget
        for i in sorted(range(k), key=lambda j: -remaining[j]):
            if remaining[i] == 0:
                continue
            # Labels with equal counts are interchangeable at the first position.
            if not seq and i > 0 and counts[i] == counts[i - 1]:
                continue
            if len(seq) >= head and len({*seq[len(seq) - head :], i}) < t:
                continue
            seq.append(i)
            remaining[i] -= 1
            if dfs():
                return True
            seq.pop()
            remaining[i] += 1
        dead.add(key)
        return False

    try:
        return tuple(seq) if dfs() else None
    except _OutOfBudget:
        log.warning("placement.order_search_gave_up", counts=counts, write_quorum=w, target=t)
        return None


def grouped_by_count(counts: Mapping[str, int], rng: random.Random) -> list[str]:
    """Labels repeated by count, largest group first; equal groups in random order."""
    labels = sorted(counts)
    rng.shuffle(labels)
    labels.sort(key=lambda lab: -counts[lab])
    return [lab for lab in labels for _ in range(counts[lab])]


def arrange(
    counts: Mapping[str, int],
    write_quorum: int,
    target: int,
    rng: random.Random,
    *,
    extra: Callable[[], Iterable[Sequence[str]]] | None = None,
    prefer: Callable[[Sequence[str]], Score] | None = None,
) -> list[str] | None:
    """A cyclic order of the labels in which every write quorum spans ``target`` labels.

    ``extra`` gives more candidate orders (with the same counts) to consider; ``prefer``
    scores the candidates that meet the target (highest wins; without it the first wins).
    Returns None if none meets it. The result is rotated by a random amount (rotation keeps
    every window's content).
    """
    grouped = grouped_by_count(counts, rng)
    n = len(grouped)
    if n == 0:
        return []

    def candidates() -> Iterator[Sequence[str]]:
        for stride in range(1, n + 1):
            yield column_major(grouped, stride)
        runs = runs_around_largest(grouped)
        if runs is not None:
            yield runs
        if extra is not None:
            yield from extra()

    best: list[str] | None = None
    best_score: Score = ()
    for seq in candidates():
        if min_distinct(seq, write_quorum) < target:
            continue
        if prefer is None:
            best = list(seq)
            break
        score = prefer(seq)
        if best is None or score > best_score:
            best, best_score = list(seq), score
    if best is None and target > 2:
        best = _searched(grouped, write_quorum, target)
    if best is None:
        return None
    shift = rng.randrange(n)
    return best[shift:] + best[:shift]


def arrange_best_effort(
    counts: Mapping[str, int],
    write_quorum: int,
    target: int,
    rng: random.Random,
    *,
    extra: Callable[[], Iterable[Sequence[str]]] | None = None,
    prefer: Callable[[Sequence[str]], Score] | None = None,
) -> tuple[list[str], int]:
    """Like :func:`arrange`, lowering the target until it can be met; returns (order, target met)."""
    for t in range(target, 0, -1):
        seq = arrange(counts, write_quorum, t, rng, extra=extra, prefer=prefer)
        if seq is not None:
            return seq, t
    raise AssertionError("a target of one label can always be met")  # pragma: no cover
