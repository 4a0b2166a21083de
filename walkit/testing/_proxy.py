"""A TCP fault proxy between real processes (Toxiproxy's model), for faults the kernel here
cannot make: delay and jitter (no ``sch_netem``), bandwidth caps, half-open stalls, resets.

::

    with FaultProxy(("127.0.0.1", 3181), listen=("127.0.0.2", 3181),
                    rng=random.Random(7)) as proxy:
        proxy.delay(0.2, jitter=0.05)                 # both ways: 200-250 ms per chunk
        proxy.limit_bandwidth(64_000, direction="downstream")
        proxy.stall()                                 # bytes accepted, never delivered
        proxy.reset()                                 # every open connection gets a RST
        proxy.heal()

Clients connect to ``proxy.address``; the proxy connects each to ``upstream``. Directions are
Toxiproxy's: ``upstream`` is what the client sends, ``downstream`` what it receives.

The proxy runs ``trio.run`` in a thread of its own, so it forwards while the test's own event
loop is busy or blocked (a test that starts a process and waits for its output, say), and it
serves trio, asyncio and plain threaded tests alike. Its methods may be called from any thread
while traffic flows; when one returns, its faults apply to every byte the proxy has not yet
handed to a socket, on every connection, open or new.

- Delay: each chunk read is held until ``delay + U(0, jitter)`` seconds after it was read (the
  jitter drawn from the injected ``random.Random`` when it is read, as in
  :class:`~walkit.testing.SimNetwork`; the delay the one in force), never overtaking the
  chunk before it: TCP is a byte stream.
- Bandwidth: each direction of each connection sends at most that many bytes per second.
- Stall: bytes are read (the sender sees its writes succeed) and dropped, EOF included: a
  half-open connection. A connection that lost bytes this way can never carry its protocol
  again, so :meth:`heal` resets it; connections that lost nothing go on.
- Reset: open connections are closed with a RST (``SO_LINGER`` 0) on both sides.

Memory is bounded: each direction of a connection holds at most ``max_buffered`` bytes, and
stops reading its source beyond that, so a slow receiver slows its sender, as TCP does.
"""

from __future__ import annotations

import functools
import random
import socket
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, Final, Literal, final

import attrs
import trio

from walkit._logging import get_logger
from walkit.errors import InvalidArgumentError

log = get_logger(__name__)

__all__ = ["Direction", "FaultProxy"]

Direction = Literal["upstream", "downstream", "both"]
_DIRECTIONS: Final = ("upstream", "downstream")
_CHUNK: Final = 65536
#: ``struct linger {int l_onoff = 1; int l_linger = 0;}``: close with a RST at once.
_LINGER_NOW: Final = (1).to_bytes(4, sys.byteorder) + (0).to_bytes(4, sys.byteorder)
#: How long a method called from another thread waits for the proxy's loop to act.
_CONTROL_TIMEOUT: Final = 10.0


@final
@attrs.frozen
class _Faults:
    """The faults of one direction (replaced whole: a chunk sees one consistent set)."""

    delay: float = 0.0
    jitter: float = 0.0
    bandwidth: float | None = None  # bytes per second
    stalled: bool = False


@final
class _Connection:
    """One proxied connection: its two streams and the scope that ends it."""

    def __init__(self, client: trio.SocketStream) -> None:
        self.client = client
        self.server: trio.SocketStream | None = None
        self.scope = trio.CancelScope()
        #: Bytes were dropped while stalled: the protocol on it cannot go on.
        self.damaged = False
        self.eofs = 0

    def reset(self) -> None:
        """Close both sides with a RST, now."""
        for stream in (self.client, self.server):
            if stream is not None:
                try:
                    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_NOW)
                except OSError:
                    pass  # already closed
        self.scope.cancel()


def _directions(direction: Direction) -> tuple[str, ...]:
    if direction == "both":
        return _DIRECTIONS
    if direction not in _DIRECTIONS:
        raise InvalidArgumentError(
            f"direction must be 'upstream', 'downstream' or 'both', not {direction!r}"
        )
    return (direction,)


def _seconds(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 86400:
        raise InvalidArgumentError(f"{name} must be seconds >= 0, not {value!r}")
    return float(value)


@final
class FaultProxy:
    """A TCP proxy from ``listen`` to ``upstream`` that adds faults on command (see the
    module). ``start()`` (or ``with``) runs it; ``close()`` stops it and closes every
    connection. ``rng`` draws the jitter; ``clock`` is the proxy's trio clock (real time when
    None: it sits between real processes)."""

    def __init__(
        self,
        upstream: tuple[str, int],
        *,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        rng: random.Random,
        max_buffered: int = 4 << 20,
        clock: trio.abc.Clock | None = None,
        name: str = "proxy",
    ) -> None:
        self.upstream = (str(upstream[0]), int(upstream[1]))
        self._listen = (str(listen[0]), int(listen[1]))
        self._rng = rng
        self._max_buffered = max_buffered
        self._clock = clock
        self.name = name
        self._faults = {d: _Faults() for d in _DIRECTIONS}
        self._lock = threading.Lock()
        self._connections: set[_Connection] = set()
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.CancelScope | None = None
        self._thread: threading.Thread | None = None
        self._bound: tuple[str, int] | None = None
        self._failure: BaseException | None = None
        self._changed: trio.Event  # (made in the proxy's loop)
        #: Connections accepted so far; bytes delivered and dropped (stalled), per direction.
        self.accepted = 0
        self.delivered = dict.fromkeys(_DIRECTIONS, 0)
        self.dropped = dict.fromkeys(_DIRECTIONS, 0)

    # --- life -----------------------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Listen and forward (in a thread); returns once listening."""
        if self._thread is not None:
            raise InvalidArgumentError(f"{self.name} was started already")
        listening = threading.Event()
        self._thread = threading.Thread(
            target=self._main, args=(listening,), name=f"walkit-{self.name}", daemon=True
        )
        self._thread.start()
        listening.wait()
        if self._failure is not None:
            self._thread.join()
            raise self._failure
        return self

    def close(self) -> None:
        """Stop: every connection is closed, the listener too."""
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        self._in_loop(lambda: self._stop.cancel() if self._stop is not None else None)
        thread.join(_CONTROL_TIMEOUT)

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def address(self) -> tuple[str, int]:
        """Where clients connect (the port bound, when ``listen`` asked for 0)."""
        if self._bound is None:
            raise InvalidArgumentError(f"{self.name} is not started")
        return self._bound

    @property
    def open_connections(self) -> int:
        return len(self._connections)

    # --- faults ---------------------------------------------------------------------------

    def delay(self, seconds: float, *, jitter: float = 0.0, direction: Direction = "both") -> None:
        """Hold each chunk ``seconds + U(0, jitter)`` before delivering it."""
        self._set(direction, delay=_seconds("delay", seconds), jitter=_seconds("jitter", jitter))

    def limit_bandwidth(
        self, bytes_per_second: float | None, *, direction: Direction = "both"
    ) -> None:
        """Deliver at most this many bytes per second per connection (None: no cap)."""
        if bytes_per_second is not None and (
            isinstance(bytes_per_second, bool)
            or not isinstance(bytes_per_second, int | float)
            or not bytes_per_second > 0
        ):
            raise InvalidArgumentError(
                f"bandwidth must be > 0 bytes/s or None, not {bytes_per_second!r}"
            )
        self._set(
            direction, bandwidth=None if bytes_per_second is None else float(bytes_per_second)
        )

    def stall(self, *, direction: Direction = "both") -> None:
        """Accept bytes and never deliver them (a half-open connection); :meth:`heal` ends it
        and resets the connections that lost bytes."""
        self._set(direction, stalled=True)

    def reset(self) -> None:
        """Reset (RST) every open connection now; new ones are taken as before."""
        self._in_loop(self._reset_all)

    def heal(self) -> None:
        """Remove every fault; reset the connections that lost bytes to a stall."""
        with self._lock:
            self._faults = {d: _Faults() for d in _DIRECTIONS}
        self._in_loop(self._faults_changed)
        self._in_loop(self._reset_damaged)
        log.info("proxy_healed", proxy=self.name)

    def _set(self, direction: Direction, **changes: Any) -> None:
        with self._lock:
            for d in _directions(direction):
                self._faults[d] = attrs.evolve(self._faults[d], **changes)
        self._in_loop(self._faults_changed)
        log.info("proxy_fault", proxy=self.name, direction=direction, **changes)

    def _in_loop(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` in the proxy's loop and wait until it has run (from any thread)."""
        token = self._token
        if token is None:
            return
        done = threading.Event()

        def run() -> None:
            try:
                fn()
            finally:
                done.set()

        try:
            token.run_sync_soon(run)
        except trio.RunFinishedError:
            return
        done.wait(_CONTROL_TIMEOUT)

    def _faults_changed(self) -> None:
        """Wake the chunks waiting to be due: their due time may have changed."""
        changed, self._changed = self._changed, trio.Event()
        changed.set()

    def _reset_all(self) -> None:
        for conn in list(self._connections):
            conn.reset()

    def _reset_damaged(self) -> None:
        for conn in list(self._connections):
            if conn.damaged:
                conn.reset()

    # --- the proxy's thread ---------------------------------------------------------------

    def _main(self, listening: threading.Event) -> None:
        try:
            trio.run(self._serve, listening, clock=self._clock)
        except BaseException as exc:  # reported by start() (a bind error, say)
            self._failure = exc
            if not listening.is_set():
                listening.set()
            else:
                log.error("proxy_failed", proxy=self.name, error=repr(exc))
        finally:
            self._token = None

    async def _serve(self, listening: threading.Event) -> None:
        listeners = await trio.open_tcp_listeners(self._listen[1], host=self._listen[0])
        host, port = listeners[0].socket.getsockname()[:2]
        self._bound = (str(host), int(port))
        self._changed = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        with trio.CancelScope() as self._stop:
            async with trio.open_nursery() as nursery:
                await nursery.start(
                    functools.partial(trio.serve_listeners, self._connection, listeners)
                )
                log.info(
                    "proxy_listening", proxy=self.name, address=self._bound, upstream=self.upstream
                )
                listening.set()
        for conn in list(self._connections):
            conn.reset()

    async def _connection(self, client: trio.SocketStream) -> None:
        self.accepted += 1
        conn = _Connection(client)
        self._connections.add(conn)
        try:
            with conn.scope:
                try:
                    conn.server = await trio.open_tcp_stream(*self.upstream)
                except OSError as exc:
                    log.info("proxy_upstream_refused", proxy=self.name, error=str(exc))
                    conn.reset()  # as the server would have: refused
                    return
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._pump, conn, client, conn.server, "upstream")
                    nursery.start_soon(self._pump, conn, conn.server, client, "downstream")
        finally:
            self._connections.discard(conn)
            for stream in (client, conn.server):
                if stream is not None:
                    await trio.aclose_forcefully(stream)

    async def _pump(
        self, conn: _Connection, source: trio.SocketStream, sink: trio.SocketStream, direction: str
    ) -> None:
        """Move ``direction``'s bytes: a reader stamps each chunk with when it is due, a
        sender delivers it then, at the allowed rate."""
        queue: deque[_Chunk] = deque()
        state = _PipeState()
        broken = False
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._read, conn, source, direction, queue, state)
                nursery.start_soon(self._send, conn, sink, direction, queue, state)
        except* (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            broken = True
        if broken:
            conn.reset()  # one side broke: the other sees a reset, as through a dead host
            return
        conn.eofs += 1
        if conn.eofs == 2:  # both directions ended cleanly: done
            conn.scope.cancel()

    async def _read(
        self,
        conn: _Connection,
        source: trio.SocketStream,
        direction: str,
        queue: deque[_Chunk],
        state: _PipeState,
    ) -> None:
        while True:
            while state.buffered >= self._max_buffered:
                await state.wait_room()
            data = await source.receive_some(_CHUNK)
            faults = self._faults[direction]
            if faults.stalled:  # accepted, never delivered (an EOF neither)
                self._drop(conn, direction, len(data))
                if not data:
                    await trio.sleep_forever()
                continue
            jitter = self._rng.uniform(0.0, faults.jitter) if faults.jitter else 0.0
            queue.append(_Chunk(trio.current_time(), jitter, bytes(data)))
            state.buffered += len(data)
            state.wake_sender()
            if not data:
                return

    def _drop(self, conn: _Connection, direction: str, size: int) -> None:
        self.dropped[direction] += size
        conn.damaged = True

    async def _send(
        self,
        conn: _Connection,
        sink: trio.SocketStream,
        direction: str,
        queue: deque[_Chunk],
        state: _PipeState,
    ) -> None:
        while True:
            while not queue:
                await state.wait_data()
            chunk = queue[0]
            # Due by the faults of the moment: a fault set while a chunk waits here applies
            # to it too (chunks go out in order whatever their jitter).
            while True:
                faults = self._faults[direction]
                due = chunk.read_at + faults.delay + chunk.jitter
                if faults.stalled or trio.current_time() >= due:
                    break
                changed = self._changed
                with trio.move_on_at(due):
                    await changed.wait()
            if faults.stalled:
                queue.popleft()
                state.buffered -= len(chunk.data)
                state.wake_reader()
                self._drop(conn, direction, len(chunk.data))
                if not chunk.data:
                    await trio.sleep_forever()
                continue
            if not chunk.data:
                queue.popleft()
                await sink.send_eof()
                return
            rate = faults.bandwidth
            data = chunk.data
            piece = data if rate is None else data[: max(1, int(rate / 20))]  # 50 ms at a time
            # Counted when handed to the socket: once a fault method has returned, no byte
            # the proxy still held is delivered but by the new faults.
            self.delivered[direction] += len(piece)
            await sink.send_all(piece)
            if len(piece) == len(data):
                queue.popleft()
            else:
                chunk.data = data[len(piece) :]
            state.buffered -= len(piece)
            state.wake_reader()
            if rate is not None:
                await trio.sleep(len(piece) / rate)


@final
class _Chunk:
    """Bytes read from one side: when, and the jitter drawn for them."""

    __slots__ = ("data", "jitter", "read_at")

    def __init__(self, read_at: float, jitter: float, data: bytes) -> None:
        self.read_at = read_at
        self.jitter = jitter
        self.data = data


@final
class _PipeState:
    """What one direction's reader and sender share: bytes held, and their wake-ups."""

    def __init__(self) -> None:
        self.buffered = 0
        self._data = trio.Event()
        self._room = trio.Event()

    def wake_sender(self) -> None:
        self._data.set()

    def wake_reader(self) -> None:
        self._room.set()

    async def wait_data(self) -> None:
        await self._data.wait()
        self._data = trio.Event()

    async def wait_room(self) -> None:
        await self._room.wait()
        self._room = trio.Event()
