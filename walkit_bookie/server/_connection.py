"""Connections: read frames in large chunks, hand requests to the bookie, coalesce answers.

One reader and one writer task per connection; no task per request on the add path. Answers
queued while the writer was busy (for example all the adds of one group commit) go out in one
``send_all``. Backpressure: the reader stops reading its socket while the bookie is at its
in-flight limits or while this connection has too many answers its peer has not read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, final

import trio

from walkit._core.wire import (
    AuthRequest,
    AuthResponse,
    ErrorResponse,
    FrameDecoder,
    Message,
    StatusCode,
    decode_message,
    encode_frame,
    peek_request_id,
)
from walkit._logging import get_logger
from walkit.errors import (
    AuthenticationError,
    FrameTooLargeError,
    RemoteProtocolError,
    UnsupportedVersionError,
)
from walkit.net import principal_of
from walkit.net._direct import direct_fd, unwritten, write_now

if TYPE_CHECKING:
    from walkit._core.auth import Authenticator
    from walkit_bookie._config import BookieConfig
    from walkit_bookie.server._badinput import BadInputLog

log = get_logger(__name__)

#: The receive buffer of a connection starts at FIRST_RECEIVE_SIZE once it has something to
#: read (an idle connection holds none) and grows 4x each time a receive fills it, up to
#: RECEIVE_SIZE: a connection costs memory in proportion to what it sends.
FIRST_RECEIVE_SIZE = 16 * 1024
RECEIVE_SIZE = 1024 * 1024
#: Seconds a connection over ``max_connections`` may take to send its first request (which
#: is answered TOO_MANY_REQUESTS) before it is closed.
_REFUSE_WAIT = 1.0
_REFUSE_DRAIN = 256 * 1024
_HEADER_END = 4 + 10  # length prefix + version, type, request id
#: A partial frame this small is never refused for the partial-frame budget.
_PARTIAL_FREE = 64 * 1024
_CLOSE_GRACE = 1.0  # seconds to flush answers before closing a connection


class RequestHandler(Protocol):
    """What a connection needs from the bookie."""

    config: BookieConfig
    capacity: trio.lowlevel.ParkingLot
    connections: int
    connections_opened: int
    connections_refused: int
    bad_input: BadInputLog
    #: Checks clients' credentials; None: authentication is off.
    authenticator: Authenticator | None
    #: Connections authenticated, and refused for credentials or for sending none.
    auth_ok: int
    auth_refused: int
    #: Bytes of receive buffers allocated by open connections.
    receive_buffer_bytes: int
    #: Bytes of frames received in part, over all connections.
    partial_frame_bytes: int
    #: Connections waiting for their unsent answers to drain (``max_unsent_bytes``).
    stalled_connections: int

    @property
    def saturated(self) -> bool: ...

    def handle(self, conn: Peer, body: bytes, message: Message) -> None: ...


class Peer(Protocol):
    """Whom the request handler answers: a client :class:`Connection`, or this bookie's own
    autorecovery worker storing copies in the same process (``_local.LocalCopyStore``)."""

    outstanding: int
    peer: str
    principal: str | None

    def send(self, frame: bytes) -> None: ...

    def send_parts(self, parts: tuple[bytes, ...]) -> None: ...

    def spawn(self, fn: object, *args: object) -> bool: ...


class _Close(Exception):
    """Stop reading this connection (after flushing what is queued)."""


@final
class Connection:
    """One client connection. ``send`` queues a frame; the writer task sends queued frames."""

    __slots__ = (
        "_direct_fd",
        "_handler",
        "_out",
        "_partial",
        "_space",
        "_stream",
        "_unsent",
        "_wake",
        "authenticated",
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
        authenticator = handler.authenticator
        #: Whether requests are served (always, with authentication off).
        self.authenticated = True
        if authenticator is not None:
            principal = authenticator.on_connect(self.principal)
            self.authenticated = principal is not None
            if principal is not None:
                self.principal = principal
                handler.auth_ok += 1
        self._stream = stream
        self._out: list[bytes] = []
        self._unsent = 0
        self._partial = 0  # bytes of a partly received frame, counted in the handler's budget
        self._wake = trio.Event()
        #: The socket to write answers to directly while the writer task is parked, else -1.
        self._direct_fd = -1
        self._space = trio.lowlevel.ParkingLot()
        self.closed = False
        self.outstanding = 0
        self.peer = peer
        self.nursery: trio.Nursery | None = None

    def send(self, frame: bytes) -> None:
        self.send_parts((frame,))

    def send_parts(self, parts: tuple[bytes, ...]) -> None:
        """Send one frame, whole or in parts (a header and a large packet, written with one
        writev and never joined unless the writer task must send it)."""
        if self.closed:
            return
        out = self._out
        size = sum(map(len, parts))
        if not out and self._direct_fd >= 0:
            # The writer is parked: write the answer now (walkit.net._direct).
            written = write_now(self._direct_fd, parts)
            if written == size:
                return
            if written:
                parts = tuple(unwritten(list(parts), written))
                size -= written
        out.extend(parts)
        self._unsent += size
        self._wake.set()

    def spawn(self, fn: object, *args: object) -> bool:
        """Run a task for this connection (long polls); False if the connection is gone."""
        if self.closed or self.nursery is None:
            return False
        self.nursery.start_soon(fn, *args)  # type: ignore[arg-type]
        return True

    async def _writer(self) -> None:
        stream = self._stream
        fd = direct_fd(stream)
        while True:
            if not self._out:
                self._direct_fd = fd
                try:
                    await self._wake.wait()
                finally:
                    self._direct_fd = -1
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
                handler.stalled_connections += 1
                try:
                    await self._space.park()
                finally:
                    handler.stalled_connections -= 1
            elif handler.saturated:
                await handler.capacity.park()
            else:
                return

    async def _reader(self) -> None:
        handler = self._handler
        config = handler.config
        decoder = FrameDecoder(config.max_frame_size)
        receive = _Receiver(self._stream, handler)
        try:
            await self._read_frames(receive, decoder)
        finally:
            receive.release()
            handler.partial_frame_bytes -= self._partial
            self._partial = 0

    async def _read_frames(self, receive: _Receiver, decoder: FrameDecoder) -> None:
        handler = self._handler
        max_unsent = handler.config.max_unsent_bytes
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
                    handler.bad_input.report("bad_frame", peer=self.peer, error=str(exc))
                    raise _Close from exc
                if body is None:
                    break
                consumed += 4 + len(body)
                try:
                    message = decode_message(body)
                except RemoteProtocolError as exc:
                    self._bad_message(body, exc)
                    continue
                if self.authenticated:
                    handler.handle(self, body, message)
                else:
                    self._authenticate(message)
            # What is left in the decoder is the start of a frame: count it against the
            # bookie's budget for partial frames.
            held = decoder.buffered
            handler.partial_frame_bytes += held - self._partial
            self._partial = held
            limit = handler.config.max_partial_frame_bytes
            if held > _PARTIAL_FREE and handler.partial_frame_bytes > limit:
                self._refuse_frame(
                    data,
                    fed,
                    consumed,
                    f"the bookie holds too many partly received frames (limit {limit} bytes)",
                    StatusCode.TOO_MANY_REQUESTS,
                    "too_many_partial_frames",
                )
                raise _Close

    def _refuse_frame(
        self,
        data: bytes | bytearray | memoryview,
        fed: int,
        consumed: int,
        reason: str,
        status: StatusCode = StatusCode.BAD_REQUEST,
        kind: str = "frame_too_large",
    ) -> None:
        # The refused frame starts at stream offset ``consumed``; answer with its request id
        # if its header is in the chunk at hand.
        chunk_start = fed - len(data)
        request_id = 0
        if consumed >= chunk_start and consumed + _HEADER_END <= fed:
            at = consumed - chunk_start + 4
            request_id = peek_request_id(bytes(data[at : at + 10])) or 0
        self._handler.bad_input.report(kind, peer=self.peer, request_id=request_id, error=reason)
        self.send(encode_frame(ErrorResponse(request_id, status, reason)))

    def _authenticate(self, message: Message) -> None:
        """The first request of a connection a bookie with authentication on has not
        authenticated yet: an AUTH request, checked, or anything else, refused. A refusal is
        answered AUTH_REQUIRED and closes the connection."""
        handler = self._handler
        authenticator = handler.authenticator
        assert authenticator is not None
        rid = message.request_id
        if isinstance(message, AuthRequest):
            try:
                principal = authenticator.authenticate(
                    message.method, message.credentials, self.principal
                )
            except AuthenticationError as exc:
                handler.auth_refused += 1
                handler.bad_input.report(
                    "auth_refused", peer=self.peer, method=message.method[:64], error=str(exc)
                )
                self.send(encode_frame(AuthResponse(rid, StatusCode.AUTH_REQUIRED, str(exc))))
                raise _Close from exc
            self.principal = principal
            self.authenticated = True
            handler.auth_ok += 1
            log.debug("client_authenticated", peer=self.peer, principal=principal)
            self.send(encode_frame(AuthResponse(rid, StatusCode.OK, principal)))
            return
        handler.auth_refused += 1
        handler.bad_input.report(
            "auth_required", peer=self.peer, request=type(message).__name__, request_id=rid
        )
        why = (
            "this bookie requires authentication: connect with "
            "walkit.Client.connect(url, auth=...) (see docs/security.md)"
        )
        self.send(encode_frame(ErrorResponse(rid, StatusCode.AUTH_REQUIRED, why)))
        raise _Close

    def _bad_message(self, body: bytes, exc: RemoteProtocolError) -> None:
        request_id = peek_request_id(body)
        if request_id is None:
            self._handler.bad_input.report("bad_message_closing", peer=self.peer, error=str(exc))
            raise _Close from exc
        status = (
            StatusCode.BAD_VERSION
            if isinstance(exc, UnsupportedVersionError)
            else StatusCode.BAD_REQUEST
        )
        self._handler.bad_input.report(
            "bad_message", peer=self.peer, request_id=request_id, error=str(exc)
        )
        self.send(encode_frame(ErrorResponse(request_id, status, str(exc))))

    async def _linger(self) -> None:
        """After refusing input: half-close, then drain what the peer still sends, briefly and
        boundedly. Closing with unread input would reset the connection, and the reset can
        destroy the answer that says why before the peer reads it."""
        stream = self._stream
        if not isinstance(stream, trio.abc.HalfCloseableStream) or self._out or self._unsent:
            return  # not a TCP stream, or the writer is still sending (then it is broken)
        try:
            with trio.move_on_after(_CLOSE_GRACE):
                await stream.send_eof()
                drained = 0
                while drained < _REFUSE_DRAIN and (chunk := await stream.receive_some(65536)):
                    drained += len(chunk)
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
            pass

    async def serve(self) -> None:
        self._handler.connections += 1
        self._handler.connections_opened += 1
        try:
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                nursery.start_soon(self._writer)
                refused = False
                try:
                    await self._reader()
                except _Close:
                    refused = True
                await self._drain()
                if refused:
                    await self._linger()
                nursery.cancel_scope.cancel()
        finally:
            self.closed = True
            self._handler.connections -= 1


class _Receiver:
    """Returns the next chunk of a stream (empty at EOF) when called.

    On TCP it receives into one reused buffer: a fresh 1 MiB bytes object per receive costs
    page faults that show at hundreds of MiB/s. The buffer is allocated once the socket has
    something to read and grows with what arrives (see FIRST_RECEIVE_SIZE); its size is
    counted in ``handler.receive_buffer_bytes`` until :meth:`release`. The decoder copies
    what it keeps.
    """

    __slots__ = ("_buffer", "_handler", "_sock", "_stream", "_tls", "_view")

    def __init__(self, stream: trio.abc.Stream, handler: RequestHandler) -> None:
        self._stream = stream
        self._handler = handler
        self._sock = (
            getattr(stream, "socket", None) if isinstance(stream, trio.SocketStream) else None
        )
        # TLS records are <= 16 KiB: let trio size each read (a fixed 1 MiB read allocates a
        # fresh 1 MiB buffer per record, which made TLS adds cost ~5x the CPU).
        self._tls = isinstance(stream, trio.SSLStream)
        self._buffer = bytearray()
        self._view = memoryview(self._buffer)

    async def __call__(self) -> bytes | bytearray | memoryview:
        sock = self._sock
        if sock is None:
            return await self._stream.receive_some(None if self._tls else RECEIVE_SIZE)
        try:
            if not self._buffer:
                await trio.lowlevel.wait_readable(sock)
                self._resize(FIRST_RECEIVE_SIZE)
            n = await sock.recv_into(self._buffer)
        except OSError as exc:
            raise trio.BrokenResourceError(f"connection broken: {exc}") from exc
        chunk = self._view[:n]
        if n == len(self._buffer) and n < RECEIVE_SIZE:
            # Full: more is probably waiting. The chunk keeps the old buffer alive until the
            # decoder has copied it.
            self._resize(min(RECEIVE_SIZE, n * 4))
        return chunk

    def _resize(self, size: int) -> None:
        self._handler.receive_buffer_bytes += size - len(self._buffer)
        self._buffer = bytearray(size)
        self._view = memoryview(self._buffer)

    def release(self) -> None:
        self._handler.receive_buffer_bytes -= len(self._buffer)
        self._buffer = bytearray()
        self._view = memoryview(self._buffer)


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
        if handler.connections >= handler.config.max_connections:
            await _refuse_connection(handler, stream, peer)
            return
        conn = Connection(handler, stream, peer)  # counted in serve() before any checkpoint
        await conn.serve()
    except Exception as exc:  # a broken connection must not stop the bookie
        if _only_broken(exc):
            log.debug("connection_broken", peer=peer)
        else:
            log.exception("connection_failed", peer=peer)
    finally:
        await trio.aclose_forcefully(stream)


async def _refuse_connection(handler: RequestHandler, stream: trio.abc.Stream, peer: str) -> None:
    """Over ``max_connections``: answer the first request TOO_MANY_REQUESTS (so the client
    sees a clear error, not a hang or a bare reset), then close."""
    handler.connections_refused += 1
    limit = handler.config.max_connections
    handler.bad_input.report("too_many_connections", peer=peer, limit=limit)
    head = b""
    with trio.move_on_after(_REFUSE_WAIT):
        while len(head) < _HEADER_END:
            chunk = await stream.receive_some(_HEADER_END - len(head))
            if not chunk:
                return
            head += chunk
    request_id = peek_request_id(head[4:_HEADER_END]) if len(head) >= _HEADER_END else None
    frame = encode_frame(
        ErrorResponse(
            request_id or 0,
            StatusCode.TOO_MANY_REQUESTS,
            f"too many connections to this bookie (limit {limit})",
        )
    )
    with trio.move_on_after(_REFUSE_WAIT):
        await stream.send_all(frame)
        if isinstance(stream, trio.abc.HalfCloseableStream):
            # Closing with unread input would reset the connection, which can destroy the
            # answer before the client reads it: half-close, drain a little, then close.
            await stream.send_eof()
            drained = 0
            while drained < _REFUSE_DRAIN and (chunk := await stream.receive_some(16384)):
                drained += len(chunk)


def _only_broken(exc: BaseException) -> bool:
    if isinstance(exc, BaseExceptionGroup):
        return all(_only_broken(e) for e in exc.exceptions)
    return isinstance(exc, trio.BrokenResourceError | trio.ClosedResourceError | OSError)
