"""The event loop behind a :mod:`walkit.sync` client: one daemon thread per client.

The thread runs an event loop (asyncio by default, uvloop when asked and installed, or trio)
with an AnyIO :class:`~anyio.from_thread.BlockingPortal`, through which the blocking API calls
the async one. Rules that keep a threaded program safe:

- the thread is a daemon and every live loop is stopped at interpreter exit (with a bounded
  wait), so a client that was never closed cannot hang the process on its way out;
- a client used in a child after ``fork()`` raises :class:`~walkit.errors.ForkedProcessError`
  (the thread, its connections and its loop stayed in the parent);
- a call made from the loop's own thread (a callback calling back in) raises at once instead
  of waiting for itself;
- a blocking call interrupted in its thread (KeyboardInterrupt) cancels the async operation.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import os
import threading
import weakref
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Final, Literal, TypeVar, final, get_args

import anyio
import anyio.abc
from anyio.from_thread import BlockingPortal

from walkit._loop import EventLoop, current_loop
from walkit.errors import (
    ClientClosedError,
    ConfigurationError,
    ForkedProcessError,
    WrongEventLoopError,
)

__all__ = ["Backend", "LoopThread"]

T = TypeVar("T")

#: The event loops a sync client may run on.
Backend = Literal["asyncio", "uvloop", "trio"]
BACKENDS: Final = get_args(Backend)
#: How long interpreter exit waits for each loop that was left running.
_EXIT_WAIT: Final = 5.0

_LIVE: weakref.WeakSet[LoopThread] = weakref.WeakSet()


def _run_options(backend: Backend) -> tuple[str, dict[str, Any]]:
    if backend not in BACKENDS:
        raise ConfigurationError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    if backend == "uvloop":
        try:
            import uvloop
        except ImportError:
            raise ConfigurationError("backend 'uvloop' needs uvloop installed") from None
        return "asyncio", {"loop_factory": uvloop.new_event_loop}
    return backend, {}


@final
class LoopThread:
    """One event loop in a daemon thread, and the calls into it (see the module docs)."""

    def __init__(self, backend: Backend = "asyncio") -> None:
        name, options = _run_options(backend)
        self.backend = backend
        self._pid = os.getpid()
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._stopping = False
        self._portal: BlockingPortal | None = None
        self._loop: EventLoop | None = None
        self._tasks: anyio.abc.TaskGroup | None = None
        self._thread = threading.Thread(
            target=self._run, args=(name, options), name="walkit-sync-loop", daemon=True
        )
        self._thread.start()
        self._started.wait()
        if self._failure is not None:
            raise self._failure
        _LIVE.add(self)

    def _run(self, name: str, options: dict[str, Any]) -> None:
        try:
            anyio.run(self._main, backend=name, backend_options=options)
        except BaseException as exc:
            self._failure = exc
        finally:
            self._stopping = True
            self._started.set()

    async def _main(self) -> None:
        async with BlockingPortal() as portal, anyio.create_task_group() as tasks:
            self._portal = portal
            self._tasks = tasks
            self._loop = current_loop()
            self._started.set()
            await portal.sleep_until_stopped()
            tasks.cancel_scope.cancel()

    # --- calling in ------------------------------------------------------------------------

    @property
    def loop(self) -> EventLoop:
        assert self._loop is not None
        return self._loop

    @property
    def tasks(self) -> anyio.abc.TaskGroup:
        """Background work of the objects this loop serves (cancelled when it stops)."""
        assert self._tasks is not None
        return self._tasks

    def check(self) -> BlockingPortal:
        """The portal, if this thread may call in now; else the error saying why not."""
        if os.getpid() != self._pid:
            raise ForkedProcessError(
                "this walkit.sync client was created before fork(): its event loop and "
                "connections stayed in the parent process; connect again in the child"
            )
        if threading.current_thread() is self._thread:
            raise WrongEventLoopError(
                "a walkit.sync call from the client's own event loop thread (a callback?) "
                "would wait for itself; use the async API there"
            )
        portal = self._portal
        if portal is None or self._stopping or not self._thread.is_alive():
            raise ClientClosedError("the client is closed")
        return portal

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        """Run ``await fn(*args)`` in the loop and return its result (or raise its error)."""
        future = self.check().start_task_soon(fn, *args)
        return wait(future)

    def run_sync(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` (a plain function that needs the loop) in the loop."""
        return self.check().call(fn, *args)

    def context(self, cm: AbstractAsyncContextManager[T]) -> AbstractContextManager[T]:
        """An async context manager, entered and exited in the loop, as a blocking one."""
        return self.check().wrap_async_context_manager(cm)

    # --- stopping --------------------------------------------------------------------------

    def stop(self, timeout: float | None = None) -> None:
        """Stop the loop (what still runs in it is cancelled) and wait for the thread."""
        if self._stopping or os.getpid() != self._pid:
            return
        self._stopping = True
        _LIVE.discard(self)
        portal = self._portal
        if portal is not None and self._thread.is_alive():
            if threading.current_thread() is self._thread:
                raise WrongEventLoopError("a walkit.sync client closed from its own loop thread")
            try:
                portal.call(portal.stop, True)
            except (RuntimeError, anyio.RunFinishedError):
                pass  # the loop ended meanwhile
        self._thread.join(timeout)


def wait(future: concurrent.futures.Future[T]) -> T:
    """The future's result; an interrupted wait (KeyboardInterrupt) cancels the operation."""
    try:
        return future.result()
    except concurrent.futures.CancelledError:
        raise ClientClosedError("the client was closed during the call") from None
    except BaseException:
        future.cancel()
        raise


@atexit.register
def _stop_all() -> None:
    for thread in list(_LIVE):
        thread.stop(_EXIT_WAIT)
