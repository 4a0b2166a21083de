"""A custom ensemble placement policy: one copy per host.

Copy this file to start your own policy. It spreads an ensemble over as many hosts as it can
(useful when several bookies share a machine, as in `walkit sandbox`), choosing at random among
the least used hosts. Everything else (tracking the cluster, locations, the stabilize period,
read ordering) comes from BasePlacementPolicy.

Plug it in without forking walkit, by any of:

    walkit.Client.connect(url, placement="placement_policy:DistinctHostPolicy")  # on sys.path
    load_policy(DistinctHostPolicy)                                # the class (or an instance)

or register it in your package's pyproject.toml and use the name ("distinct-host"):

    [project.entry-points."walkit.placement_policies"]
    distinct-host = "mypkg.placement:DistinctHostPolicy"

Run this file to see it place a few ensembles.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence, Set

from walkit import BookieId
from walkit.placement import BasePlacementPolicy, PlacementResources


class DistinctHostPolicy(BasePlacementPolicy):
    """Ensembles with as few bookies per host as possible."""

    # This policy ignores racks: no resolver or location script is consulted.
    uses_locations = False

    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        exclude: Set[BookieId] = frozenset(),
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> list[BookieId]:
        exclude = self.check_new_ensemble_args(ensemble_size, write_quorum, ack_quorum, exclude)
        pool = self.candidates(exclude)  # writable, not excluded, sorted
        if len(pool) < ensemble_size:
            raise self.not_enough(ensemble_size, len(pool), "not enough writable bookies")
        chosen: list[BookieId] = []
        for _ in range(ensemble_size):
            chosen.append(self._pick(pool, chosen))
        return chosen

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
        index, exclude = self.check_replace_args(
            ensemble_size, write_quorum, ack_quorum, current_ensemble, bookie_to_replace, exclude
        )
        pool = self.candidates(exclude | set(current_ensemble))
        if not pool:
            raise self.not_enough(1, 0, f"no writable bookie can take {bookie_to_replace}'s place")
        others = [b for i, b in enumerate(current_ensemble) if i != index]
        return self._pick(pool, others)

    def _pick(self, pool: list[BookieId], taken: list[BookieId]) -> BookieId:
        """A random bookie, not yet taken, on a host with the fewest bookies taken."""
        used = {b.host: 0 for b in pool}
        for b in taken:
            used[b.host] = used.get(b.host, 0) + 1
        free = [b for b in pool if b not in taken]
        fewest = min(used[b.host] for b in free)
        # Always draw from self.rng: it is the injected, seedable generator.
        return self.rng.choice([b for b in free if used[b.host] == fewest])


def main() -> None:
    policy = DistinctHostPolicy()
    policy.initialize({}, PlacementResources(random=random.Random(1)))
    bookies = {BookieId(host, port) for host in ("10.0.0.1", "10.0.0.2") for port in (3181, 3182)}
    bookies.add(BookieId("10.0.0.3", 3181))
    policy.on_cluster_changed(bookies, set())
    for _ in range(3):
        ensemble = policy.new_ensemble(3, 2, 2)
        print("ensemble:", [str(b) for b in ensemble])
    print("replace", ensemble[0], "->", policy.replace_bookie(3, 2, 2, ensemble, ensemble[0]))


if __name__ == "__main__":
    main()
