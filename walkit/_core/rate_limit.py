"""A token bucket for rereplication's entries/s and bytes/s limits (pure; the caller sleeps)."""

from __future__ import annotations

import math
from typing import final

import attrs

from walkit.errors import InvalidArgumentError


def check_rate(value: object, what: str) -> float | None:
    """A rate limit: None or 0 means unlimited, otherwise a finite number > 0."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgumentError(f"{what} must be a number, not {value!r}")
    if value < 0:
        raise InvalidArgumentError(f"{what} must be >= 0 (0 means no limit), not {value!r}")
    return float(value) or None


@final
@attrs.define
class TokenBucket:
    """``rate`` tokens per second, at most ``burst`` saved up; None means no limit.

    :meth:`reserve` takes tokens at once (the bucket may go into debt) and says how long the
    caller must wait before using them, so large items (a 5 MiB entry against a 1 MiB/s
    limit) pass, just later.
    """

    rate: float | None
    burst: float = 0.0
    tokens: float = 0.0
    last: float | None = None

    def __attrs_post_init__(self) -> None:
        if self.rate is not None and self.burst <= 0:
            self.burst = self.rate / 50  # 20 ms worth: no long bursts
        self.tokens = self.burst

    def reserve(self, amount: float, now: float) -> float:
        """Take ``amount`` tokens; return the seconds to wait (0 when there were enough)."""
        if self.rate is None:
            return 0.0
        if self.last is not None:
            self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        self.tokens -= amount
        return 0.0 if self.tokens >= 0 else -self.tokens / self.rate
