"""Pure arithmetic of rack-aware placement: how many bookies per rack, and in what order.

Entry ``e`` is written to ensemble indexes ``e % E .. e % E + Qw - 1`` (taken cyclically), so
the write quorums are the E cyclic windows of Qw consecutive positions. The question "can every
window span at least T racks" depends only on how many bookies each rack gives, and is answered
by two steps:

1. counts: take bookies from racks as evenly as their capacities allow (water-filling). This
   makes the largest share as small as possible, which is the best any choice can do.
2. order: lay the bookies grouped by rack (largest group first) into positions column by column
   (``0, g, 2g, ..``, then ``1, 1+g, ..``) and try every stride ``g``.

An exhaustive search over all arrangements agrees with these two steps on every case up to
E = 8 with four racks (and on the infeasible cases checked up to E = 12), and
``tests/placement`` keeps comparing them with a brute force on random small topologies.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

Score = tuple[int, ...]


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
