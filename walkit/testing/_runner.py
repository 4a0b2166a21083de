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
from typing import Any, TypeVar

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
) -> T:
    """``trio.run`` on a ``MockClock(autojump_threshold=0)`` with the scheduler seeded by ``seed``.

    Prints the seed first (``announce``), so that the output of a failing test says how to
    replay it.
    """
    if announce:
        print(replay_hint(seed), file=sys.stderr)
    if clock is None:
        clock = trio.testing.MockClock(autojump_threshold=0)
    with deterministic_scheduling(seed):
        return trio.run(async_fn, *args, clock=clock)
