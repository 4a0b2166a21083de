"""Backoff between retries: one policy for every retry loop in walkit.

Pure: the caller passes the attempt number and its random generator (injected, so a simulation
replays every pause), and sleeps for what :meth:`Backoff.delay` says. Full jitter by default
(AWS's "exponential backoff and jitter"): retrying clients spread out instead of retrying in step.
"""

from __future__ import annotations

import enum
from typing import Protocol, final

import attrs

from walkit.errors import InvalidArgumentError

__all__ = ["Backoff", "Jitter"]


class Uniform(Protocol):
    """The part of ``random.Random`` a backoff draws from (the caller's generator)."""

    def uniform(self, a: float, b: float) -> float: ...


class Jitter(enum.Enum):
    """How much of the exponential delay is random."""

    FULL = "full"  #: uniform in [0, delay]
    EQUAL = "equal"  #: uniform in [delay / 2, delay]
    NONE = "none"  #: exactly the delay (only where nothing retries in step)


@final
@attrs.frozen
class Backoff:
    """``first * multiplier ** attempt`` seconds, at most ``cap``, with ``jitter``."""

    first: float
    cap: float
    multiplier: float = 2.0
    jitter: Jitter = Jitter.FULL

    def __attrs_post_init__(self) -> None:
        if not 0 < self.first <= self.cap or self.multiplier < 1:
            raise InvalidArgumentError(
                f"backoff needs 0 < first <= cap and multiplier >= 1: {self!r}"
            )

    def ceiling(self, attempt: int) -> float:
        """The delay before jitter after ``attempt`` failures (0 for the first retry)."""
        if attempt < 0:
            raise InvalidArgumentError(f"attempt {attempt} is negative")
        # Capped exponent: no float overflow for large attempt counts.
        steps = min(attempt, 64)
        return min(self.cap, self.first * self.multiplier**steps)

    def delay(self, attempt: int, rng: Uniform) -> float:
        """How long to wait before retry number ``attempt`` (0-based)."""
        ceiling = self.ceiling(attempt)
        if self.jitter is Jitter.FULL:
            return rng.uniform(0.0, ceiling)
        if self.jitter is Jitter.EQUAL:
            return rng.uniform(ceiling / 2, ceiling)
        return ceiling
