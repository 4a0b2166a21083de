"""Rate-limited warnings about bad input (malformed frames and messages from clients).

A warning per bad frame would let a peer turn 1 MiB of garbage into ~12 MB of log. So each
kind of bad input is counted (the metric ``walkit_bookie_bad_input_total{kind=...}``), at most
``burst`` warnings are logged per ``interval`` seconds, and the first warning after a quiet
spell says how many were dropped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

import anyio

from walkit.shared import get_logger

log = get_logger(__name__)

__all__ = ["BadInputLog"]


@final
class BadInputLog:
    """Counts bad input by kind; logs a bounded number of warnings about it."""

    def __init__(
        self, burst: int, interval: float, clock: Callable[[], float] = anyio.current_time
    ) -> None:
        self.burst = burst
        self.interval = interval
        self._clock = clock
        #: Bad inputs seen so far, by kind.
        self.counts: dict[str, int] = {}
        #: Warnings not logged because of the limit, so far.
        self.suppressed = 0
        self._window_start: float | None = None
        self._logged_in_window = 0
        self._dropped_since_last = 0

    def report(self, kind: str, **fields: Any) -> None:
        self.counts[kind] = self.counts.get(kind, 0) + 1
        now = self._clock()
        if self._window_start is None or now - self._window_start >= self.interval:
            self._window_start = now
            self._logged_in_window = 0
        if self._logged_in_window >= self.burst:
            self._dropped_since_last += 1
            self.suppressed += 1
            return
        self._logged_in_window += 1
        if self._dropped_since_last:
            fields["suppressed_before"] = self._dropped_since_last
            self._dropped_since_last = 0
        if self._logged_in_window == self.burst:
            fields["limit"] = f"further bad input is only counted for {self.interval:g}s"
        log.warning(kind, **fields)
