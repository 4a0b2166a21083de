"""Connections: read frames in large chunks, hand requests to the bookie, coalesce answers.

One reader and one writer task per connection; no task per request on the add path. Answers
queued while the writer was busy (for example all the adds of one group commit) go out in one
``send_all``. Backpressure: the reader stops reading its socket while the bookie is at its
in-flight limits or while this connection has too many answers its peer has not read.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, final

import trio

from walkit._core.wire import (
    ErrorResponse,
    FrameDecoder,
    Message,
    StatusCode,
    decode_message,
    encode_frame,
    peek_request_id,
)
from walkit._logging import get_logger
from walkit.errors import FrameTooLargeError, RemoteProtocolError, UnsupportedVersionError
from walkit.net import principal_of

if TYPE_CHECKING:
    from walkit_bookie._config import BookieConfig

log = get_logger(__name__)

RECEIVE_SIZE = 1024 * 1024
_HEADER_END = 4 + 10  # length prefix + version, type, request id
_CLOSE_GRACE = 1.0  # seconds to flush answers before closing a connection


class RequestHandler(Protocol):
    """What a connection needs from the bookie."""

    config: BookieConfig
    capacity: trio.lowlevel.ParkingLot
    connections: int
    connections_opened: int

    @property
    def saturated(self) -> bool: ...

    def handle(self, conn: Connection, body: bytes, message: Message) -> None: ...


class _Close(Exception):
    """Stop reading this connection (after flushing what is queued)."""


@final
class Connection:
    """One client connection. ``send`` queues a frame; the writer task sends queued frames."""

    __slots__ = (
        "_handler",
        "_out",
        "_space",
        "_stream",
        "_unsent",
        "_wake",
        "closed",
        "nursery",
        "outstanding",
        "peer",
        "principal",
    )

    def __init__(self, handler: RequestHandler, stream: trio.abc.Stream, peer: str) -> None:
        self._handler = handler
        #: Who the client is: the subject of its verified TLS certificate, else None.
        self.principal = principal_of(stream)
        self._stream = stream
        self._out: list[bytes] = []
        self._unsent = 0
        self._wake = trio.Event()
        self._space = trio.lowlevel.ParkingLot()
        self.closed = False
        self.outstanding = 0
        self.peer = peer
        self.nursery: trio.Nursery | None = None

    def send(self, frame: bytes) -> None:
        if self.closed:
            return
        self._out.append(frame)
        self._unsent += len(frame)
        self._wake.set()

    def spawn(self, fn: object, *args: object) -> bool:
        """Run a task for this connection (long polls); False if the connection is gone."""
        if self.closed or self.nursery is None:
            return False
        self.nursery.start_soon(fn, *args)  # type: ignore[arg-type]
        return True

    async def _writer(self) -> None:
        stream = self._stream
        while True:
            if not self._out:
                await self._wake.wait()
                self._wake = trio.Event()
                continue
            out, self._out = self._out, []
            data = out[0] if len(out) == 1 else b"".join(out)
            await stream.send_all(data)
            self._unsent -= len(data)
            if self._space:
                self._space.unpark_all()

    async def _drain(self) -> None:
        # Answer what is already in flight (a peer may half-close and still read), briefly.
        with trio.move_on_after(_CLOSE_GRACE):
            while self._out or self._unsent or self.outstanding:
                with trio.move_on_after(0.05):
                    await self._space.park()

    async def _wait_for_room(self) -> None:
        """Return once this connection may take another request (backpressure point)."""
        handler = self._handler
        max_unsent = handler.config.max_unsent_bytes
        while True:
            if self._unsent >= max_unsent:
                await self._space.park()
            elif handler.saturated:
                await handler.capacity.park()
            else:
                return

    async def _reader(self) -> None:
        handler = self._handler
        config = handler.config
        decoder = FrameDecoder(config.max_frame_size)
        max_unsent = config.max_unsent_bytes
        receive = _receiver(self._stream)
        fed = 0  # bytes fed to the decoder so far
        consumed = 0  # bytes of whole frames taken out of it
        while True:
            await self._wait_for_room()
            data = await receive()
            if not data:
                return
            decoder.feed(data)
            fed += len(data)
            while True:
                # Checked per request, not per chunk: one chunk of small reads can ask for far
                # more answer bytes than the limits allow.
                if self._unsent >= max_unsent or handler.saturated:
                    await self._wait_for_room()
                try:
                    body = decoder.next_frame()
                except FrameTooLargeError as exc:
                    self._refuse_frame(data, fed, consumed, str(exc))
                    raise _Close from exc
                except RemoteProtocolError as exc:
                    log.warning("bad_frame", peer=self.peer, error=str(exc))
                    raise _Close from exc
                if body is None:
                    break
                consumed += 4 + len(body)
                try:
                    message = decode_message(body)
                except RemoteProtocolError as exc:
                    self._bad_message(body, exc)
                    continue
                handler.handle(self, body, message)

    def _refuse_frame(
        self, data: bytes | bytearray | memoryview, fed: int, consumed: int, reason: str
    ) -> None:
        # The oversized frame starts at stream offset ``consumed``; answer with its request id
        # if its header is in the chunk at hand.
        chunk_start = fed - len(data)
        request_id = 0
        if consumed >= chunk_start and consumed + _HEADER_END <= fed:
            at = consumed - chunk_start + 4
            request_id = peek_request_id(bytes(data[at : at + 10])) or 0
        log.warning("frame_too_large", peer=self.peer, request_id=request_id, error=reason)
        self.send(encode_frame(ErrorResponse(request_id, StatusCode.BAD_REQUEST, reason)))

    def _bad_message(self, body: bytes, exc: RemoteProtocolError) -> None:
        request_id = peek_request_id(body)
        if request_id is None:
            log.warning("bad_message_closing", peer=self.peer, error=str(exc))
            raise _Close from exc
        status = (
            StatusCode.BAD_VERSION
            if isinstance(exc, UnsupportedVersionError)
            else StatusCode.BAD_REQUEST
        )
        log.warning("bad_message", peer=self.peer, request_id=request_id, error=str(exc))
        self.send(encode_frame(ErrorResponse(request_id, status, str(exc))))

    async def serve(self) -> None:
        self._handler.connections += 1
        self._handler.connections_opened += 1
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                nursery.start_soon(self._writer)
                try:
                    await self._reader()
                except _Close:
                    pass
                await self._drain()
                nursery.cancel_scope.cancel()
        finally:
            self.closed = True
            self._handler.connections -= 1


def _receiver(stream: trio.abc.Stream) -> Callable[[], Awaitable[bytes | bytearray | memoryview]]:
    """A function returning the next chunk of the stream (empty at EOF).

    On TCP it receives into one reused buffer: a fresh 1 MiB bytes object per receive costs
    page faults that show at hundreds of MiB/s. The decoder copies what it keeps.
    """
    sock = getattr(stream, "socket", None) if isinstance(stream, trio.SocketStream) else None
    if isinstance(stream, trio.SSLStream):
        # TLS records are <= 16 KiB: let trio size each read (a fixed 1 MiB read allocates a
        # fresh 1 MiB buffer per record, which made TLS adds cost ~5x the CPU).
        async def receive_tls() -> bytes | bytearray:
            return await stream.receive_some()

        return receive_tls
    if sock is None:

        async def receive_some() -> bytes | bytearray:
            return await stream.receive_some(RECEIVE_SIZE)

        return receive_some
    buffer = bytearray(RECEIVE_SIZE)
    view = memoryview(buffer)

    async def receive_into() -> memoryview:
        try:
            n = await sock.recv_into(buffer)
        except OSError as exc:
            raise trio.BrokenResourceError(f"connection broken: {exc}") from exc
        return view[:n]

    return receive_into


def peer_name(stream: trio.abc.Stream) -> str:
    while not hasattr(stream, "socket") and hasattr(stream, "transport_stream"):
        stream = stream.transport_stream  # TLS: the TCP stream under it
    socket = getattr(stream, "socket", None)
    if socket is None:
        return type(stream).__name__
    try:
        host, port = socket.getpeername()[:2]
    except OSError:
        return "?"
    return f"{host}:{port}"


async def handle_stream(
    handler: RequestHandler, ready: trio.Event, stream: trio.abc.Stream
) -> None:
    """Serve one connection until it closes; never raise (other connections go on)."""
    peer = peer_name(stream)
    try:
        await ready.wait()
        conn = Connection(handler, stream, peer)
        await conn.serve()
    except Exception as exc:  # a broken connection must not stop the bookie
        if _only_broken(exc):
            log.debug("connection_broken", peer=peer)
        else:
            log.exception("connection_failed", peer=peer)
    finally:
        await trio.aclose_forcefully(stream)


def _only_broken(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_broken(e) for e in exc.exceptions)
    return isinstance(exc, trio.BrokenResourceError | trio.ClosedResourceError | OSError)
