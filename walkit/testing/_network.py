"""A simulated network behind the :class:`walkit.net.Network` seam, with faults.

Every endpoint is a *node*, named by a string: a bookie's node is the name of the
:meth:`SimNetwork.node` view it serves on (or its host when it serves on the network itself); a
client's node is the name of the view it connects through (``default_node`` for the network
itself). Faults are set between nodes and can change at any moment of a run:

- delay with jitter per directed link (chunks stay in order, as on TCP),
- stall: a directed link holds its data until healed,
- pause: every link into and out of a node holds its data (a stopped process),
- partitions between two sets of nodes (data is held, new connects time out; optionally reset),
- refused connects (always, or with a probability), and connection resets (now, or with a
  probability per send).

All randomness (jitter, probabilities) comes from one ``random.Random``; all time is trio's clock,
so under ``trio.testing.MockClock(autojump_threshold=0)`` delays cost no real time.
"""

from __future__ import annotations

import errno
import math
import random
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import Final, Self, final

import anyio
import anyio.abc
import attrs
import trio

from walkit._core.types import BookieId
from walkit._logging import get_logger
from walkit.errors import BookieUnavailableError, InvalidArgumentError
from walkit.net import StreamHandler

log = get_logger(__name__)

#: First port handed out to a ``serve(host, 0, ...)`` on each host.
FIRST_PORT: Final = 3181


@attrs.define
class LinkFaults:
    """Options of one directed link (or of a default that covers many links)."""

    delay: float = 0.0
    jitter: float = 0.0
    reset_probability: float = 0.0
    refuse_probability: float = 0.0


@attrs.frozen
class _Partition:
    side_a: frozenset[str]
    #: None means "every node not in side_a" (an isolated node).
    side_b: frozenset[str] | None

    def separates(self, src: str, dst: str) -> bool:
        if self.side_b is None:
            return (src in self.side_a) != (dst in self.side_a)
        return (src in self.side_a and dst in self.side_b) or (
            src in self.side_b and dst in self.side_a
        )

    def involves(self, node: str) -> bool:
        return node in self.side_a or self.side_b is None or node in self.side_b


def _nodes(side: str | Iterable[str]) -> frozenset[str]:
    if isinstance(side, str):
        return frozenset((side,))
    nodes = frozenset(side)
    if not all(isinstance(n, str) for n in nodes):
        raise InvalidArgumentError("node names must be strings")
    return nodes


def _check_probability(p: float) -> None:
    if not 0.0 <= p <= 1.0:
        raise InvalidArgumentError(f"probability must be within [0, 1], not {p!r}")


class _Pipe:
    """One direction of a connection: chunks with the time they become deliverable."""

    __slots__ = ("broken", "chunks", "dst", "eof", "event", "last_at", "receiver_closed", "src")

    def __init__(self, src: str, dst: str) -> None:
        self.src = src
        self.dst = dst
        self.chunks: deque[tuple[float, bytes]] = deque()
        self.last_at = -math.inf
        self.eof = False
        self.broken = False
        self.receiver_closed = False
        self.event = trio.Event()

    def notify(self) -> None:
        self.event.set()
        self.event = trio.Event()


@final
class _Connection:
    __slots__ = ("client_node", "down", "listener", "server_node", "up")

    def __init__(self, client_node: str, server_node: str, listener: _Listener) -> None:
        self.client_node = client_node
        self.server_node = server_node
        self.listener = listener
        self.up = _Pipe(client_node, server_node)
        self.down = _Pipe(server_node, client_node)

    def involves(self, a: str, b: str | None) -> bool:
        ends = (self.client_node, self.server_node)
        if b is None:
            return a in ends
        return {a, b} == set(ends) or (a == b and a in ends)

    def reset(self) -> None:
        for pipe in (self.up, self.down):
            pipe.broken = True
            pipe.chunks.clear()
            pipe.notify()


@final
class SimStream(anyio.abc.ByteStream, trio.abc.Stream):
    """One end of a simulated connection: an AnyIO byte stream (``receive``, ``send``), and a
    trio stream too (``receive_some``, ``send_all``, raising trio's errors) for simulations
    written against trio's API."""

    def __init__(self, network: SimNetwork, conn: _Connection, send: _Pipe, receive: _Pipe) -> None:
        self._network = network
        self._conn = conn
        self._send = send
        self._receive = receive
        self._closed = False
        self._sending = False
        self._receiving = False

    @property
    def local_node(self) -> str:
        return self._send.src

    @property
    def remote_node(self) -> str:
        return self._send.dst

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if self._sending:
            raise trio.BusyResourceError("another task is already sending on this stream")
        self._sending = True
        try:
            await trio.lowlevel.checkpoint()
            if self._closed:
                raise trio.ClosedResourceError("stream was closed")
            pipe = self._send
            if pipe.broken or pipe.receiver_closed:
                raise trio.BrokenResourceError("connection reset by peer")
            if not data:
                return
            faults = self._network.link(pipe.src, pipe.dst)
            rng = self._network.rng
            if faults.reset_probability and rng.random() < faults.reset_probability:
                self._network._record("reset (random)", pipe.src, pipe.dst)
                self._network._drop(self._conn)
                raise trio.BrokenResourceError("connection reset (simulated)")
            at = trio.current_time() + self._network._latency(faults)
            at = max(at, pipe.last_at)  # in order, as on TCP
            pipe.last_at = at
            pipe.chunks.append((at, bytes(data)))
            pipe.notify()
        finally:
            self._sending = False

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()
        if self._closed:
            raise trio.ClosedResourceError("stream was closed")

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if max_bytes is not None and max_bytes < 1:
            raise ValueError("max_bytes must be >= 1")
        if self._receiving:
            raise trio.BusyResourceError("another task is already receiving on this stream")
        self._receiving = True
        try:
            await trio.lowlevel.checkpoint()
            pipe = self._receive
            while True:
                if self._closed:
                    raise trio.ClosedResourceError("stream was closed")
                if pipe.broken:
                    raise trio.BrokenResourceError("connection reset by peer")
                deadline = math.inf
                if not self._network.holds(pipe.src, pipe.dst):
                    if pipe.chunks:
                        at, data = pipe.chunks[0]
                        if at <= trio.current_time():
                            if max_bytes is not None and len(data) > max_bytes:
                                pipe.chunks[0] = (at, data[max_bytes:])
                                return data[:max_bytes]
                            pipe.chunks.popleft()
                            return data
                        deadline = at
                    elif pipe.eof:
                        return b""
                event = pipe.event
                with trio.move_on_at(deadline):
                    await event.wait()
        finally:
            self._receiving = False

    async def send_eof(self) -> None:
        """No more data from this end (the other end then receives b"")."""
        await trio.lowlevel.checkpoint()
        if self._closed:
            raise trio.ClosedResourceError("stream was closed")
        self._send.eof = True
        self._send.notify()

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._send.eof = True
            self._send.notify()
            self._receive.receiver_closed = True
            self._receive.chunks.clear()
            self._receive.notify()
            self._network._maybe_forget(self._conn)
        await trio.lowlevel.checkpoint()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> bytes:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def receive(self, max_bytes: int = 65536) -> bytes:
        try:
            data = await self.receive_some(max_bytes)
        except trio.ClosedResourceError:
            raise anyio.ClosedResourceError from None
        except trio.BrokenResourceError as exc:
            raise anyio.BrokenResourceError(str(exc)) from None
        except trio.BusyResourceError:
            raise anyio.BusyResourceError("receiving from") from None
        if not data:
            raise anyio.EndOfStream
        return data

    async def send(self, item: bytes | bytearray | memoryview) -> None:
        try:
            await self.send_all(item)
        except trio.ClosedResourceError:
            raise anyio.ClosedResourceError from None
        except trio.BrokenResourceError as exc:
            raise anyio.BrokenResourceError(str(exc)) from None
        except trio.BusyResourceError:
            raise anyio.BusyResourceError("sending to") from None


@final
class SimClientStream(anyio.abc.ByteStream):
    """A client's end of a simulated connection (a :class:`SimStream`, as an AnyIO byte
    stream)."""

    def __init__(self, stream: SimStream) -> None:
        self.stream = stream

    @property
    def local_node(self) -> str:
        return self.stream.local_node

    @property
    def remote_node(self) -> str:
        return self.stream.remote_node

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self.stream.receive(max_bytes)

    async def send(self, item: bytes | bytearray | memoryview) -> None:
        await self.stream.send(item)

    async def send_eof(self) -> None:
        await self.stream.send_eof()

    async def aclose(self) -> None:
        await self.stream.aclose()


#: What a simulated server runs per connection: a :class:`~walkit.net.StreamHandler`, or a
#: handler written against trio's stream API (a SimStream is both).
SimHandler = StreamHandler | Callable[[SimStream], Awaitable[None]]
#: A simulated server reports its address to AnyIO's task groups or trio's nurseries.
_TaskStatus = anyio.abc.TaskStatus[BookieId] | trio.TaskStatus[BookieId]


async def _run_handler(handler: SimHandler, stream: SimStream) -> None:
    # As TcpNetwork.serve: the stream is closed when its handler returns.
    try:
        await handler(stream)
    finally:
        await anyio.aclose_forcefully(stream)


@final
class _Listener:
    __slots__ = ("address", "connections", "handler", "node", "nursery")

    def __init__(
        self, address: BookieId, node: str, handler: SimHandler, nursery: trio.Nursery
    ) -> None:
        self.address = address
        self.node = node
        self.handler = handler
        self.nursery = nursery
        self.connections: set[_Connection] = set()


@final
class SimNode:
    """A :class:`walkit.net.Network` seen from one node: what a client or a bookie is given."""

    def __init__(self, network: SimNetwork, name: str) -> None:
        self.network = network
        self.name = name

    def __repr__(self) -> str:
        return f"<SimNode {self.name!r}>"

    async def connect(self, address: BookieId) -> SimClientStream:
        return SimClientStream(await self.network._connect(self.name, address))

    async def serve(
        self,
        host: str,
        port: int,
        handler: SimHandler,
        *,
        task_status: _TaskStatus = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        await self.network._serve(self.name, host, port, handler, task_status=task_status)


@final
class SimNetwork:
    """In-memory network with faults, driven by one seeded ``random.Random``.

    The network itself is also a :class:`walkit.net.Network`: it connects as ``default_node``
    and serves as the node named after the host. Use :meth:`node` to give each client and bookie
    its own name.
    """

    def __init__(
        self,
        seed: int | None = None,
        *,
        rng: random.Random | None = None,
        default_node: str = "client",
        connect_timeout: float = 5.0,
    ) -> None:
        if rng is not None and seed is not None:
            raise InvalidArgumentError("give either seed or rng, not both")
        self.rng = rng if rng is not None else random.Random(seed)
        self.default_node = default_node
        self.connect_timeout = connect_timeout
        #: (time, event, src, dst) of every fault change, for failure messages.
        self.fault_log: list[tuple[float, str, str, str]] = []
        self._links: dict[tuple[str | None, str | None], LinkFaults] = {}
        self._stalls: set[tuple[str, str]] = set()
        self._refusals: set[tuple[str, str]] = set()
        self._partitions: list[_Partition] = []
        self._paused: set[str] = set()
        self._listeners: dict[BookieId, _Listener] = {}
        self._next_port: dict[str, int] = {}
        self._connections: set[_Connection] = set()
        self._changed = trio.Event()

    # --- the Network seam ------------------------------------------------------------------

    def node(self, name: str) -> SimNode:
        """The network as seen from node ``name`` (pass it as ``network=`` to a client or bookie)."""
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError("a node name must be a non-empty string")
        return SimNode(self, name)

    async def connect(self, address: BookieId) -> SimClientStream:
        return SimClientStream(await self._connect(self.default_node, address))

    async def serve(
        self,
        host: str,
        port: int,
        handler: SimHandler,
        *,
        task_status: _TaskStatus = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        await self._serve(host, host, port, handler, task_status=task_status)

    # --- faults ----------------------------------------------------------------------------

    def set_delay(
        self, seconds: float, *, jitter: float = 0.0, src: str | None = None, dst: str | None = None
    ) -> None:
        """Delay each chunk sent from ``src`` to ``dst`` (None: any node) by seconds + U(0, jitter)."""
        if seconds < 0 or jitter < 0:
            raise InvalidArgumentError("delay and jitter must be >= 0")
        self._update(src, dst, delay=seconds, jitter=jitter)
        self._record(f"delay {seconds}+U(0,{jitter})", src, dst)

    def set_reset_probability(
        self, probability: float, *, src: str | None = None, dst: str | None = None
    ) -> None:
        """Each send from ``src`` to ``dst`` resets its connection with this probability."""
        _check_probability(probability)
        self._update(src, dst, reset_probability=probability)
        self._record(f"reset probability {probability}", src, dst)

    def set_refuse_probability(
        self, probability: float, *, src: str | None = None, dst: str | None = None
    ) -> None:
        """Each connect from ``src`` to ``dst`` is refused with this probability."""
        _check_probability(probability)
        self._update(src, dst, refuse_probability=probability)
        self._record(f"refuse probability {probability}", src, dst)

    def link(self, src: str, dst: str) -> LinkFaults:
        """The options in force from ``src`` to ``dst`` (the most specific rule wins)."""
        for key in ((src, dst), (src, None), (None, dst), (None, None)):
            faults = self._links.get(key)
            if faults is not None:
                return faults
        return LinkFaults()

    def stall(self, src: str, dst: str) -> None:
        """Hold every chunk from ``src`` to ``dst`` until :meth:`heal`."""
        self._stalls.add((src, dst))
        self._record("stall", src, dst)
        self._fault_changed()

    def unstall(self, src: str, dst: str) -> None:
        """Undo :meth:`stall` of ``src`` to ``dst`` only (``heal`` undoes both directions)."""
        self._stalls.discard((src, dst))
        self._record("unstall", src, dst)
        self._fault_changed()

    def refuse(self, src: str, dst: str) -> None:
        """Refuse every connect from ``src`` to ``dst`` until :meth:`heal`."""
        self._refusals.add((src, dst))
        self._record("refuse", src, dst)
        self._fault_changed()

    def partition(
        self, side_a: str | Iterable[str], side_b: str | Iterable[str], *, reset: bool = False
    ) -> None:
        """Cut every link between the two sets of nodes (both directions) until :meth:`heal`.

        Data already sent is held (TCP retransmits), and new connects across the cut time out
        after ``connect_timeout``. With ``reset``, open connections across it are reset now.
        """
        a, b = _nodes(side_a), _nodes(side_b)
        if a & b:
            raise InvalidArgumentError(f"nodes on both sides of a partition: {sorted(a & b)}")
        self._add_partition(_Partition(a, b), reset)

    def isolate(self, node: str, *, reset: bool = False) -> None:
        """Partition ``node`` from every other node (including nodes that appear later)."""
        self._add_partition(_Partition(frozenset((node,)), None), reset)

    def pause(self, node: str) -> None:
        """Hold every chunk to and from ``node`` (a stopped process) until :meth:`resume`."""
        self._paused.add(node)
        self._record("pause", node, "*")
        self._fault_changed()

    def resume(self, node: str) -> None:
        self._paused.discard(node)
        self._record("resume", node, "*")
        self._fault_changed()

    def reset(self, a: str, b: str | None = None) -> int:
        """Reset the open connections between ``a`` and ``b`` (all of ``a``'s if ``b`` is None).

        Returns how many were reset.
        """
        victims = [c for c in self._connections if c.involves(a, b)]
        for conn in sorted(victims, key=lambda c: (c.client_node, c.server_node)):
            self._drop(conn)
        self._record(f"reset {len(victims)} connections", a, b or "*")
        return len(victims)

    def heal(self, a: str | None = None, b: str | None = None) -> None:
        """Undo stalls, refusals, partitions and pauses: all of them, those of node ``a``, or
        those between ``a`` and ``b`` (a partition separating them is removed as a whole)."""
        if a is None:
            self._stalls.clear()
            self._refusals.clear()
            self._partitions.clear()
            self._paused.clear()
        elif b is None:
            self._stalls = {s for s in self._stalls if a not in s}
            self._refusals = {r for r in self._refusals if a not in r}
            self._partitions = [p for p in self._partitions if not p.involves(a)]
            self._paused.discard(a)
        else:
            pair = {(a, b), (b, a)}
            self._stalls -= pair
            self._refusals -= pair
            self._partitions = [p for p in self._partitions if not p.separates(a, b)]
        self._record("heal", a or "*", b or "*")
        self._fault_changed()

    def holds(self, src: str, dst: str) -> bool:
        """Whether data from ``src`` to ``dst`` is being held right now."""
        return (
            (src, dst) in self._stalls
            or src in self._paused
            or dst in self._paused
            or self._cut(src, dst)
        )

    def note(self, what: str, src: str | None = None, dst: str | None = None) -> None:
        """Add an event of your own (say, "expire session") to :attr:`fault_log`."""
        self._record(what, src, dst)

    @property
    def listening(self) -> list[BookieId]:
        """Addresses currently served."""
        return sorted(self._listeners)

    def connection_count(self, node: str | None = None) -> int:
        return sum(1 for c in self._connections if node is None or c.involves(node, None))

    # --- internals -------------------------------------------------------------------------

    def _cut(self, src: str, dst: str) -> bool:
        return any(p.separates(src, dst) for p in self._partitions)

    def _add_partition(self, partition: _Partition, reset: bool) -> None:
        self._partitions.append(partition)
        side_b = "*" if partition.side_b is None else ",".join(sorted(partition.side_b))
        self._record(
            "partition" + (" (reset)" if reset else ""), ",".join(sorted(partition.side_a)), side_b
        )
        if reset:
            victims = [
                c for c in self._connections if partition.separates(c.client_node, c.server_node)
            ]
            for conn in sorted(victims, key=lambda c: (c.client_node, c.server_node)):
                self._drop(conn)
        self._fault_changed()

    def _update(self, src: str | None, dst: str | None, **changes: float) -> None:
        current = self._links.get((src, dst))
        base = current if current is not None else attrs.evolve(self.link(src or "", dst or ""))
        self._links[(src, dst)] = attrs.evolve(base, **changes)

    def _latency(self, faults: LinkFaults) -> float:
        if faults.jitter:
            return faults.delay + self.rng.uniform(0.0, faults.jitter)
        return faults.delay

    def _record(self, what: str, src: str | None, dst: str | None) -> None:
        try:
            now = trio.current_time()
        except RuntimeError:  # outside trio.run: faults set up front
            now = 0.0
        self.fault_log.append((now, what, src or "*", dst or "*"))
        log.debug("sim_fault", what=what, src=src, dst=dst, at=now)

    def _fault_changed(self) -> None:
        self._changed.set()
        self._changed = trio.Event()
        for conn in sorted(self._connections, key=lambda c: (c.client_node, c.server_node)):
            conn.up.notify()
            conn.down.notify()

    def _drop(self, conn: _Connection) -> None:
        conn.reset()
        self._connections.discard(conn)
        conn.listener.connections.discard(conn)

    def _maybe_forget(self, conn: _Connection) -> None:
        if (conn.up.eof or conn.up.broken) and (conn.down.eof or conn.down.broken):
            self._connections.discard(conn)
            conn.listener.connections.discard(conn)

    def _cannot_reach(self, src: str, dst: str) -> bool:
        return self._cut(src, dst) or (src, dst) in self._stalls or (dst, src) in self._stalls

    async def _connect(self, src: str, address: BookieId) -> SimStream:
        if not isinstance(address, BookieId):
            raise InvalidArgumentError(f"expected a BookieId, not {type(address).__name__}")
        listener = self._listeners.get(address)
        dst = listener.node if listener is not None else address.host
        deadline = trio.current_time() + self.connect_timeout
        while True:
            # A cut or stalled link: the handshake gets no answer until healed or timed out.
            while self._cannot_reach(src, dst):
                if trio.current_time() >= deadline:
                    raise BookieUnavailableError(f"connect to {address} from {src} timed out")
                changed = self._changed
                with trio.move_on_at(deadline):
                    await changed.wait()
            out, back = self.link(src, dst), self.link(dst, src)
            await trio.sleep(self._latency(out) + self._latency(back))  # one round trip
            if not self._cannot_reach(src, dst):  # (a cut made during the handshake)
                break
        listener = self._listeners.get(address)
        if listener is None:
            raise BookieUnavailableError(f"connect to {address} from {src}: connection refused")
        if (src, dst) in self._refusals or (
            out.refuse_probability and self.rng.random() < out.refuse_probability
        ):
            self._record("refused connect", src, dst)
            raise BookieUnavailableError(f"connect to {address} from {src}: refused (simulated)")
        conn = _Connection(src, dst, listener)
        self._connections.add(conn)
        listener.connections.add(conn)
        listener.nursery.start_soon(
            _run_handler,
            listener.handler,
            SimStream(self, conn, conn.down, conn.up),
            name=f"sim:{address}",
        )
        return SimStream(self, conn, conn.up, conn.down)

    async def _serve(
        self,
        node: str,
        host: str,
        port: int,
        handler: SimHandler,
        *,
        task_status: _TaskStatus,
    ) -> None:
        if port == 0:
            port = self._next_port.get(host, FIRST_PORT)
            while BookieId(host, port) in self._listeners:
                port += 1
            self._next_port[host] = port + 1
        address = BookieId(host, port)
        if address in self._listeners:
            raise OSError(errno.EADDRINUSE, f"port {port} on {host} is already in use")
        async with trio.open_nursery() as nursery:
            listener = _Listener(address, node, handler, nursery)
            self._listeners[address] = listener
            try:
                task_status.started(address)
                await trio.sleep_forever()
            finally:
                # The process behind this address is gone: its sockets are reset.
                del self._listeners[address]
                for conn in sorted(
                    listener.connections, key=lambda c: (c.client_node, c.server_node)
                ):
                    self._drop(conn)
                nursery.cancel_scope.cancel()
