"""The event loop a client runs on, trio's or asyncio's, found with sniffio.

walkit's I/O layers are written against AnyIO (task groups, cancel scopes, sleeps, locks,
streams, threads), so they run under trio and asyncio (and uvloop) alike. A few things AnyIO
does not offer, or offers at a cost the hot paths feel, live here, once per backend:

- parking and waking a task with no Event object in between (an append waits this way for its
  entry's acknowledgement: one wait per record, so every object and coroutine frame counts);
- one scheduling round (``checkpoint``) and the loop's clock, bound once instead of looked up
  on each call;
- calling back into the loop from a foreign thread without waiting (kazoo's watch threads);
- a background task tied to the run rather than to a task group (trio's system tasks);
- knowing whether the caller runs on the loop an object was created on: one client, one loop;
- telling a cancellation apart from an error on either backend (:func:`is_cancellation`).

:func:`run` is how a walkit process (the ``walkit`` CLI, a bookie) starts its loop: one rule for
``auto`` (uvloop when importable, else asyncio), for the bookie's ``--event-loop`` and the CLI.

:func:`current_loop` finds the running library per call, as httpx and AnyIO do (sniffio), and
returns the :class:`EventLoop` of the running loop; objects that belong to a loop keep it and
check it with :meth:`EventLoop.check`.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import importlib.util
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, Literal, Protocol, TypeVar, TypeVarTuple, Unpack, final

import anyio
import sniffio
import trio
from anyio.lowlevel import RunVar

from walkit.errors import ConfigurationError, WrongEventLoopError

__all__ = [
    "EVENT_LOOPS",
    "AsyncioLoop",
    "EventLoop",
    "ParkingLot",
    "TrioLoop",
    "anyio_backend",
    "current_loop",
    "event_loop_name",
    "is_cancellation",
    "resolve",
    "run",
    "uvloop_available",
]

T = TypeVar("T")
Args = TypeVarTuple("Args")


class EventLoop(abc.ABC):
    """What walkit needs of the running event loop beyond AnyIO (see the module docs)."""

    #: "trio" or "asyncio" (sniffio's names).
    name: str
    #: The loop's clock, in seconds (trio's ``current_time``: a simulation's MockClock).
    time: Callable[[], float]
    #: One scheduling round; a cancellation point.
    checkpoint: Callable[[], Awaitable[None]]
    #: Wait until a socket (or file descriptor) is readable, or writable.
    wait_readable: Callable[[Any], Awaitable[None]]
    wait_writable: Callable[[Any], Awaitable[None]]

    def readable_waiter(self, sock: Any, *, keep_registered: bool = False) -> ReadableWaiter:
        """A waiter for ``sock`` to be readable, called once per wait. ``keep_registered``
        keeps the socket watched between waits where that saves work (a reader that waits
        for it all its life); then close the waiter before the socket."""
        return _PlainReadableWaiter(self.wait_readable, sock)

    #: Whether :meth:`serve_readable` is offered (asyncio's loops have reader callbacks).
    serves_readable: bool = False

    async def serve_readable(self, sock: Any, step: Callable[[], object]) -> None:
        """Call ``step()`` each time ``sock`` is readable, from the loop itself (no task
        wakes up in between: a reader callback, as asyncio's own transports have), until it
        raises; then raise that (cancellation stops it too). Only where
        :attr:`serves_readable`."""
        raise NotImplementedError(f"the {self.name} event loop has no reader callbacks")

    @abc.abstractmethod
    async def park(self, waiters: list[Any]) -> None:
        """Put a wake-up handle for the calling task in ``waiters`` and wait until it is
        passed to :meth:`wake`. If the wait is cancelled, the handle leaves ``waiters``."""

    @abc.abstractmethod
    def wake(self, handle: Any) -> None:
        """Wake the task parked with ``handle`` (each handle once)."""

    @abc.abstractmethod
    def run_sync_soon(self, fn: Callable[..., object], *args: object) -> bool:
        """Call ``fn(*args)`` in the loop soon, from any thread, without waiting for it;
        False when the loop has ended (the call is dropped)."""

    @abc.abstractmethod
    def spawn_system_task(self, fn: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        """Run ``fn()`` in the background until it returns or the run ends (then it is
        cancelled); it must not raise."""

    @abc.abstractmethod
    def call_after_ready(self, fn: Callable[[], object]) -> bool:
        """Call ``fn()`` from the loop, with no task of its own, once the tasks that are ready
        to run now have had their turn; False when this loop cannot tell when that is (then
        nothing is called: the caller wakes a task instead). From the loop's thread only."""

    @abc.abstractmethod
    def is_current(self) -> bool:
        """Whether the caller runs on this loop (in its thread, inside it)."""

    def check(self, what: str) -> None:
        """Raise WrongEventLoopError unless the caller runs on this loop."""
        if not self.is_current():
            raise WrongEventLoopError(
                f"{what} belongs to the {self.name} event loop it was created in, and was used "
                "from another thread or event loop; create one per event loop (walkit.sync "
                "serves threads)"
            )


@final
class TrioLoop(EventLoop):
    """A trio run (also the deterministic simulation's, on its MockClock)."""

    name = "trio"

    def __init__(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self.time = trio.current_time
        self.checkpoint = trio.lowlevel.checkpoint
        self.wait_readable = trio.lowlevel.wait_readable
        self.wait_writable = trio.lowlevel.wait_writable

    async def park(self, waiters: list[Any]) -> None:
        task = trio.lowlevel.current_task()
        waiters.append(task)

        def abort(_: object) -> trio.lowlevel.Abort:
            waiters.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def wake(self, handle: Any) -> None:
        trio.lowlevel.reschedule(handle)

    def run_sync_soon(self, fn: Callable[..., object], *args: object) -> bool:
        try:
            self._token.run_sync_soon(fn, *args)
        except trio.RunFinishedError:
            return False
        return True

    def spawn_system_task(self, fn: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        trio.lowlevel.spawn_system_task(fn, name=name)

    def call_after_ready(self, fn: Callable[[], object]) -> bool:
        # trio runs callbacks only through a task (run_sync_soon writes to its wake-up socket
        # and wakes a system task), so: at once when no task is queued for the next batch,
        # else not. (Tasks of the current batch not run yet are not counted; the statistics
        # count every watched socket, so a caller with many should not ask.)
        if trio.lowlevel.current_statistics().tasks_runnable:
            return False
        fn()
        return True

    def is_current(self) -> bool:
        try:
            return trio.lowlevel.current_trio_token() is self._token
        except RuntimeError:
            return False


@final
class AsyncioLoop(EventLoop):
    """An asyncio event loop (uvloop's too)."""

    name = "asyncio"

    def __init__(self) -> None:
        self._loop = loop = asyncio.get_running_loop()
        self.time = loop.time
        self.checkpoint = _asyncio_checkpoint
        self.wait_readable = anyio.wait_readable
        self.wait_writable = anyio.wait_writable
        #: Background tasks: asyncio keeps only weak references to tasks.
        self._system_tasks: set[asyncio.Task[None]] = set()

    async def park(self, waiters: list[Any]) -> None:
        future = self._loop.create_future()
        waiters.append(future)
        try:
            await future
        except BaseException:
            with contextlib.suppress(ValueError):
                waiters.remove(future)
            raise

    def wake(self, handle: Any) -> None:
        if not handle.done():
            handle.set_result(None)

    def run_sync_soon(self, fn: Callable[..., object], *args: object) -> bool:
        try:
            self._loop.call_soon_threadsafe(_as_asyncio, fn, *args)
        except RuntimeError:  # the loop is closed
            return False
        return True

    serves_readable = True

    async def serve_readable(self, sock: Any, step: Callable[[], object]) -> None:
        loop = self._loop
        fd = sock if isinstance(sock, int) else sock.fileno()
        done: asyncio.Future[None] = loop.create_future()

        def readable() -> None:
            try:
                _as_asyncio(step)
            except BaseException as exc:
                loop.remove_reader(fd)
                if not done.done():
                    done.set_exception(exc)

        loop.add_reader(fd, readable)
        try:
            await done
        finally:
            loop.remove_reader(fd)

    def readable_waiter(self, sock: Any, *, keep_registered: bool = False) -> ReadableWaiter:
        if not keep_registered:
            return _PlainReadableWaiter(self.wait_readable, sock)
        return _AsyncioReadableWaiter(self._loop, sock if isinstance(sock, int) else sock.fileno())

    def call_after_ready(self, fn: Callable[[], object]) -> bool:
        # A plain callback queued now runs after every callback and task step already ready
        # (asyncio's ready queue is FIFO, and uvloop's too), with no task switch.
        self._loop.call_soon(_as_asyncio, fn)
        return True

    def spawn_system_task(self, fn: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        task = self._loop.create_task(fn(), name=name)
        self._system_tasks.add(task)
        task.add_done_callback(self._system_tasks.discard)

    def is_current(self) -> bool:
        try:
            return asyncio.get_running_loop() is self._loop
        except RuntimeError:
            return False


class ReadableWaiter(Protocol):
    """Waits for one socket to be readable (:meth:`EventLoop.readable_waiter`)."""

    async def __call__(self) -> None: ...

    def close(self) -> None: ...


@final
class _PlainReadableWaiter:
    __slots__ = ("_sock", "_wait_readable")

    def __init__(self, wait_readable: Callable[[Any], Awaitable[None]], sock: Any) -> None:
        self._wait_readable = wait_readable
        self._sock = sock

    async def __call__(self) -> None:
        await self._wait_readable(self._sock)

    def close(self) -> None:
        pass


@final
class _AsyncioReadableWaiter:
    """Keeps the socket's reader registered between waits: asyncio's ``wait_readable`` adds
    and removes it each time (an ``epoll_ctl`` each, a bookie's reader waits once per
    request at low load). It is removed only when the socket turns readable with no wait
    (level-triggered polling would call it on every pass of the loop), or at :meth:`close`."""

    __slots__ = ("_fd", "_future", "_loop", "_registered")

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self._loop = loop
        self._fd = fd
        self._future: asyncio.Future[None] | None = None
        self._registered = False

    async def __call__(self) -> None:
        loop = self._loop
        self._future = future = loop.create_future()
        if not self._registered:
            loop.add_reader(self._fd, self._readable)
            self._registered = True
        try:
            await future
        finally:
            self._future = None

    def _readable(self) -> None:
        future = self._future
        if future is None or future.done():
            self.close()
        else:
            future.set_result(None)

    def close(self) -> None:
        """Stop watching the socket; a wait in progress raises ClosedResourceError (as
        ``notify_closing`` makes trio's): its caller must not read a descriptor that may
        already name another socket."""
        future = self._future
        if future is not None and not future.done():
            future.set_exception(anyio.ClosedResourceError())
        if self._registered:
            self._registered = False
            self._loop.remove_reader(self._fd)


def _as_asyncio(fn: Callable[..., object], *args: object) -> None:
    """Call ``fn`` from a plain callback of an asyncio loop, telling sniffio (so AnyIO) which
    library runs: outside a task it cannot tell by itself."""
    local = sniffio.thread_local
    previous = local.name
    local.name = "asyncio"
    try:
        fn(*args)
    finally:
        local.name = previous


async def _asyncio_checkpoint() -> None:
    await asyncio.sleep(0)


#: The EventLoop of each run (AnyIO's run-local variable: one per trio run or asyncio loop).
_CURRENT: Final[RunVar[EventLoop]] = RunVar("walkit_event_loop")


def current_loop() -> EventLoop:
    """The EventLoop of the running trio run or asyncio loop (sniffio decides which)."""
    try:
        library = sniffio.current_async_library()
    except sniffio.AsyncLibraryNotFoundError:
        raise WrongEventLoopError(
            "walkit's async API needs a running trio or asyncio event loop (use walkit.sync "
            "from plain threads)"
        ) from None
    if library not in ("trio", "asyncio"):
        raise WrongEventLoopError(f"walkit runs on trio or asyncio, not on {library}")
    try:
        return _CURRENT.get()
    except LookupError:
        loop: EventLoop = TrioLoop() if library == "trio" else AsyncioLoop()
        _CURRENT.set(loop)
        return loop


#: What a cancellation raises, under trio and under asyncio (uvloop's too).
_CANCELLED: Final = (trio.Cancelled, asyncio.CancelledError)


def is_cancellation(exc: BaseException) -> bool:
    """Whether ``exc`` is a cancellation of either backend, not an error. Unlike AnyIO's
    ``get_cancelled_exc_class()`` it needs no running loop: a task group's errors are sorted
    after the group has ended."""
    return isinstance(exc, _CANCELLED)


#: The event loops a walkit process can run on (the bookie's ``--event-loop`` choices).
EVENT_LOOPS: Final = ("auto", "asyncio", "uvloop", "trio")
EventLoopName = Literal["auto", "asyncio", "uvloop", "trio"]


def uvloop_available() -> bool:
    """Whether uvloop is installed here (it is not built for every platform)."""
    return importlib.util.find_spec("uvloop") is not None


def event_loop_name() -> str:
    """The running loop by its ``EVENT_LOOPS`` name, "trio", "asyncio" or "uvloop" (for logs)."""
    library = sniffio.current_async_library()
    if library == "asyncio" and type(asyncio.get_running_loop()).__module__.startswith("uvloop"):
        return "uvloop"
    return library


def resolve(event_loop: EventLoopName | str) -> str:
    """The loop ``event_loop`` names, ``auto`` resolved: asyncio with uvloop when uvloop is
    installed, else plain asyncio (uvloop spends less CPU per task switch and per socket
    call). Raises ConfigurationError for ``uvloop`` when it is not installed, and for a name
    not in :data:`EVENT_LOOPS`."""
    if event_loop == "auto":
        return "uvloop" if uvloop_available() else "asyncio"
    if event_loop == "uvloop" and not uvloop_available():
        raise ConfigurationError(
            "uvloop is not installed here (pip install 'walkit[bookie]'), or choose asyncio"
        )
    if event_loop not in EVENT_LOOPS:
        raise ConfigurationError(
            f"unknown event loop {event_loop!r}; choose one of {', '.join(EVENT_LOOPS)}"
        )
    return event_loop


def anyio_backend(event_loop: EventLoopName | str = "auto") -> tuple[str, dict[str, Any]]:
    """AnyIO's backend name and options for the loop :func:`resolve` makes of ``event_loop``
    (for ``anyio.run`` and ``start_blocking_portal`` alike)."""
    loop = resolve(event_loop)
    if loop == "uvloop":
        import uvloop

        return "asyncio", {"loop_factory": uvloop.new_event_loop}
    return loop, {}


def run(
    fn: Callable[[Unpack[Args]], Awaitable[T]],
    *args: *Args,
    event_loop: EventLoopName | str = "auto",
) -> T:
    """``anyio.run(fn, *args)`` on the loop :func:`resolve` makes of ``event_loop``."""
    backend, options = anyio_backend(event_loop)
    return anyio.run(fn, *args, backend=backend, backend_options=options)


@final
class ParkingLot:
    """Tasks waiting for one condition, woken all at once (trio's ParkingLot, on any loop):
    :meth:`park` waits until :meth:`unpark_all`. No object per wait beyond the loop's handle;
    true while a task waits."""

    __slots__ = ("_loop", "_waiters")

    def __init__(self) -> None:
        self._waiters: list[Any] = []
        self._loop: EventLoop | None = None

    def __bool__(self) -> bool:
        return bool(self._waiters)

    def __len__(self) -> int:
        return len(self._waiters)

    async def park(self) -> None:
        """Wait until :meth:`unpark_all` (a cancellation point)."""
        self._loop = loop = current_loop()
        await loop.park(self._waiters)

    def unpark_all(self) -> None:
        """Wake every task parked now."""
        waiters = self._waiters
        if waiters:
            assert self._loop is not None
            self._waiters = []
            wake = self._loop.wake
            for handle in waiters:
                wake(handle)
