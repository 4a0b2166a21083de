"""What every built-in policy shares: membership, the stabilized topology, location resolution
(from the sources in :mod:`._locations`) and read ordering. Subclasses decide ``new_ensemble``
and ``replace_bookie``."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from typing import Any, ClassVar

import anyio
import anyio.to_thread

from walkit._core.ledger_metadata import validate_quorums
from walkit._core.types import BookieId, BookieInfo
from walkit._logging import get_logger
from walkit.errors import (
    ClientClosedError,
    ConfigurationError,
    InvalidArgumentError,
    NotEnoughBookiesError,
)
from walkit.placement._config import PlacementConfig
from walkit.placement._locations import Locations, location_sources
from walkit.placement._metrics import PlacementMetrics
from walkit.placement._policy import EnsemblePlacementPolicy, PlacementResources
from walkit.placement._topology import NetworkTopology, region_of

log = get_logger(__name__)

#: Read-order classes, best first (BookKeeper's placement-policy guide).
WRITABLE, READ_ONLY, DEPARTING, GONE = 0, 1, 2, 3
_REMEMBERED_LOCATIONS = 10_000
_STATE_NAMES = {WRITABLE: "writable", READ_ONLY: "readonly", DEPARTING: "departing", GONE: "gone"}


def _infos(bookies: object, what: str) -> dict[BookieId, BookieInfo]:
    if isinstance(bookies, str | bytes) or not isinstance(bookies, Iterable):
        raise InvalidArgumentError(f"{what} bookies must be a set of BookieInfo or BookieId")
    out: dict[BookieId, BookieInfo] = {}
    for item in bookies:
        if isinstance(item, BookieInfo):
            if not isinstance(item.bookie_id, BookieId):
                raise InvalidArgumentError(
                    f"{what}: BookieInfo.bookie_id must be a BookieId: {item!r}"
                )
            out[item.bookie_id] = item
        elif isinstance(item, BookieId):
            out[item] = BookieInfo(item)
        else:
            raise InvalidArgumentError(
                f"{what} bookies must be BookieInfo or BookieId, got {type(item).__name__}: {item!r}"
            )
    return out


class BasePlacementPolicy(EnsemblePlacementPolicy):
    """A policy that tracks the cluster: subclass it to write your own placement.

    It keeps the writable and read-only bookies, their locations in a :class:`NetworkTopology`
    (resolved from the registered location, the resources' resolver, the ``locations`` /
    ``locations_file`` / ``location_script`` options, else the default rack), keeps departed
    bookies in the topology for ``stabilize_period`` seconds, and orders reads as BookKeeper's placement-policy guide
    says. It is thread-safe: ``on_cluster_changed`` resolves locations outside its lock.
    """

    #: False for policies that ignore locations: no resolver or script is consulted.
    uses_locations: ClassVar[bool] = True

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._closed = False
        self._writable: set[BookieId] = set()
        self._readonly: set[BookieId] = set()
        self._registered: dict[BookieId, str | None] = {}
        self._departing: dict[BookieId, float] = {}
        self._left: set[BookieId] = set()
        # Bookies on the default rack because no source resolved them: retried on each change.
        self._fallback: set[BookieId] = set()
        self._reresolve_all = False
        # Locations resolved ahead by prepare_cluster_change: bookie -> (registered, answer).
        self._prepared: dict[BookieId, tuple[str | None, tuple[str, bool]]] = {}
        self._topology = NetworkTopology()
        # Where bookies that left were, for ensembles that still hold them (bounded).
        self._last_location: dict[BookieId, str] = {}
        self._metrics = PlacementMetrics(None)
        self._local_region: str | None = None
        self.config = PlacementConfig()
        self._locations = Locations(
            [], self.config.default_rack, uses_locations=self.uses_locations, metrics=self._metrics
        )
        self._rng = random.Random()
        self._clock: Callable[[], float] = anyio.current_time

    # --- lifecycle -----------------------------------------------------------------------

    def initialize(
        self, config: Mapping[str, Any] | None = None, resources: PlacementResources | None = None
    ) -> None:
        """Read the options (see docs/placement.md) and take the resources."""
        cfg = PlacementConfig.from_mapping(config)
        res = PlacementResources() if resources is None else resources
        if not isinstance(res, PlacementResources):
            raise ConfigurationError(
                f"placement resources must be PlacementResources, not {type(res).__name__}"
            )
        if res.clock is not None and not callable(res.clock):
            raise ConfigurationError("PlacementResources.clock must be a zero-argument callable")
        if res.random is not None and not isinstance(res.random, random.Random):
            raise ConfigurationError("PlacementResources.random must be a random.Random")
        resolvers = location_sources(cfg, res.resolver, self.uses_locations)
        with self._lock:
            self._metrics.close()
            self.config = cfg
            # An explicit seed option is the more specific wish; else the client's generator.
            if cfg.random_seed is not None or res.random is None:
                self._rng = random.Random(cfg.random_seed)
            else:
                self._rng = res.random
            self._clock = res.clock if res.clock is not None else anyio.current_time
            self._metrics = PlacementMetrics(res.metrics_registry)
            self._locations = Locations(
                resolvers,
                cfg.default_rack,
                uses_locations=self.uses_locations,
                metrics=self._metrics,
            )
            self._reresolve_all = bool(self._topology)
            self._closed = False
        local = cfg.local_region
        if local is None and cfg.local_host is not None:
            loc = self._locations.resolve_hosts([cfg.local_host]).get(cfg.local_host)
            local = None if loc is None else region_of(loc)
        self._local_region = local

    def close(self) -> None:
        """Forget the cluster and drop resolver caches and metrics."""
        with self._lock:
            self._closed = True
            self._writable.clear()
            self._readonly.clear()
            self._registered.clear()
            self._departing.clear()
            self._left.clear()
            self._fallback.clear()
            self._prepared.clear()
            self._last_location.clear()
            self._topology = NetworkTopology()
            self._locations.reload()
            self._metrics.close()

    def reload_locations(self) -> None:
        """Drop cached locations; every bookie is resolved again at the next cluster change."""
        self._locations.reload()
        with self._lock:
            self._reresolve_all = True

    # --- what subclasses and callers may read ----------------------------------------------

    @property
    def topology(self) -> NetworkTopology:
        """The current topology (includes departed bookies inside their stabilize period).

        Treat it as read-only.
        """
        with self._lock:
            self._expire()
            return self._topology

    @property
    def rng(self) -> random.Random:
        """The injected random generator every random choice must come from."""
        return self._rng

    @property
    def local_region(self) -> str | None:
        """``/region`` of this client (``local_region`` or ``local_host`` option), if known."""
        return self._local_region

    def writable_bookies(self) -> frozenset[BookieId]:
        with self._lock:
            return frozenset(self._writable)

    def readonly_bookies(self) -> frozenset[BookieId]:
        with self._lock:
            return frozenset(self._readonly)

    def bookie_state(self, bookie: BookieId) -> str:
        """``"writable"``, ``"readonly"``, ``"departing"`` (left, still in the topology) or ``"gone"``."""
        with self._lock:
            self._expire()
            return _STATE_NAMES[self._state(bookie)]

    def location_of(self, bookie: BookieId) -> str:
        """The bookie's ``/region/rack``; the default rack for a bookie not in the topology."""
        with self._lock:
            return self._topology.location_of(bookie) or self.config.default_rack

    def candidates(self, exclude: Set[BookieId] = frozenset()) -> list[BookieId]:
        """Writable bookies not in ``exclude``, sorted (so a seeded generator repeats itself)."""
        with self._lock:
            self._check_open()
            return sorted(self._writable - set(exclude))

    def ensemble_candidates(
        self, ensemble_size: int, exclude: frozenset[BookieId]
    ) -> list[BookieId]:
        """:meth:`candidates` for a new ensemble; NotEnoughBookiesError if there are too few."""
        pool = self.candidates(exclude)
        if len(pool) < ensemble_size:
            self._metrics.decision("new_ensemble", "not_enough_bookies")
            raise self.not_enough(
                ensemble_size,
                len(pool),
                f"an ensemble of {ensemble_size} needs that many distinct writable bookies "
                f"({len(exclude & self._writable)} writable excluded)",
            )
        return pool

    # --- argument checks subclasses use -----------------------------------------------------

    def check_new_ensemble_args(
        self, ensemble_size: int, write_quorum: int, ack_quorum: int, exclude: Set[BookieId]
    ) -> frozenset[BookieId]:
        validate_quorums(ensemble_size, write_quorum, ack_quorum)
        return _check_exclude(exclude)

    def check_replace_args(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        current_ensemble: Sequence[BookieId],
        bookie_to_replace: BookieId,
        exclude: Set[BookieId],
    ) -> tuple[int, frozenset[BookieId]]:
        """Check the arguments; return (index of ``bookie_to_replace``, exclude set)."""
        validate_quorums(ensemble_size, write_quorum, ack_quorum)
        ex = _check_exclude(exclude)
        ensemble = list(current_ensemble)
        if not all(isinstance(b, BookieId) for b in ensemble):
            raise InvalidArgumentError("current_ensemble must hold BookieIds")
        if len(ensemble) != ensemble_size:
            raise InvalidArgumentError(
                f"current_ensemble has {len(ensemble)} bookies, ensemble_size is {ensemble_size}"
            )
        if len(set(ensemble)) != len(ensemble):
            raise InvalidArgumentError(
                f"current_ensemble has duplicates: {[str(b) for b in ensemble]}"
            )
        if bookie_to_replace not in ensemble:
            raise InvalidArgumentError(
                f"bookie to replace {bookie_to_replace} is not in the ensemble"
            )
        return ensemble.index(bookie_to_replace), ex

    def not_enough(self, needed: int, available: int, why: str) -> NotEnoughBookiesError:
        """A NotEnoughBookiesError saying what was needed, what there was, and why."""
        with self._lock:
            detail = (
                f"{len(self._writable)} writable, {len(self._readonly)} read-only, "
                f"{len(self._departing)} recently departed"
            )
        return NotEnoughBookiesError(
            f"need {needed} bookie(s), {available} available: {why} (cluster: {detail})"
        )

    # --- membership -------------------------------------------------------------------------

    @property
    def resolution_may_block(self) -> bool:
        """True when resolving a location may block (a location script is configured, or a
        resolver says ``blocking = True``): async callers should use
        :func:`apply_cluster_change`, which resolves in a worker thread."""
        return self._locations.may_block

    def prepare_cluster_change(
        self, writable: Set[BookieInfo] | Set[BookieId], readonly: Set[BookieInfo] | Set[BookieId]
    ) -> None:
        """Resolve the locations the next ``on_cluster_changed`` with these lists will need.

        Safe to call from a worker thread (it reads no clock and changes no membership).
        """
        _, _, registered = _split(writable, readonly)
        with self._lock:
            self._check_open()
            todo = self._needs_resolution(registered)
        resolved = self._locations.resolve(todo, registered)
        with self._lock:
            self._prepared.update({b: (registered[b], found) for b, found in resolved.items()})

    def _needs_resolution(self, registered: Mapping[BookieId, str | None]) -> list[BookieId]:
        return [
            b
            for b, loc in registered.items()
            if self._reresolve_all
            or b not in self._topology
            or b in self._fallback
            or loc != self._registered.get(b)
        ]

    def on_cluster_changed(
        self, writable: Set[BookieInfo] | Set[BookieId], readonly: Set[BookieInfo] | Set[BookieId]
    ) -> set[BookieId]:
        w, r, registered = _split(writable, readonly)
        with self._lock:
            self._check_open()
            todo = self._needs_resolution(registered)
            self._reresolve_all = False
            prepared, self._prepared = self._prepared, {}
        resolved: dict[BookieId, tuple[str, bool]] = {}
        for b in todo:
            hit = prepared.get(b)
            if hit is not None and hit[0] == registered[b]:
                resolved[b] = hit[1]
        # Resolution may run a script: do it without holding the lock.
        locations = self._locations
        resolved.update(locations.resolve([b for b in todo if b not in resolved], registered))
        with self._lock:
            period = self.config.stabilize_period
            for b, (loc, fell_back) in resolved.items():
                self._topology.add(b, loc)
                if fell_back and locations.resolvers:
                    self._fallback.add(b)
                else:
                    self._fallback.discard(b)
            previous = self._writable | self._readonly
            current = set(registered)
            joined = current - previous
            self._writable, self._readonly = set(w), set(r)
            self._registered = registered
            for b in current:
                self._departing.pop(b, None)
            departed = previous - current
            # The clock is read only when time matters (a policy without one still works).
            now = self._now() if period > 0 and (departed or self._departing) else None
            for b in departed:
                if now is not None:
                    self._departing.setdefault(b, now + period)
                else:
                    self._forget(b)
                    self._left.add(b)
            self._expire(now)
            left, self._left = self._left, set()
            self._metrics.bookies(len(self._writable), len(self._readonly), len(self._departing))
        if joined or left:
            log.info(
                "placement.cluster_changed",
                joined=sorted(str(b) for b in joined),
                left=sorted(str(b) for b in left),
                writable=len(w),
                readonly=len(r),
            )
        return left

    def _now(self) -> float:
        try:
            return float(self._clock())
        except RuntimeError as exc:
            raise ConfigurationError(
                "stabilize_period needs a clock: pass PlacementResources(clock=...) "
                f"or call the policy inside a trio or asyncio event loop ({exc})"
            ) from None

    def _expire(self, now: float | None = None) -> None:
        """Move departed bookies whose period ran out out of the topology (lock held)."""
        if not self._departing:
            return
        if now is None:
            now = self._now()
        for b, deadline in list(self._departing.items()):
            if deadline <= now:
                del self._departing[b]
                self._forget(b)
                self._left.add(b)

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the placement policy is closed")

    def _state(self, bookie: BookieId) -> int:
        if bookie in self._writable:
            return WRITABLE
        if bookie in self._readonly:
            return READ_ONLY
        if bookie in self._topology:
            return DEPARTING
        return GONE

    # --- locations --------------------------------------------------------------------------

    def _forget(self, bookie: BookieId) -> None:
        """Take a bookie out of the topology, remembering where it was (lock held)."""
        loc = self._topology.remove(bookie)
        self._fallback.discard(bookie)
        if loc is not None:
            self._last_location.pop(bookie, None)
            self._last_location[bookie] = loc
            while len(self._last_location) > _REMEMBERED_LOCATIONS:
                del self._last_location[next(iter(self._last_location))]

    def _location_for_ensemble(self, bookie: BookieId) -> str:
        """Location of an ensemble member, even one that left the topology (lock held).

        Never resolves (which could block): a bookie never seen counts as the default rack.
        """
        loc = self._topology.location_of(bookie) or self._last_location.get(bookie)
        return self.config.default_rack if loc is None else loc

    # --- read ordering ----------------------------------------------------------------------

    def reorder_read_sequence(
        self,
        ensemble: Sequence[BookieId],
        write_set: Sequence[int],
        failure_history: Mapping[BookieId, float],
    ) -> list[int]:
        """Writable bookies without failures, then writable with failures (oldest failure
        first), then read-only, then departed but still in the topology, then gone."""
        idxs = _check_write_set(ensemble, write_set)
        if not self.config.reorder_reads:
            return idxs
        keyed: list[tuple[tuple[int, bool, float, int], int]] = []
        with self._lock:
            self._expire()
            for pos, i in enumerate(idxs):
                b = ensemble[i]
                failed = failure_history.get(b)
                if failed is not None:
                    try:
                        failed = float(failed)
                    except (TypeError, ValueError):
                        raise InvalidArgumentError(
                            f"failure_history[{b}] must be a time in seconds, got {failed!r}"
                        ) from None
                keyed.append(((self._state(b), failed is not None, failed or 0.0, pos), i))
            keyed.sort()
            healthy = [i for key, i in keyed if key[0] == WRITABLE and not key[1]]
            rest = [i for key, i in keyed if not (key[0] == WRITABLE and not key[1])]
            return self._order_healthy(ensemble, healthy) + rest

    def _order_healthy(self, ensemble: Sequence[BookieId], healthy: list[int]) -> list[int]:
        """Hook: reorder the writable bookies without failures (lock held)."""
        return healthy


def _split(
    writable: object, readonly: object
) -> tuple[dict[BookieId, BookieInfo], dict[BookieId, BookieInfo], dict[BookieId, str | None]]:
    """Check both lists; read-only wins for a bookie in both or flagged read-only."""
    w = _infos(writable, "writable")
    r = _infos(readonly, "readonly")
    for b, info in list(w.items()):
        if info.read_only and b not in r:
            r[b] = info
    for b in r:
        w.pop(b, None)
    registered = {b: i.network_location for b, i in (w | r).items()}
    return w, r, registered


async def apply_cluster_change(
    policy: EnsemblePlacementPolicy,
    writable: Set[BookieInfo] | Set[BookieId],
    readonly: Set[BookieInfo] | Set[BookieId],
) -> set[BookieId]:
    """``policy.on_cluster_changed`` for async callers (trio or asyncio).

    When the policy's location resolution may block (a location script), the new bookies'
    locations are resolved in a worker thread first, so the event loop never waits on the
    script; the membership change itself runs on the event loop's thread (it reads the loop's
    clock).
    """
    if isinstance(policy, BasePlacementPolicy) and policy.resolution_may_block:
        await anyio.to_thread.run_sync(policy.prepare_cluster_change, writable, readonly)
    return policy.on_cluster_changed(writable, readonly)


def _check_exclude(exclude: object) -> frozenset[BookieId]:
    if exclude is None:
        return frozenset()
    if isinstance(exclude, str | bytes) or not isinstance(exclude, Iterable):
        raise InvalidArgumentError("exclude must be a set of BookieIds")
    ex = frozenset(exclude)
    if not all(isinstance(b, BookieId) for b in ex):
        raise InvalidArgumentError("exclude must hold BookieIds")
    return frozenset(b for b in ex if isinstance(b, BookieId))


def _check_write_set(ensemble: Sequence[BookieId], write_set: Sequence[int]) -> list[int]:
    idxs = list(write_set)
    n = len(ensemble)
    for i in idxs:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < n:
            raise InvalidArgumentError(
                f"write set index {i!r} is not an index of a {n}-bookie ensemble"
            )
    if len(set(idxs)) != len(idxs):
        raise InvalidArgumentError(f"write set has duplicate indexes: {idxs}")
    return idxs
