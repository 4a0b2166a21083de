"""The default policy: distinct writable bookies, chosen at random."""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set

from walkit._core.types import BookieId
from walkit.placement._base import BasePlacementPolicy


class DefaultEnsemblePlacementPolicy(BasePlacementPolicy):
    """Random distinct writable bookies; locations are not consulted.

    Randomness comes from the injected generator (``PlacementResources.random`` or the
    ``random_seed`` option), so a seeded client places the same way every run.
    """

    uses_locations = False

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
            self._metrics.decision("new_ensemble", "ok")
            return self.rng.sample(pool, ensemble_size)

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
        _, ex = self.check_replace_args(
            ensemble_size, write_quorum, ack_quorum, current_ensemble, bookie_to_replace, exclude
        )
        with self._lock:
            pool = self.candidates(ex | set(current_ensemble))
            if not pool:
                self._metrics.decision("replace_bookie", "not_enough_bookies")
                raise self.not_enough(
                    1,
                    0,
                    f"replacing {bookie_to_replace} needs a writable bookie outside the ensemble "
                    "and the exclusions",
                )
            self._metrics.decision("replace_bookie", "ok")
            return self.rng.choice(pool)
