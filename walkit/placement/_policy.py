"""The ensemble placement policy interface (BookKeeper's placement-policy guide), in Python form.
(``BookieInfo`` lives in :mod:`walkit._core.types`: the metadata layer makes them too.)"""

from __future__ import annotations

import abc
import random as _random
from collections.abc import Mapping, Sequence, Set
from typing import Any

import attrs

from walkit._core.types import BookieId, BookieInfo


@attrs.frozen
class PlacementResources:
    """What the client hands a policy at initialize: a location resolver, a clock, metrics,
    and a random generator."""

    #: A LocationResolver (``.resolve(names)``) or a plain synchronous callable: list of host
    #: names -> list of locations (``None`` if unknown). Tried after a bookie's registered
    #: location and before the resolvers the configuration names.
    resolver: Any = None
    #: A zero-argument callable giving the current time in seconds (the event loop's clock in
    #: the client: trio's, a MockClock in simulations, or asyncio's). Never the wall clock.
    #: None means ``anyio.current_time`` (the running loop's clock).
    clock: Any = None
    #: A prometheus CollectorRegistry, or None for no metrics.
    metrics_registry: Any = None
    #: The random generator placement draws from (the ``random_seed`` option, when set,
    #: wins); None with no seed option means a generator seeded from the OS.
    random: _random.Random | None = None


class EnsemblePlacementPolicy(abc.ABC):
    """Decides where a ledger's copies go and in what order to read them.

    A policy is synchronous and pure with respect to I/O: the client calls it with what it
    knows and acts on the answer.
    """

    def initialize(self, config: Mapping[str, Any], resources: PlacementResources) -> None:
        """Called once with the client's configuration and resources."""

    def close(self) -> None:
        """Release anything initialize took."""

    @abc.abstractmethod
    def on_cluster_changed(
        self, writable: Set[BookieInfo] | Set[BookieId], readonly: Set[BookieInfo] | Set[BookieId]
    ) -> set[BookieId]:
        """The bookie lists changed (both lists are complete); return the bookies that left.

        A bookie in neither list has left the cluster; the built-in policies keep it in the
        topology for ``stabilize_period`` seconds and report it once it is out of the topology.
        """

    @abc.abstractmethod
    def new_ensemble(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        exclude: Set[BookieId] = frozenset(),
        custom_metadata: Mapping[str, bytes] | None = None,
    ) -> list[BookieId]:
        """Pick ``ensemble_size`` distinct writable bookies; NotEnoughBookiesError if impossible."""

    @abc.abstractmethod
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
        """Pick a bookie to take ``bookie_to_replace``'s place; NotEnoughBookiesError if none."""

    @abc.abstractmethod
    def reorder_read_sequence(
        self,
        ensemble: Sequence[BookieId],
        write_set: Sequence[int],
        failure_history: Mapping[BookieId, float],
    ) -> list[int]:
        """Order the write set (indexes into ``ensemble``) in which to try reads.

        ``failure_history`` maps bookies to the clock time of their last failure.
        """

    def reorder_read_lac_sequence(
        self,
        ensemble: Sequence[BookieId],
        write_set: Sequence[int],
        failure_history: Mapping[BookieId, float],
    ) -> list[int]:
        """Order for LAC reads; by default the same as for entry reads."""
        return self.reorder_read_sequence(ensemble, write_set, failure_history)
