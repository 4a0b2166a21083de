"""Rack-aware placement: every write quorum spans several racks when the topology allows."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from walkit._core.types import BookieId
from walkit._logging import get_logger
from walkit.placement._arrange import (
    Score,
    arrange,
    arrange_best_effort,
    waterfill,
    write_windows,
)
from walkit.placement._base import BasePlacementPolicy

log = get_logger(__name__)


class RackawareEnsemblePlacementPolicy(BasePlacementPolicy):
    """Spreads each ensemble over racks so that every write quorum spans at least
    ``min_racks_per_write_quorum`` racks (default 2, never more than Qw).

    Entry e goes to ensemble indexes ``e % E .. e % E + Qw - 1`` taken cyclically, so each of
    those E windows is a write quorum. Bookies are taken from racks as evenly as possible and
    ordered so that every window meets the target. When no ensemble can meet it, the policy
    places the best it can (``enforce_min_racks=False``, the default) or raises
    NotEnoughBookiesError (``enforce_min_racks=True``).
    """

    # --- new ensembles ------------------------------------------------------------------

    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        exclude: Set[BookieId] = frozenset(),
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> list[BookieId]:
        ex = self.check_new_ensemble_args(ensemble_size, write_quorum, ack_quorum, exclude)
        with self._lock:
            pool = self.ensemble_candidates(ensemble_size, ex)
            by_rack = self._group(pool)
            target = self.rack_target(write_quorum)
            enforce = self.config.enforce_min_racks
            plan, met = self._plan(
                by_rack, ensemble_size, write_quorum, target, best_effort=not enforce
            )
            if plan is None:
                self._metrics.decision("new_ensemble", "not_enough_bookies")
                raise self.not_enough(
                    ensemble_size,
                    len(pool),
                    f"no ensemble of {ensemble_size} from these bookies gives every write quorum of "
                    f"{write_quorum} at least {target} racks ({self._describe(by_rack)}), and "
                    "enforce_min_racks is set",
                )
            if met < target:
                self._metrics.decision("new_ensemble", "best_effort")
                log.warning(
                    "placement.rack_target_missed",
                    ensemble_size=ensemble_size,
                    write_quorum=write_quorum,
                    target=target,
                    achieved=met,
                    racks=self._describe(by_rack),
                )
            else:
                self._metrics.decision("new_ensemble", "ok")
            return self._fill(plan, by_rack)

    def rack_target(self, write_quorum: int) -> int:
        """Racks each write quorum should span: the option, capped at Qw."""
        return min(self.config.min_racks_per_write_quorum, write_quorum)

    def _group(self, bookies: Sequence[BookieId]) -> dict[str, list[BookieId]]:
        by_rack: dict[str, list[BookieId]] = {}
        for b in bookies:
            by_rack.setdefault(self._location_for_ensemble(b), []).append(b)
        return by_rack

    @staticmethod
    def _describe(by_rack: Mapping[str, Sequence[BookieId]]) -> str:
        return "writable bookies per rack: " + ", ".join(
            f"{rack}={len(bs)}" for rack, bs in sorted(by_rack.items())
        )

    def _plan(
        self,
        by_rack: Mapping[str, Sequence[BookieId]],
        ensemble_size: int,
        write_quorum: int,
        target: int,
        *,
        best_effort: bool,
    ) -> tuple[list[str] | None, int]:
        """Racks in ensemble order, and the racks-per-quorum it meets (None: target missed)."""
        counts = waterfill({r: len(bs) for r, bs in by_rack.items()}, ensemble_size, self.rng)
        assert counts is not None  # the caller checked there are enough bookies
        if best_effort:
            return arrange_best_effort(counts, write_quorum, target, self.rng)
        return arrange(counts, write_quorum, target, self.rng), target

    def _fill(
        self, plan: Sequence[str], by_rack: Mapping[str, Sequence[BookieId]]
    ) -> list[BookieId]:
        need: dict[str, int] = {}
        for rack in plan:
            need[rack] = need.get(rack, 0) + 1
        picked = {
            rack: self.rng.sample(sorted(by_rack[rack]), n) for rack, n in sorted(need.items())
        }
        return [picked[rack].pop() for rack in plan]

    # --- replacement --------------------------------------------------------------------

    def replace_bookie(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        current_ensemble: Sequence[BookieId],
        bookie_to_replace: BookieId,
        exclude: Set[BookieId] = frozenset(),
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> BookieId:
        """A bookie for ``bookie_to_replace``'s index that keeps every write quorum through that
        index on its racks target; among those, one from the replaced bookie's rack if any."""
        idx, ex = self.check_replace_args(
            ensemble_size, write_quorum, ack_quorum, current_ensemble, bookie_to_replace, exclude
        )
        ensemble = list(current_ensemble)
        with self._lock:
            pool = self.candidates(ex | set(ensemble))
            if not pool:
                self._metrics.decision("replace_bookie", "not_enough_bookies")
                raise self.not_enough(
                    1,
                    0,
                    f"replacing {bookie_to_replace} needs a writable bookie outside the ensemble "
                    "and the exclusions",
                )
            locs = [self._location_for_ensemble(b) for b in ensemble]
            windows = [w for w in write_windows(ensemble_size, write_quorum) if idx in w]
            target = self.rack_target(write_quorum)
            by_rack = self._group(pool)
            scores = {
                rack: self._replace_score(rack, locs, idx, windows, target) for rack in by_rack
            }
            best = max(scores.values())
            if best[0] < target:
                if self.config.enforce_min_racks:
                    self._metrics.decision("replace_bookie", "not_enough_bookies")
                    raise self.not_enough(
                        1,
                        len(pool),
                        f"no bookie in place of {bookie_to_replace} (index {idx}) gives every write "
                        f"quorum through it {target} racks ({self._describe(by_rack)}), and "
                        "enforce_min_racks is set",
                    )
                self._metrics.decision("replace_bookie", "best_effort")
                log.warning(
                    "placement.rack_target_missed",
                    replacing=str(bookie_to_replace),
                    index=idx,
                    target=target,
                    achieved=best[0],
                )
            else:
                self._metrics.decision("replace_bookie", "ok")
            choices = sorted(b for rack, bs in by_rack.items() if scores[rack] == best for b in bs)
            return self.rng.choice(choices)

    def _replace_score(
        self,
        rack: str,
        locs: Sequence[str],
        idx: int,
        windows: Sequence[Sequence[int]],
        target: int,
    ) -> Score:
        """Higher is better; the first element is the racks target met (capped at target)."""
        distinct = [len({rack if j == idx else locs[j] for j in w}) for w in windows]
        return (
            min(min(distinct), target),
            sum(min(d, target) for d in distinct),
            int(rack == locs[idx]),
            sum(distinct),
        )
