"""Region-aware placement: equal shares per region, rack-aware inside each region."""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence

from walkit._core.types import BookieId
from walkit.placement._arrange import (
    Score,
    arrange,
    column_major,
    distinct_per_window,
    waterfill,
    waterfill_split,
    with_extra,
)
from walkit.placement._rackaware import RackawareEnsemblePlacementPolicy
from walkit.placement._topology import region_of

#: Reads try this many local bookies before one remote (BookKeeper's placement-policy guide).
LOCAL_READS_PER_REMOTE = 2
#: How many ways of handing out the shares' remainder to try at most.
_MAX_SHARE_SPLITS = 64


class RegionAwareEnsemblePlacementPolicy(RackawareEnsemblePlacementPolicy):
    """Takes an equal share of the ensemble from each region (BookKeeper's placement-policy guide:
    15 bookies over three regions is 5 from each), and inside each region spreads its share over
    racks.

    Shares differ by at most one; a region with fewer writable bookies than its share gives all
    it has and the other regions share the rest equally. Bookies of different regions are
    interleaved so write quorums span regions, and the racks rule of the rack-aware policy
    (``min_racks_per_write_quorum``, ``enforce_min_racks``) holds over the whole ensemble.

    Reads: with ``local_region`` (or ``local_host``) set, the writable bookies without failures
    are tried two local, then one remote, and so on.
    """

    def _plan(
        self,
        by_rack: Mapping[str, Sequence[BookieId]],
        ensemble_size: int,
        write_quorum: int,
        target: int,
        *,
        best_effort: bool,
    ) -> tuple[list[str] | None, int]:
        region_caps: dict[str, int] = {}
        for rack, bookies in by_rack.items():
            region_caps[region_of(rack)] = region_caps.get(region_of(rack), 0) + len(bookies)
        split = waterfill_split(region_caps, ensemble_size)
        assert split is not None  # the caller checked there are enough bookies
        base, eligible, rest = split
        # Every even split of shares is base + one more for `rest` of the eligible regions;
        # which ones matters for the racks rule (a region of one rack should not take the
        # extra), so try them (all of them when few, else a random sample).
        if math.comb(len(eligible), rest) <= _MAX_SHARE_SPLITS:
            splits = [list(c) for c in itertools.combinations(eligible, rest)]
            self.rng.shuffle(splits)
        else:
            splits = [self.rng.sample(eligible, rest) for _ in range(_MAX_SHARE_SPLITS)]
        for t in range(target, 0 if best_effort else target - 1, -1):
            for extra_regions in splits:
                shares = with_extra(base, extra_regions)
                counts = self._rack_counts(by_rack, shares)
                seq = arrange(
                    counts,
                    write_quorum,
                    t,
                    self.rng,
                    extra=functools.partial(_region_interleaved, counts, shares),
                    prefer=functools.partial(_prefer_spread, write_quorum),
                )
                if seq is not None:
                    return seq, t
        return None, target

    def _rack_counts(
        self, by_rack: Mapping[str, Sequence[BookieId]], shares: Mapping[str, int]
    ) -> dict[str, int]:
        """Each region's share spread evenly over its racks."""
        counts: dict[str, int] = {}
        for region, share in sorted(shares.items()):
            racks = {r: len(bs) for r, bs in by_rack.items() if region_of(r) == region}
            part = waterfill(racks, share, self.rng)
            assert part is not None  # shares never exceed what a region has
            counts.update(part)
        return counts

    def _replace_score(
        self,
        rack: str,
        locs: Sequence[str],
        idx: int,
        windows: Sequence[Sequence[int]],
        target: int,
    ) -> Score:
        rack_score = super()._replace_score(rack, locs, idx, windows, target)
        region = region_of(rack)
        regions = [len({region if j == idx else region_of(locs[j]) for j in w}) for w in windows]
        # The racks target first, then keeping the region's share, then region spread.
        return (
            rack_score[0],
            rack_score[1],
            int(region == region_of(locs[idx])),
            min(regions),
            sum(regions),
            *rack_score[2:],
        )

    def _order_healthy(self, ensemble: Sequence[BookieId], healthy: list[int]) -> list[int]:
        local_region = self.local_region
        if local_region is None:
            return healthy
        local = [
            i
            for i in healthy
            if region_of(self._location_for_ensemble(ensemble[i])) == local_region
        ]
        remote = [i for i in healthy if i not in local]
        out: list[int] = []
        while local or remote:
            out.extend(local[:LOCAL_READS_PER_REMOTE])
            del local[:LOCAL_READS_PER_REMOTE]
            if remote:
                out.append(remote.pop(0))
            if not local:
                out.extend(remote)
                remote.clear()
        return out


def _prefer_spread(write_quorum: int, seq: Sequence[str]) -> Score:
    """Region spread first, then rack spread; ties go to the order alternating regions most."""
    regions = [region_of(r) for r in seq]
    per_window = distinct_per_window(regions, write_quorum)
    racks = distinct_per_window(seq, write_quorum)
    adjacent = sum(distinct_per_window(regions, 2))
    return (min(per_window), sum(per_window), min(racks), sum(racks), adjacent)


def _region_interleaved(
    counts: Mapping[str, int], shares: Mapping[str, int]
) -> Iterator[list[str]]:
    """Candidate orders that first spread regions, then round-robin racks inside each region."""
    grouped_regions = [
        reg for reg in sorted(shares, key=lambda r: (-shares[r], r)) for _ in range(shares[reg])
    ]
    per_region: dict[str, list[str]] = {}
    for region in shares:
        racks = sorted((r for r in counts if region_of(r) == region), key=lambda r: (-counts[r], r))
        left = {r: counts[r] for r in racks}
        seq: list[str] = []
        while any(left.values()):
            for r in racks:
                if left[r]:
                    seq.append(r)
                    left[r] -= 1
        per_region[region] = seq
    n = len(grouped_regions)
    for stride in range(1, n + 1):
        regions = column_major(grouped_regions, stride)
        cursor = {reg: iter(per_region[reg]) for reg in per_region}
        yield [next(cursor[reg]) for reg in regions]
