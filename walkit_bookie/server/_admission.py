"""Admission: which request is taken and who gets a connection slot.

Requests (:class:`RequestAdmission`): a connection may have ``max_requests_per_connection`` in
flight and the bookie ``max_long_polls`` waiting; past them a request is answered
TOO_MANY_REQUESTS. Past the in-flight adds, add bytes or reads the bookie is ``saturated``:
connections stop reading their sockets and park in ``capacity`` until answers free room.

Connections (:func:`handle_stream`): at ``max_connections`` (or an address's
``max_connections_per_address``) a newcomer closes an idle connection (``idle_victim``) or is
refused with a clear answer; peers' addresses for log lines and per-address counts.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, final

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from walkit._core.wire import (
    ErrorResponse,
    Message,
    ReadLacFlag,
    ReadLacRequest,
    StatusCode,
    encode_frame,
    peek_request_id,
)
from walkit.shared import ParkingLot, get_logger
from walkit_bookie._config import BookieConfig
from walkit_bookie.server._connection import Connection, RequestHandler
from walkit_bookie.server._linger import BROKEN, linger
from walkit_bookie.server._peer import Peer
from walkit_bookie.server._refusals import HEADER_END, REFUSE_DRAIN
from walkit_bookie.server._stats import BookieStats

log = get_logger(__name__)

#: Seconds a connection over ``max_connections`` may take to send its first request (which
#: is answered TOO_MANY_REQUESTS) before it is closed.
_REFUSE_WAIT = 1.0
#: At max_connections, a connection whose frame has been arriving this long may be evicted.
_SLOW_FRAME = 2.0


@final
class RequestAdmission:
    """Which requests are taken, and when the bookie has room for more (see the module)."""

    def __init__(self, config: BookieConfig, stats: BookieStats) -> None:
        self._config = config
        self._stats = stats
        #: Connections that stopped reading while the bookie was saturated.
        self.capacity = ParkingLot()

    def refusal(self, conn: Peer, message: Message) -> str | None:
        """Why ``message`` is answered TOO_MANY_REQUESTS now, or None: it is taken."""
        config = self._config
        if conn.outstanding >= config.max_requests_per_connection:
            return (
                f"too many requests in flight on this connection "
                f"(limit {config.max_requests_per_connection})"
            )
        if (
            type(message) is ReadLacRequest
            and message.flags & ReadLacFlag.LONG_POLL
            and self._stats.long_polls >= config.max_long_polls
        ):
            return f"too many long polls waiting (limit {config.max_long_polls})"
        return None

    def refuse(self, conn: Peer, message: Message, why: str) -> None:
        self._stats.requests_refused += 1
        conn.send(
            encode_frame(ErrorResponse(message.request_id, StatusCode.TOO_MANY_REQUESTS, why))
        )

    @property
    def saturated(self) -> bool:
        """At the in-flight limits of adds, add bytes or reads: sockets are not read."""
        config, stats = self._config, self._stats
        return (
            stats.adds_in_flight >= config.max_inflight_adds
            or stats.add_bytes_in_flight >= config.max_inflight_add_bytes
            or stats.reads_in_flight >= config.max_inflight_reads
        )

    def freed(self) -> None:
        """An answer went: wake the connections parked for room, if there is room now."""
        if self.capacity and not self.saturated:
            self.capacity.unpark_all()

    @property
    def degraded(self) -> list[str]:
        """Which request queues are full now (empty when none is): what ``/health`` says."""
        config, stats = self._config, self._stats
        full = []
        if (
            stats.adds_in_flight >= config.max_inflight_adds
            or stats.add_bytes_in_flight >= config.max_inflight_add_bytes
        ):
            full.append("adds")
        if stats.reads_in_flight >= config.max_inflight_reads:
            full.append("reads")
        if stats.long_polls >= config.max_long_polls:
            full.append("long_polls")
        if stats.connections >= config.max_connections:
            full.append("connections")
        return full


def idle_victim(
    connections: Iterable[Connection], now: float, evict_idle_after: float
) -> Connection | None:
    """The connection a newcomer may close when ``max_connections`` are open, of those with
    nothing in flight or queued: the oldest that never sent a whole request, else the one idle
    longest (at least ``evict_idle_after`` s), else the one whose frame has been arriving
    longest (at least ``_SLOW_FRAME`` s); None if there is none. A peer closed while idle
    loses nothing (a walkit client reconnects on its next request)."""
    best: Connection | None = None
    best_key = (3, 0.0)
    for conn in connections:
        if conn.closed or conn.outstanding or conn.unsent:
            continue
        if not conn.spoke:
            key = (0, conn.opened)
        elif not conn.partial:
            if now - conn.last_active < evict_idle_after:
                continue
            key = (1, conn.last_active)
        elif now - conn.frame_since >= _SLOW_FRAME:
            key = (2, conn.frame_since)
        else:
            continue
        if key < best_key:
            best, best_key = conn, key
    return best


class Ready(Protocol):
    """Set once the bookie serves requests (an ``anyio.Event``)."""

    async def wait(self) -> None: ...


def _peer(stream: anyio.abc.ByteStream) -> tuple[str, str]:
    """The peer as ``host:port`` (for log lines) and its host alone ("" if unknown)."""
    try:
        address = stream.extra(SocketAttribute.remote_address, None)  # (TLS: of the socket)
    except OSError:
        return "?", ""
    if address is None:
        return type(stream).__name__, ""
    if isinstance(address, tuple):
        return f"{address[0]}:{address[1]}", str(address[0])
    return str(address), str(address)


async def handle_stream(
    handler: RequestHandler, ready: Ready, stream: anyio.abc.ByteStream
) -> None:
    """Serve one connection until it closes; never raise (other connections go on)."""
    peer, address = _peer(stream)
    try:
        await ready.wait()
        config = handler.config
        per_address = config.max_connections_per_address
        if per_address is not None and handler.connections_by_address.get(address, 0) >= (
            per_address
        ):
            # This address's own idle connections make room; never another address's.
            victim = idle_victim(
                (c for c in handler.client_connections if c.address == address),
                anyio.current_time(),
                config.evict_idle_after,
            )
            if victim is None:
                why = f"too many connections from {address} to this bookie (limit {per_address})"
                await _refuse_connection(handler, stream, peer, why)
                return
            victim.evict()
        if handler.stats.connections >= config.max_connections:
            victim = idle_victim(
                handler.client_connections, anyio.current_time(), config.evict_idle_after
            )
            if victim is None:
                why = f"too many connections to this bookie (limit {config.max_connections})"
                await _refuse_connection(handler, stream, peer, why)
                return
            victim.evict()
        # Counted in serve() before any checkpoint.
        conn = Connection(handler, stream, peer, address)
        await conn.serve()
    except Exception as exc:  # a broken connection must not stop the bookie
        if _only_broken(exc):
            log.debug("connection_broken", peer=peer)
        else:
            log.exception("connection_failed", peer=peer)
    finally:
        await anyio.aclose_forcefully(stream)


async def _refuse_connection(
    handler: RequestHandler, stream: anyio.abc.ByteStream, peer: str, why: str
) -> None:
    """Over ``max_connections`` (or the address's share): answer the first request
    TOO_MANY_REQUESTS with ``why`` (so the client sees a clear error, not a hang or a bare
    reset), then close."""
    handler.stats.connections_refused += 1
    handler.bad_input.report("too_many_connections", peer=peer, error=why)
    head = b""
    with anyio.move_on_after(_REFUSE_WAIT):
        while len(head) < HEADER_END:
            try:
                head += await stream.receive(HEADER_END - len(head))
            except anyio.EndOfStream:
                return
    request_id = peek_request_id(head[4:HEADER_END]) if len(head) >= HEADER_END else None
    frame = encode_frame(ErrorResponse(request_id or 0, StatusCode.TOO_MANY_REQUESTS, why))
    with anyio.move_on_after(_REFUSE_WAIT):
        await stream.send(frame)
    await linger(stream, grace=_REFUSE_WAIT, limit=REFUSE_DRAIN)


def _only_broken(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_broken(e) for e in exc.exceptions)
    return isinstance(exc, BROKEN)
