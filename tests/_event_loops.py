"""One scenario under each event loop walkit serves: trio, asyncio, and uvloop when installed.

A test that uses it is a plain (sync) function parametrised with :data:`EVENT_LOOPS` that runs
its async scenario with :func:`run_on`, so pytest-trio's ``trio_mode`` leaves it alone and the
scenario starts a fresh loop of the kind asked for::

    @pytest.mark.parametrize("loop", EVENT_LOOPS)
    def test_something(loop: str) -> None:
        run_on(loop, scenario, arg)
"""

from __future__ import annotations

import importlib.util
from collections.abc import Awaitable, Callable
from typing import TypeVar, TypeVarTuple

import anyio
import pytest

__all__ = ["ASYNCIO_LOOPS", "EVENT_LOOPS", "run_on"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_NO_UVLOOP = pytest.mark.skipif(
    importlib.util.find_spec("uvloop") is None, reason="uvloop is not installed"
)

#: asyncio's own loop and uvloop's.
ASYNCIO_LOOPS = [pytest.param("asyncio"), pytest.param("uvloop", marks=_NO_UVLOOP)]
#: Every kind of loop: trio's first.
EVENT_LOOPS = [pytest.param("trio"), *ASYNCIO_LOOPS]


def run_on(loop: str, fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
    """Run ``fn(*args)`` in a new event loop of the kind ``loop`` names, and return its result."""
    if loop == "uvloop":
        return anyio.run(fn, *args, backend="asyncio", backend_options={"use_uvloop": True})
    if loop not in ("trio", "asyncio"):
        raise ValueError(f"unknown event loop {loop!r}")
    return anyio.run(fn, *args, backend=loop)
