"""The client's metrics, on an injected prometheus registry (``Client.connect(url,
metrics_registry=registry)``); a client without one keeps none and pays nothing.

The hot paths only add to plain numbers: an append finds its bucket and adds to three sums
(no lock, no prometheus call); a reader or consumer is registered once, weakly. The registry
reads it all when it is scraped, through :class:`ClientMetrics`, a collector of ours: that is
where the histogram and counters are built and the lags are computed from the live readers
and consumers. Clients that share a registry share one collector (their figures add up).
"""

from __future__ import annotations

import bisect
import weakref
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final, Protocol, final

from walkit.errors import ConfigurationError

if TYPE_CHECKING:
    # Imported where the families are built: a client is given a registry only when
    # prometheus_client is installed (it is not a dependency of the client install).
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
        Metric,
    )

__all__ = ["APPEND_BUCKETS", "AppendStats", "ClientMetrics", "client_metrics"]

#: Upper bounds (seconds) of the append-latency buckets: a quorum of journal syncs on fast
#: disks lands in the first ones; the alert rules of docs/operations look at 0.5 s.
APPEND_BUCKETS: Final = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


class _Reader(Protocol):
    def lag_records(self) -> int: ...


class _Consumer(Protocol):
    @property
    def commit_lag(self) -> int: ...

    def reader_lag(self) -> int: ...


@final
class AppendStats:
    """One log's appends in this process: latencies (per bucket), records and payload bytes."""

    __slots__ = ("buckets", "bytes", "records", "seconds")

    def __init__(self) -> None:
        self.buckets = [0] * (len(APPEND_BUCKETS) + 1)
        self.seconds = 0.0
        self.records = 0
        self.bytes = 0

    def observe(self, seconds: float, records: int, size: int) -> None:
        """``records`` appended with ``size`` payload bytes in all, each acknowledged
        ``seconds`` after its call."""
        self.buckets[bisect.bisect_left(APPEND_BUCKETS, seconds)] += records
        self.seconds += seconds * records
        self.records += records
        self.bytes += size


@final
class LakeStats:
    """One log's offloads to its lake and reads from it, in this process."""

    __slots__ = ("bytes", "failures", "files", "lag_seconds", "ledgers", "reads")

    def __init__(self) -> None:
        self.bytes = 0
        self.files = 0
        self.ledgers = 0
        self.failures = 0
        #: Seconds since the oldest closed ledger not yet offloaded closed (at the last pass).
        self.lag_seconds = 0.0
        #: Row-group reads: latency buckets, count and bytes.
        self.reads = AppendStats()

    def offloaded(self, size: int, files: int) -> None:
        self.bytes += size
        self.files += files
        self.ledgers += 1


@final
class ClientMetrics:
    """Every metric of the clients that share one registry (a prometheus collector)."""

    def __init__(self) -> None:
        self._appends: dict[str, AppendStats] = {}
        #: Appends through the ledger API (ledger writers used directly: applications,
        #: snapshots, staged ledgers), per entry; a log's are in its own ``appends``.
        self.ledger_appends = AppendStats()
        self.ensemble_changes = 0
        self.recoveries = 0
        self._readers: dict[str, weakref.WeakSet[Any]] = {}
        self._consumers: dict[tuple[str, str], weakref.WeakSet[Any]] = {}
        self._behind: Counter[tuple[str, str]] = Counter()
        self._released: Counter[tuple[str, str]] = Counter()
        self._lake: dict[str, LakeStats] = {}

    # --- what the client reports -------------------------------------------------------------

    def appends(self, log: str) -> AppendStats:
        """The append figures of ``log`` (a writer keeps the object)."""
        stats = self._appends.get(log)
        if stats is None:
            stats = self._appends[log] = AppendStats()
        return stats

    def lake(self, log: str) -> LakeStats:
        """The lake figures of ``log`` (offloads, failures, lag, reads)."""
        stats = self._lake.get(log)
        if stats is None:
            stats = self._lake[log] = LakeStats()
        return stats

    def track_reader(self, log: str, reader: _Reader) -> None:
        """Report ``reader``'s lag while it lives."""
        self._readers.setdefault(log, weakref.WeakSet()).add(reader)

    def track_consumer(self, log: str, name: str, consumer: _Consumer) -> None:
        """Report ``consumer``'s lags while it lives."""
        self._consumers.setdefault((log, name), weakref.WeakSet()).add(consumer)

    def consumer_behind(self, log: str, name: str) -> None:
        """A read of consumer ``name`` found records it had not committed deleted."""
        self._behind[(log, name)] += 1

    def consumer_released(self, log: str, name: str) -> None:
        """Retention deleted records consumer ``name`` had not committed (over its quota)."""
        self._released[(log, name)] += 1

    # --- the collector -----------------------------------------------------------------------

    def describe(self) -> list[Metric]:
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        yield from self._families(with_samples=True)

    def _families(self, *, with_samples: bool = False) -> Iterator[Metric]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        latency = HistogramMetricFamily(
            "walkit_log_append_seconds",
            "Seconds from a log append's call to its acknowledgement (a quorum of bookies "
            "durable), per record",
            labels=["log"],
        )
        records = CounterMetricFamily(
            "walkit_log_appended_records", "Records appended and acknowledged", labels=["log"]
        )
        size = CounterMetricFamily(
            "walkit_log_appended_bytes",
            "Payload bytes of the records appended and acknowledged",
            labels=["log"],
        )
        ledger_latency = HistogramMetricFamily(
            "walkit_ledger_append_seconds",
            "Seconds from a ledger append's call to its acknowledgement, per entry, for ledger "
            "writers used directly (a log's appends are in walkit_log_append_seconds)",
        )
        ledger_entries = CounterMetricFamily(
            "walkit_ledger_appended_entries",
            "Entries appended and acknowledged through ledger writers used directly",
        )
        ledger_bytes = CounterMetricFamily(
            "walkit_ledger_appended_bytes",
            "Payload bytes of those entries",
        )
        changes = CounterMetricFamily(
            "walkit_ledger_ensemble_changes",
            "Ensemble changes of this client's ledger writers (a bookie replaced after a "
            "failed write)",
        )
        recoveries = CounterMetricFamily(
            "walkit_ledger_recoveries",
            "Ledgers this client recovered (fenced and closed: takeovers, stalled ledgers)",
        )
        reader_lag = GaugeMetricFamily(
            "walkit_log_reader_lag_records",
            "Records a reader knows are readable and has not handed out: those fetched, and "
            "the confirmed entries of its ledger not fetched yet (at its average records per "
            "entry); the largest of the log's readers (consumer=\"\") or the consumer's",
            labels=["log", "consumer"],
        )
        commit_lag = GaugeMetricFamily(
            "walkit_log_consumer_commit_lag_records",
            "Records a consumer handed out and has not committed",
            labels=["log", "consumer"],
        )
        behind = CounterMetricFamily(
            "walkit_log_consumer_behind",
            "Reads of a consumer that found records it had not committed deleted "
            "(ConsumerBackloggedError)",
            labels=["log", "consumer"],
        )
        released = CounterMetricFamily(
            "walkit_log_consumer_released",
            "Retention passes of this client that deleted records a consumer had not "
            "committed, its backlog being over the log's quota",
            labels=["log", "consumer"],
        )
        if with_samples:
            self._samples(latency, records, size, reader_lag, commit_lag, behind, released)
            ledger = self.ledger_appends
            ledger_latency.add_metric([], _buckets(ledger), sum_value=ledger.seconds)
            ledger_entries.add_metric([], ledger.records)
            ledger_bytes.add_metric([], ledger.bytes)
            changes.add_metric([], self.ensemble_changes)
            recoveries.add_metric([], self.recoveries)
        yield from (latency, records, size, ledger_latency, ledger_entries, ledger_bytes)
        yield from (changes, recoveries)
        yield from (reader_lag, commit_lag, behind, released)
        yield from self._lake_families(with_samples)

    def _lake_families(self, with_samples: bool) -> Iterator[Metric]:
        from prometheus_client.core import (
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        made = {
            "bytes": CounterMetricFamily(
                "walkit_lake_offloaded_bytes", "Bytes of data files offloaded", labels=["log"]
            ),
            "files": CounterMetricFamily(
                "walkit_lake_offloaded_files", "Data files offloaded", labels=["log"]
            ),
            "ledgers": CounterMetricFamily(
                "walkit_lake_offloaded_ledgers", "Ledgers offloaded", labels=["log"]
            ),
            "failures": CounterMetricFamily(
                "walkit_lake_offload_failures", "Offload passes that failed", labels=["log"]
            ),
        }
        lag = GaugeMetricFamily(
            "walkit_lake_offload_lag_seconds",
            "Seconds since the oldest closed ledger not yet offloaded closed (its newest "
            "record), as the last offload pass saw it",
            labels=["log"],
        )
        reads = HistogramMetricFamily(
            "walkit_lake_read_seconds",
            "Seconds a log reader waited for a row group read from the lake",
            labels=["log"],
        )
        if with_samples:
            for log, stats in list(self._lake.items()):
                for name, family in made.items():
                    family.add_metric([log], getattr(stats, name))
                lag.add_metric([log], stats.lag_seconds)
                reads.add_metric([log], _buckets(stats.reads), sum_value=stats.reads.seconds)
        yield from made.values()
        yield from (lag, reads)

    def _samples(
        self,
        latency: HistogramMetricFamily,
        records: CounterMetricFamily,
        size: CounterMetricFamily,
        reader_lag: GaugeMetricFamily,
        commit_lag: GaugeMetricFamily,
        behind: CounterMetricFamily,
        released: CounterMetricFamily,
    ) -> None:
        # (Read while the event loop may add to them: each number is read once, so a scrape
        # sees every bucket at most one append apart, as prometheus' own histograms do.)
        for log, stats in list(self._appends.items()):
            latency.add_metric([log], _buckets(stats), sum_value=stats.seconds)
            records.add_metric([log], stats.records)
            size.add_metric([log], stats.bytes)
        for log, readers in list(self._readers.items()):
            lags = [r.lag_records() for r in _alive(readers)]
            if lags:
                reader_lag.add_metric([log, ""], max(lags))
        for (log, name), consumers in list(self._consumers.items()):
            alive = _alive(consumers)
            if alive:
                reader_lag.add_metric([log, name], max(c.reader_lag() for c in alive))
                commit_lag.add_metric([log, name], max(c.commit_lag for c in alive))
        for (log, name), n in list(self._behind.items()):
            behind.add_metric([log, name], n)
        for (log, name), n in list(self._released.items()):
            released.add_metric([log, name], n)


def _alive(objects: weakref.WeakSet[Any]) -> list[Any]:
    """The live members of a weak set that the event loop's thread may change meanwhile."""
    for _attempt in range(3):
        try:
            return list(objects)
        except RuntimeError:  # changed while we copied it: copy again
            continue
    return []


_BY_REGISTRY: weakref.WeakKeyDictionary[Any, ClientMetrics] = weakref.WeakKeyDictionary()


def client_metrics(registry: Any) -> ClientMetrics | None:
    """The collector of ``registry`` (registered there at its first client); None for no
    registry. ConfigurationError when the registry is not one, or already holds metrics of
    these names from elsewhere."""
    if registry is None:
        return None
    found = _BY_REGISTRY.get(registry)
    if found is not None:
        return found
    if not callable(getattr(registry, "register", None)):
        raise ConfigurationError(
            f"metrics_registry must be a prometheus_client CollectorRegistry, not {registry!r}"
        )
    found = ClientMetrics()
    try:
        registry.register(found)
    except ValueError as exc:
        raise ConfigurationError(f"metrics_registry: {exc}") from None
    _BY_REGISTRY[registry] = found
    return found


def _buckets(stats: AppendStats) -> list[tuple[str, float]]:
    """``stats``' buckets as a prometheus histogram's cumulative counts."""
    cumulative = 0
    buckets: list[tuple[str, float]] = []
    for bound, n in zip((*APPEND_BUCKETS, float("inf")), list(stats.buckets), strict=True):
        cumulative += n
        buckets.append(("+Inf" if bound == float("inf") else repr(bound), cumulative))
    return buckets
