"""The one backoff policy (walkit._core.backoff) and the retry helper (walkit._retry)."""

from __future__ import annotations

import random

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from walkit._core.backoff import Backoff, Jitter
from walkit._retry import pause, retry
from walkit.errors import BookieTimeoutError, InvalidArgumentError, NoSuchLedgerError


def test_ceiling_doubles_up_to_the_cap() -> None:
    b = Backoff(first=0.1, cap=1.0)
    assert [b.ceiling(n) for n in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert b.ceiling(10_000) == 1.0  # no overflow
    with pytest.raises(InvalidArgumentError):
        b.ceiling(-1)


@pytest.mark.parametrize(
    ("first", "cap", "multiplier"), [(0.0, 1.0, 2.0), (2.0, 1.0, 2.0), (0.1, 1.0, 0.5)]
)
def test_bad_policies_are_refused(first: float, cap: float, multiplier: float) -> None:
    with pytest.raises(InvalidArgumentError):
        Backoff(first=first, cap=cap, multiplier=multiplier)


@given(st.integers(0, 100), st.integers(0, 2**32), st.sampled_from(list(Jitter)))
def test_delays_stay_within_their_jitter_band(attempt: int, seed: int, jitter: Jitter) -> None:
    b = Backoff(first=0.05, cap=2.0, jitter=jitter)
    ceiling = b.ceiling(attempt)
    delay = b.delay(attempt, random.Random(seed))
    low = {Jitter.FULL: 0.0, Jitter.EQUAL: ceiling / 2, Jitter.NONE: ceiling}[jitter]
    assert low <= delay <= ceiling
    assert b.delay(attempt, random.Random(seed)) == delay  # the generator decides: replayable


async def test_retry_retries_what_it_is_told_then_gives_up(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[float] = []
    seen: list[tuple[int, float]] = []

    async def flaky() -> str:
        calls.append(trio.current_time())
        if len(calls) < 3:
            raise BookieTimeoutError("slow")
        return "ok"

    b = Backoff(first=1.0, cap=8.0, jitter=Jitter.NONE)
    result = await retry(
        flaky,
        attempts=5,
        backoff=b,
        rng=random.Random(1),
        retry_on=lambda exc: isinstance(exc, BookieTimeoutError),
        on_retry=lambda exc, attempt, seconds: seen.append((attempt, seconds)),
    )
    assert result == "ok"
    assert seen == [(0, 1.0), (1, 2.0)]
    assert [round(t - calls[0], 6) for t in calls] == [0.0, 1.0, 3.0]

    async def always() -> None:
        raise BookieTimeoutError("down")

    with pytest.raises(BookieTimeoutError):
        await retry(always, attempts=3, backoff=b, rng=random.Random(1), retry_on=lambda exc: True)

    tries = 0

    async def fatal() -> None:
        nonlocal tries
        tries += 1
        raise NoSuchLedgerError("gone")

    with pytest.raises(NoSuchLedgerError):
        await retry(
            fatal,
            attempts=3,
            backoff=b,
            rng=random.Random(1),
            retry_on=lambda exc: isinstance(exc, BookieTimeoutError),
        )
    assert tries == 1
    with pytest.raises(ValueError, match="attempts"):
        await retry(always, attempts=0, backoff=b, rng=random.Random(1), retry_on=lambda e: True)


async def test_pause_sleeps_on_trio_clock(autojump_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    slept = await pause(Backoff(first=0.5, cap=0.5, jitter=Jitter.NONE), 3, random.Random(0))
    assert slept == 0.5 and trio.current_time() - start == pytest.approx(0.5)


async def test_pause_reports_the_coming_pause_before_sleeping(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    told: list[tuple[float, float]] = []
    b = Backoff(first=1.0, cap=8.0, jitter=Jitter.EQUAL)
    slept = await pause(
        b, 2, random.Random(7), before=lambda s: told.append((s, trio.current_time()))
    )
    # Told once, before the sleep, the very seconds slept: what the callers log as retry_in.
    assert told == [(slept, start)]
    assert 2.0 <= slept <= 4.0 and trio.current_time() - start == pytest.approx(slept)
    assert slept == b.delay(2, random.Random(7))
