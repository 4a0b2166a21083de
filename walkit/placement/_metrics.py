"""Placement metrics on an injected prometheus registry (or none)."""

from __future__ import annotations

from typing import Any

from walkit._logging import get_logger

log = get_logger(__name__)


class PlacementMetrics:
    """Counters and a gauge; every method is a no-op without a registry."""

    def __init__(self, registry: Any = None) -> None:
        self._registry = registry
        self._collectors: list[Any] = []
        self._placements: Any = None
        self._fallbacks: Any = None
        self._bookies: Any = None
        if registry is None:
            return
        # Only with a registry: prometheus_client is not a dependency of the client install.
        from prometheus_client import Counter, Gauge

        try:
            self._placements = Counter(
                "walkit_placement_decisions",
                "Placement decisions by operation and result",
                ["operation", "result"],
                registry=registry,
            )
            self._collectors.append(self._placements)
            self._fallbacks = Counter(
                "walkit_placement_location_fallbacks",
                "Bookies put in the default rack because no location source resolved them",
                registry=registry,
            )
            self._collectors.append(self._fallbacks)
            self._bookies = Gauge(
                "walkit_placement_bookies",
                "Bookies the placement policy knows, by state",
                ["state"],
                registry=registry,
            )
            self._collectors.append(self._bookies)
        except ValueError as exc:  # the registry already has them (a second policy on it)
            log.warning("placement.metrics_unavailable", error=str(exc))
            self.close()
            self._placements = self._fallbacks = self._bookies = None

    def decision(self, operation: str, result: str) -> None:
        if self._placements is not None:
            self._placements.labels(operation=operation, result=result).inc()

    def fallback(self, n: int = 1) -> None:
        if self._fallbacks is not None and n:
            self._fallbacks.inc(n)

    def bookies(self, writable: int, readonly: int, departing: int) -> None:
        if self._bookies is not None:
            self._bookies.labels(state="writable").set(writable)
            self._bookies.labels(state="readonly").set(readonly)
            self._bookies.labels(state="departing").set(departing)

    def close(self) -> None:
        """Unregister, so the registry can take another policy's metrics."""
        for collector in self._collectors:
            try:
                self._registry.unregister(collector)
            except KeyError:
                pass
        self._collectors.clear()
