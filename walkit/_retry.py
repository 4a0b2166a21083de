"""Retrying an async operation with :class:`walkit._core.backoff.Backoff` (the event loop's clock).

Every retry loop of the client and the bookie goes through :func:`retry` or sleeps with
:func:`pause`, so a simulation on trio's MockClock with a seeded generator controls all of them.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

from walkit._core.backoff import Backoff

__all__ = ["pause", "retry"]

T = TypeVar("T")


async def pause(
    backoff: Backoff,
    attempt: int,
    rng: random.Random,
    *,
    before: Callable[[float], None] | None = None,
) -> float:
    """Sleep before retry ``attempt``; returns the seconds slept.

    ``before(seconds)`` is called first (to log the coming pause).
    """
    seconds = backoff.delay(attempt, rng)
    if before is not None:
        before(seconds)
    await anyio.sleep(seconds)
    return seconds


async def retry(
    op: Callable[[], Awaitable[T]],
    *,
    attempts: int,
    backoff: Backoff,
    rng: random.Random,
    retry_on: Callable[[Exception], bool],
    on_retry: Callable[[Exception, int, float], None] | None = None,
) -> T:
    """Run ``op`` up to ``attempts`` times while it raises an error that ``retry_on`` accepts,
    pausing between tries; the last error (or any other) propagates unchanged.

    ``on_retry(error, attempt, seconds)`` is called before each pause (to log it).
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, not {attempts}")
    for attempt in range(attempts):
        try:
            return await op()
        except Exception as exc:
            if attempt == attempts - 1 or not retry_on(exc):
                raise
            report = None if on_retry is None else functools.partial(on_retry, exc, attempt)
            await pause(backoff, attempt, rng, before=report)
    raise AssertionError("unreachable")  # pragma: no cover
