"""Autorecovery metrics on an injected prometheus registry (or none)."""

from __future__ import annotations

import warnings
from typing import Any, final

from walkit._logging import get_logger

log = get_logger(__name__)

__all__ = ["AutorecoveryMetrics"]


@final
class AutorecoveryMetrics:
    """Under-replicated ledgers, entries and bytes copied, time to rereplicate; no-ops without a
    registry."""

    def __init__(self, registry: Any = None) -> None:
        self._underreplicated: Any = None
        self._entries: Any = None
        self._bytes: Any = None
        self._local: Any = None
        self._by_replacement: Any = None
        self._seconds: Any = None
        self._outcomes: Any = None
        #: Kept here too, for tests and status output.
        self.entries_copied = 0
        self.bytes_copied = 0
        self.entries_copied_locally = 0
        self.entries_copied_by_replacements = 0
        self.ledgers_rereplicated = 0
        if registry is None:
            return
        # Only with a registry: prometheus_client is not a dependency of the client install.
        from prometheus_client import Counter, Gauge, Histogram

        try:
            self._underreplicated = Gauge(
                "walkit_autorecovery_underreplicated_ledgers",
                "Ledgers marked under-replicated (as this bookie last counted them: on each "
                "pass of its worker, and after each check if it is the auditor)",
                registry=registry,
            )
            self._entries = Counter(
                "walkit_autorecovery_entries_copied",
                "Entries copied to replacement bookies",
                registry=registry,
            )
            self._bytes = Counter(
                "walkit_autorecovery_bytes_copied",
                "Bytes of entries copied to replacement bookies",
                registry=registry,
            )
            self._local = Counter(
                "walkit_autorecovery_entries_copied_locally",
                "Entries copied to the bookie this worker runs in (no network hop; also "
                "counted in walkit_autorecovery_entries_copied)",
                registry=registry,
            )
            self._by_replacement = Counter(
                "walkit_autorecovery_entries_copied_by_replacements",
                "Entries replacement bookies copied from the replicas themselves, asked by "
                "this process (COPY_FRAGMENT: the bytes did not pass through it; also counted "
                "in walkit_autorecovery_entries_copied)",
                registry=registry,
            )
            self._seconds = Histogram(
                "walkit_autorecovery_heal_seconds",
                "Time to rereplicate a marked ledger: from a worker taking it to its marker "
                "being dropped",
                buckets=(0.01, 0.1, 0.5, 1, 5, 10, 30, 60, 300, 1800),
                registry=registry,
            )
            self._outcomes = Counter(
                "walkit_autorecovery_ledgers",
                "Marked ledgers a worker handled, by outcome",
                ["outcome"],
                registry=registry,
            )
        except ValueError as exc:  # already registered (a second worker on one registry)
            log.warning("autorecovery_metrics_unavailable", error=str(exc))
            self._underreplicated = self._entries = self._bytes = self._local = None
            self._by_replacement = None
            self._seconds = self._outcomes = None

    @property
    def ledgers_healed(self) -> int:
        """Deprecated: :attr:`ledgers_rereplicated` (goes in the next release)."""
        warnings.warn(
            "AutorecoveryMetrics.ledgers_healed is deprecated: use .ledgers_rereplicated",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.ledgers_rereplicated

    def underreplicated(self, count: int) -> None:
        if self._underreplicated is not None:
            self._underreplicated.set(count)

    def copied(
        self, entries: int, size: int, *, local: bool = False, by_replacement: bool = False
    ) -> None:
        self.entries_copied += entries
        self.bytes_copied += size
        if local:
            self.entries_copied_locally += entries
        if by_replacement:
            self.entries_copied_by_replacements += entries
        if self._entries is not None:
            self._entries.inc(entries)
            self._bytes.inc(size)
            if local:
                self._local.inc(entries)
            if by_replacement:
                self._by_replacement.inc(entries)

    def rereplicated(self, seconds: float) -> None:
        self.ledgers_rereplicated += 1
        if self._seconds is not None:
            self._seconds.observe(seconds)

    def outcome(self, name: str) -> None:
        if self._outcomes is not None:
            self._outcomes.labels(outcome=name).inc()
