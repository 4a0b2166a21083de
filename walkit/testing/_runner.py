"""Seeded, deterministic runs: seeds, trio's scheduler, MockClock.

trio runs the tasks that became ready in one batch in a random order, drawn from a private
``random.Random`` (``trio._core._run._r``). With ``_ALLOW_DETERMINISTIC_SCHEDULING`` set (trio's own
Hypothesis plugin sets it when Hypothesis is imported), each batch is first sorted by task creation
order and then shuffled with that generator, so seeding it makes the scheduling order a function of
the seed. :func:`deterministic_scheduling` does exactly that, and puts both back afterwards.

Limits: this relies on two private trio names (checked at run time; when they are missing the run
is still seeded but the scheduling order is not, and a warning says so). Order of iteration of sets
and dicts keyed by ``str`` depends on ``PYTHONHASHSEED``: for byte-exact replays of code that
iterates such sets, run with the same ``PYTHONHASHSEED`` (for example ``PYTHONHASHSEED=0``).
Ties between equal deadlines are broken by object ids, but all tasks woken together are sorted
before the shuffle, so that does not change the order.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import warnings
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar, final

import trio
import trio.testing

from walkit.errors import InvalidArgumentError

T = TypeVar("T")

#: Environment variable that fixes the seed of every simulated run (to replay a failure).
SEED_ENV = "WALKIT_SIM_SEED"


def _trio_scheduler() -> tuple[Any, random.Random] | None:
    try:
        from trio._core import _run
    except ImportError:  # pragma: no cover - trio moved its internals
        return None
    rng = getattr(_run, "_r", None)
    if not isinstance(rng, random.Random) or not hasattr(_run, "_ALLOW_DETERMINISTIC_SCHEDULING"):
        return None  # pragma: no cover
    return _run, rng


@contextlib.contextmanager
def deterministic_scheduling(seed: int) -> Iterator[bool]:
    """Make trio's choice among ready tasks a function of ``seed`` for the duration.

    Yields whether it could (False when trio's internals changed; the run then is not
    reproducible task for task). Safe to use around ``trio.run`` or inside a run.
    """
    found = _trio_scheduler()
    if found is None:  # pragma: no cover
        warnings.warn(
            "walkit.testing: cannot seed trio's scheduler on this trio version; "
            "runs are seeded but task order may differ between replays",
            RuntimeWarning,
            stacklevel=3,
        )
        yield False
        return
    module, rng = found
    saved_flag = module._ALLOW_DETERMINISTIC_SCHEDULING
    saved_state = rng.getstate()
    module._ALLOW_DETERMINISTIC_SCHEDULING = True
    rng.seed(seed)
    try:
        yield True
    finally:
        module._ALLOW_DETERMINISTIC_SCHEDULING = saved_flag
        rng.setstate(saved_state)


#: Task steps at one instant of simulated time after which a run counts as stalled.
STALL_STEPS = 100_000


class SimulationStalled(AssertionError):
    """Simulated time stood still while tasks kept running: a livelock (for example a retry
    loop without a pause). On a MockClock such a loop would spin forever."""


@final
class StallGuard(trio.abc.Instrument):
    """Counts task steps at one clock reading; past ``limit`` it cancels ``scope`` once.

    Deterministic (it counts steps, not real time), so a stall replays with its seed.
    """

    def __init__(self, limit: int = STALL_STEPS) -> None:
        if limit < 1:
            raise InvalidArgumentError("the stall limit must be >= 1 task step")
        self.limit = limit
        self.scope: trio.CancelScope | None = None
        #: The simulated time at which the run stalled (None: it did not).
        self.stalled_at: float | None = None
        self._at = -1.0
        self._steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        now = trio.current_time()
        if now != self._at:
            self._at, self._steps = now, 0
            return
        self._steps += 1
        if self._steps > self.limit and self.stalled_at is None:
            self.stalled_at = now
            if self.scope is not None:
                self.scope.cancel()

    def error(self, context: str = "") -> SimulationStalled:
        extra = f"; {context}" if context else ""
        return SimulationStalled(
            f"simulated time stood still at t={self.stalled_at} for more than {self.limit} "
            f"task steps: a livelock (a loop that retries without waiting?){extra}"
        )


#: Where a simulation's wall clock starts: 2023-11-14T22:13:20Z, in seconds since the epoch.
SIM_EPOCH = 1_700_000_000.0


def sim_wall_clock() -> float:
    """The simulation's wall clock: :data:`SIM_EPOCH` plus trio's current (Mock) time.

    What :class:`SimCluster` gives its clients as ``wall_clock``, so that records' timestamps,
    ages and retention replay from a seed like everything else; a real client stamps with
    ``time.time``."""
    return SIM_EPOCH + trio.current_time()


def seed_from_env(default: int | None = None) -> int:
    """The seed in ``WALKIT_SIM_SEED`` if set, else ``default``, else a fresh random one."""
    text = os.environ.get(SEED_ENV, "").strip()
    if text:
        try:
            return int(text, 0)
        except ValueError:
            raise InvalidArgumentError(f"{SEED_ENV}={text!r} is not an integer") from None
    if default is not None:
        return default
    return random.SystemRandom().randrange(2**63)


def replay_hint(seed: int, options: str = "") -> str:
    """The line to print so that a failure replays."""
    extra = f" ({options})" if options else ""
    return f"walkit.testing seed={seed}{extra}; replay with {SEED_ENV}={seed}"


def run(
    async_fn: Callable[..., Awaitable[T]],
    *args: object,
    seed: int,
    clock: trio.abc.Clock | None = None,
    announce: bool = True,
    stall_steps: int | None = STALL_STEPS,
) -> T:
    """``trio.run`` on a ``MockClock(autojump_threshold=0)`` with the scheduler seeded by ``seed``.

    Prints the seed first (``announce``), so that the output of a failing test says how to
    replay it. A run in which simulated time stands still for more than ``stall_steps`` task
    steps (a livelock) is cancelled and raises :class:`SimulationStalled` (None: no limit).
    """
    if announce:
        print(replay_hint(seed), file=sys.stderr)
    if clock is None:
        clock = trio.testing.MockClock(autojump_threshold=0)
    guard = StallGuard(stall_steps) if stall_steps is not None else None

    async def main() -> T:
        if guard is None:
            return await async_fn(*args)
        with trio.CancelScope() as scope:
            guard.scope = scope
            try:
                result = await async_fn(*args)
            except BaseException as exc:
                if guard.stalled_at is not None:  # whatever the unwinding raised
                    raise guard.error(replay_hint(seed)) from exc
                raise
            if guard.stalled_at is None:
                return result
        raise guard.error(replay_hint(seed))

    with deterministic_scheduling(seed):
        return trio.run(main, clock=clock, instruments=[guard] if guard is not None else [])
