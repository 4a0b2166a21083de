"""The KV service's Prometheus metrics (``GET /metrics``).

Per-request figures (requests by method and code, latency) are plain counters that the scrape
reads: a request costs a dict increment and a bisect, not prometheus-client's locked
``inc``/``observe`` (several µs each, on every request). Per-batch figures use
prometheus-client directly.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from typing import Any, final

from kv_http import Stats
from kv_state import KVState
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

#: Methods with a label of their own; any other is counted as OTHER (bounded labels).
METHODS = frozenset({"GET", "PUT", "DELETE", "POST", "HEAD"})
#: prometheus-client's default latency buckets (seconds).
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)


@final
class RequestStats:
    """Requests answered, by method and status, and their latency by method."""

    def __init__(self) -> None:
        self.counts: dict[tuple[str, int], int] = {}
        #: method -> [count per bucket (the last: over every bound)], sum of seconds
        self.latency: dict[str, tuple[list[int], list[float]]] = {}

    def observe(self, method: str, status: int, seconds: float) -> None:
        if method not in METHODS:
            method = "OTHER"
        key = (method, status)
        self.counts[key] = self.counts.get(key, 0) + 1
        entry = self.latency.get(method)
        if entry is None:
            entry = self.latency[method] = ([0] * (len(BUCKETS) + 1), [0.0])
        entry[0][bisect.bisect_left(BUCKETS, seconds)] += 1
        entry[1][0] += seconds

    def collect(self) -> Iterator[Any]:
        requests = CounterMetricFamily(
            "kv_requests", "HTTP requests answered", labels=["method", "code"]
        )
        for (method, status), n in sorted(self.counts.items()):
            requests.add_metric([method, str(status)], n)
        yield requests
        latency = HistogramMetricFamily(
            "kv_request_seconds", "HTTP request latency", labels=["method"]
        )
        for method, (buckets, total) in sorted(self.latency.items()):
            cumulative, running = [], 0
            for bound, n in zip([*map(str, BUCKETS), "+Inf"], buckets, strict=True):
                running += n
                cumulative.append((bound, running))
            latency.add_metric([method], cumulative, total[0])
        yield latency


@final
class HttpCollector:
    """The HTTP server's connection counts, read at scrape time. kv_http keeps them all; on
    uvicorn only the open connections are known (its refusals and closes are its own), so the
    counters are left out rather than reported as zero."""

    def __init__(self, stats: Stats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Any]:
        s = self._stats
        yield GaugeMetricFamily(
            "kv_http_connections", "HTTP connections open", value=s.open_connections()
        )
        if s.open_now is not None:
            return
        for name, doc, value in (
            ("kv_http_connections_refused", "connections answered 503: too many open", s.refused),
            (
                "kv_http_idle_closed",
                "keep-alive connections closed after idle_timeout",
                s.idle_closed,
            ),
            (
                "kv_http_evicted",
                "connections closed to make room for a newcomer at max_connections",
                s.evicted,
            ),
            (
                "kv_http_timed_out",
                "connections closed: a request or its answer took over request_timeout",
                s.timed_out,
            ),
        ):
            yield CounterMetricFamily(name, doc, value=value)


@final
class StateCollector:
    """The store's size against its quota, read at scrape time."""

    def __init__(self, state: KVState, quota: int) -> None:
        self._state = state
        self._quota = quota

    def collect(self) -> Iterator[Any]:
        yield GaugeMetricFamily(
            "kv_state_bytes", "bytes of keys and values this replica holds", value=self._state.size
        )
        yield GaugeMetricFamily("kv_quota_bytes", "the quota (--quota-bytes)", value=self._quota)


@final
class Metrics:
    def __init__(self, state: KVState, quota: int) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = RequestStats()
        r.register(self.requests)
        self.batch = Histogram(
            "kv_commit_batch_size",
            "commands per append_batch",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            registry=r,
        )
        self.leader = Gauge("kv_is_leader", "1 on the leader", registry=r)
        self.applied = Gauge("kv_applied_records", "records applied by this replica", registry=r)
        self.step_downs = Counter("kv_step_downs", "times this replica stopped leading", registry=r)
        self.quota_refused = Counter(
            "kv_quota_refused", "PUTs refused with 507: the store would pass its quota", registry=r
        )
        self.http = Stats()
        r.register(HttpCollector(self.http))
        r.register(StateCollector(state, quota))
