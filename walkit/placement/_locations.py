"""Where a bookie is, for a policy: its registered location, else each location source in turn,
else the default rack (BookKeeper's placement-policy guide).

The sources, in order: the resolver the client hands the policy, then the ``locations``,
``locations_file`` and ``location_script`` options. A policy that ignores locations
(``uses_locations = False``) consults none and puts every bookie on the default rack.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

from walkit._core.types import BookieId
from walkit._logging import get_logger
from walkit.errors import ConfigurationError, InvalidArgumentError
from walkit.placement._config import PlacementConfig
from walkit.placement._metrics import PlacementMetrics
from walkit.placement._resolvers import (
    LocationResolver,
    ScriptLocationResolver,
    StaticLocationResolver,
    reload_resolvers,
    resolve_with,
)
from walkit.placement._topology import normalize_location

#: The policy's events keep the policy module's logger name, which applications filter on.
log = get_logger("walkit.placement._base")

__all__ = ["Locations", "location_sources"]


def location_sources(cfg: PlacementConfig, resolver: Any, uses_locations: bool) -> list[Any]:
    """The location sources in the order they are asked (see the module docs); ``resolver``
    is ``PlacementResources.resolver``. ConfigurationError for a bad one."""
    sources: list[Any] = []
    if resolver is not None:
        if not (isinstance(resolver, LocationResolver) or callable(resolver)):
            raise ConfigurationError(
                "PlacementResources.resolver must have .resolve(names) or be callable"
            )
        sources.append(resolver)
    if uses_locations:
        if cfg.locations:
            sources.append(StaticLocationResolver(cfg.locations))
        if cfg.locations_file:
            sources.append(StaticLocationResolver.from_file(cfg.locations_file))
        if cfg.location_script:
            sources.append(
                ScriptLocationResolver(
                    cfg.location_script,
                    timeout=cfg.location_script_timeout,
                    max_args=cfg.location_script_max_args,
                )
            )
    return sources


@final
class Locations:
    """Resolves bookies' locations from one policy's sources (see the module docs). It holds
    no lock: the policy calls it outside its own, since a script may take a while."""

    __slots__ = ("_metrics", "_uses_locations", "default_rack", "resolvers")

    def __init__(
        self,
        resolvers: list[Any],
        default_rack: str,
        *,
        uses_locations: bool,
        metrics: PlacementMetrics,
    ) -> None:
        self.resolvers = resolvers
        self.default_rack = default_rack
        self._uses_locations = uses_locations
        self._metrics = metrics

    @property
    def may_block(self) -> bool:
        """Whether resolving may block: a location script, or a resolver that says
        ``blocking = True``."""
        return any(
            isinstance(r, ScriptLocationResolver) or getattr(r, "blocking", False)
            for r in self.resolvers
        )

    def reload(self) -> None:
        """Drop the sources' cached answers."""
        reload_resolvers(self.resolvers)

    def resolve(
        self, bookies: list[BookieId], registered: Mapping[BookieId, str | None]
    ) -> dict[BookieId, tuple[str, bool]]:
        """bookie -> (location, fell back to the default rack)."""
        default = self.default_rack
        if not self._uses_locations:
            return {b: (default, False) for b in bookies}
        out: dict[BookieId, tuple[str, bool]] = {}
        pending: list[BookieId] = []
        for b in bookies:
            reg = registered.get(b)
            if reg is not None:
                try:
                    out[b] = (normalize_location(reg), False)
                    continue
                except InvalidArgumentError as exc:
                    log.warning("placement.bad_registered_location", bookie=str(b), error=str(exc))
            pending.append(b)
        if pending:
            found = self.resolve_hosts(sorted({b.host for b in pending}))
            for b in pending:
                loc = found.get(b.host)
                if loc is None:
                    out[b] = (default, True)
                    log.info("placement.location_default", bookie=str(b), location=default)
                else:
                    out[b] = (loc, False)
            self._metrics.fallback(sum(1 for b in pending if found.get(b.host) is None))
        return out

    def resolve_hosts(self, hosts: list[str]) -> dict[str, str]:
        """host -> location, for the hosts some source knows."""
        found: dict[str, str] = {}
        for resolver in list(self.resolvers):
            rest = [h for h in hosts if h not in found]
            if not rest:
                break
            for host, loc in zip(rest, resolve_with(resolver, rest), strict=True):
                if loc is not None:
                    found[host] = loc
        return found
