"""How Spark's synchronous callbacks run the async client: through AnyIO's public entry points.

Spark calls a data source from plain threads (the driver's planning, each task of a Python
worker), so every callback either runs one event loop for its call (:func:`run`, AnyIO's
``anyio.run``) or, when the calling thread must keep working while the client reads ahead,
runs one in a thread of its own behind a portal (:func:`portal`, AnyIO's
``anyio.from_thread.start_blocking_portal``). The loop is asyncio's, uvloop's when installed
(the faster loop for the client, as in the bookie's ``--event-loop auto``). An error comes out
as one walkit error, never an ExceptionGroup.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import anyio
from anyio.from_thread import BlockingPortal, start_blocking_portal

from walkit._groups import collapse
from walkit._loop import anyio_backend

__all__ = ["portal", "raise_one", "run"]

T = TypeVar("T")


def run(func: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``await func(*args)`` in an event loop of its own (``anyio.run``)."""
    backend, options = anyio_backend()
    with raise_one():
        return anyio.run(func, *args, backend=backend, backend_options=options)


@contextlib.contextmanager
def portal(name: str) -> Iterator[BlockingPortal]:
    """An event loop in a daemon thread called ``name``, and the portal into it. Leaving the
    block waits for what still runs there (cancelled first when the block raised: an error, or
    a generator closed early) and joins the thread."""
    backend, options = anyio_backend()
    with start_blocking_portal(backend, options, name=name) as found:
        yield found


@contextlib.contextmanager
def raise_one() -> Iterator[None]:
    """One error out of a task group's ExceptionGroup (walkit's error tree, not a group)."""
    try:
        yield
    except BaseExceptionGroup as group:
        raise collapse(group) from None
