"""A latency histogram kept as plain counts, read by the metrics collector at scrape time.

The bookie's metrics are read from its own counters when scraped (no prometheus call on the
request path); this is the histogram form of such a counter: fixed bucket bounds, a count per
bucket and a sum, in the shape of a prometheus histogram (``le`` buckets are cumulative).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import final

#: Bounds for a journal write with its sync: ~0.1-0.3 ms on a local SSD here, tens of ms on
#: a busy spinning disk, seconds when the disk is failing.
JOURNAL_WRITE_BUCKETS: tuple[float, ...] = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)


@final
class LatencyHistogram:
    """Observations in seconds, counted per bucket (``bounds`` ascending; one more bucket for
    those above the last bound)."""

    def __init__(self, bounds: Sequence[float] = JOURNAL_WRITE_BUCKETS) -> None:
        if list(bounds) != sorted(set(bounds)) or not bounds:
            raise ValueError(f"bucket bounds must be distinct and ascending, not {bounds!r}")
        self.bounds = tuple(float(b) for b in bounds)
        self._counts = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        # bisect_left: an observation equal to a bound belongs to that bound's bucket (le).
        self._counts[bisect.bisect_left(self.bounds, seconds)] += 1
        self.count += 1
        self.sum += seconds

    def buckets(self) -> list[tuple[str, int]]:
        """Cumulative ``(le, count)`` pairs, ending with ``("+Inf", count)``."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, n in zip(self.bounds, self._counts, strict=False):
            total += n
            out.append((repr(bound), total))
        out.append(("+Inf", self.count))
        return out
