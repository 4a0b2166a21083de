"""Reading a connection's requests: frames out of its socket, handed to the bookie.

The reader receives chunks (up to 1 MiB into one reused buffer), splits them into frames and
hands every request over synchronously: no task per request. On asyncio (uvloop included) a
connection that has sent a whole request and holds no part of another is read from the event
loop's reader callback, as asyncio's own transports read, so no task wakes per request; the
reader task takes over while a deadline must be kept (a frame arrived in part) or the
connection has no room (its peer leaves answers unread), and hands back when neither holds.

Deadlines: a connection must deliver its first request within ``first_request_timeout``, and
each frame within ``frame_timeout`` of its first bytes; time spent waiting for room does not
count. Frames held in part count against the bookie's budget ``max_partial_frame_bytes``.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, NoReturn, Protocol, final

import anyio
import anyio.abc
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSStream

from walkit._core.wire import FrameDecoder, Message, StatusCode, decode_message
from walkit.errors import FrameTooLargeError, RemoteProtocolError
from walkit.shared import Receiver, current_loop, direct_fd
from walkit_bookie.server._authentication import authenticate
from walkit_bookie.server._peer import Peer
from walkit_bookie.server._refusals import refuse_frame, refuse_message

if TYPE_CHECKING:
    from walkit._core.auth import Authenticator
    from walkit_bookie._config import BookieConfig
    from walkit_bookie.server._badinput import BadInputLog
    from walkit_bookie.server._stats import BookieStats

__all__ = [
    "FIRST_RECEIVE_SIZE",
    "RECEIVE_SIZE",
    "Close",
    "Handler",
    "Intake",
    "ReadingPeer",
    "TimedOut",
]

#: The receive buffer of a connection starts at FIRST_RECEIVE_SIZE once it has something to
#: read (an idle connection holds none) and grows 4x each time a receive fills it, up to
#: RECEIVE_SIZE: a connection costs memory in proportion to what it sends.
FIRST_RECEIVE_SIZE = 16 * 1024
RECEIVE_SIZE = 1024 * 1024
#: A partial frame this small is never refused for the partial-frame budget.
_PARTIAL_FREE = 64 * 1024


class Close(Exception):
    """Stop reading this connection (after flushing what is queued)."""


class TimedOut(Exception):
    """The peer did not deliver a request or frame in time: close without answering."""


class _Ended(Exception):
    """The reader callback met the end of the stream."""


class _Paused(Exception):
    """The reader callback hands the connection back to the reader task: a deadline began,
    or room ran out (``data``: a chunk whose frames are not all handled yet, else None)."""

    def __init__(self, data: bytes | bytearray | memoryview | None) -> None:
        super().__init__()
        self.data = data


class Handler(Protocol):
    """What a connection's reader needs from the bookie."""

    config: BookieConfig
    #: The counters and gauges connections keep (connections, buffers, queued answers, ...).
    stats: BookieStats
    bad_input: BadInputLog
    #: Checks clients' credentials; None: authentication is off.
    authenticator: Authenticator | None

    def handle(self, conn: Peer, body: bytes, message: Message) -> None: ...

    def defer_commits(self) -> None:
        """The requests handled from now until :meth:`flush_commits` came in one chunk: let
        the group commit see them all before it acts (no checkpoint in between)."""

    def flush_commits(self) -> None:
        """End :meth:`defer_commits`."""


class ReadingPeer(Peer, Protocol):
    """What a connection's reader reads and keeps of it (a client connection)."""

    stream: anyio.abc.ByteStream
    #: The reader gives up waiting for bytes at this time (inf: it may wait forever).
    deadline: float
    #: Bytes of a frame received in part, counted in the handler's budget.
    partial: int
    #: Whether it has sent a whole request, when it last received bytes, and when the frame
    #: being received began.
    spoke: bool
    last_active: float
    frame_since: float
    #: Whether its requests are served (else the next must authenticate it).
    authenticated: bool

    def no_room(self) -> bool:
        """Whether it may not take another request now."""
        ...

    async def wait_for_room(self) -> None:
        """Return once it may take another request (the wait extends ``deadline``)."""


@final
class Intake:
    """The reading side of one client connection (its reader task, and on asyncio the
    loop's reader callback)."""

    __slots__ = ("_clock", "_conn", "_consumed", "_decoder", "_fed", "_frames", "_handler")

    def __init__(self, conn: ReadingPeer, handler: Handler) -> None:
        self._conn = conn
        self._handler = handler
        self._decoder = FrameDecoder(handler.config.max_frame_size)
        #: The loop's clock, bound once (read per chunk received).
        self._clock = current_loop().time
        self._fed = 0  # bytes received and fed to the frame decoder
        self._consumed = 0  # bytes of whole frames taken out of it
        self._frames = 0  # whole frames of the chunk being handled

    async def run(self) -> None:
        """Read and hand over requests until the peer ends the stream; raises Close (stop
        reading, answer what is queued) or TimedOut (close without answering)."""
        conn = self._conn
        receive = _Receiver(conn.stream, self._handler)
        try:
            await self._read_frames(receive)
        finally:
            receive.release()
            self._handler.stats.partial_frame_bytes -= conn.partial
            conn.partial = 0

    async def _read_frames(self, receive: _Receiver) -> None:
        while True:
            if self._conn.no_room():
                await self._conn.wait_for_room()
            if self._conn.deadline == math.inf and receive.serves_readable:
                # No deadline to keep: take chunks from the loop's reader callback (no task
                # wakes per request) until a deadline, a lack of room or the end stops it.
                try:
                    await receive.serve(functools.partial(self._chunk_by_callback, receive))
                except _Paused as paused:
                    if paused.data is not None:
                        await self._finish_chunk(paused.data)
                    continue
                except _Ended:
                    return
            if self._conn.deadline != math.inf:
                if not await self._receive_under_deadline(receive):
                    return
                continue
            data = await receive()
            if not data:
                return
            if not self._start_chunk(data):
                await self._finish_chunk(data)

    async def _receive_under_deadline(self, receive: _Receiver) -> bool:
        """Receive and take chunks while a deadline holds, under one cancel scope moved with
        the deadline (a scope per receive cost more than the receive: TLS hands over a
        16 KiB record per read), until the deadline ends or room runs out; False at the end
        of the stream."""
        unfinished: bytes | bytearray | memoryview | None = None
        with anyio.CancelScope(deadline=self._conn.deadline) as scope:
            while True:
                data = await receive()
                if not data:
                    return False
                if not self._start_chunk(data):
                    unfinished = data
                    break
                if self._conn.deadline == math.inf or self._conn.no_room():
                    return True
                if scope.deadline != self._conn.deadline:
                    scope.deadline = self._conn.deadline
        if unfinished is None:  # (only a cancellation by the deadline leaves the loop so)
            self._timed_out(self._decoder.buffered)
        await self._finish_chunk(unfinished)  # (time waiting for room is not counted)
        return True

    def _chunk_by_callback(self, receive: _Receiver) -> None:
        """The reader callback: take what the socket holds, if anything. Raises to hand the
        connection back to the reader task: _Ended at the end, _Paused when a deadline
        starts or room runs out."""
        data = receive.now()
        if data is None:
            return  # (woken with nothing to read)
        if not data:
            raise _Ended
        if not self._start_chunk(data):
            raise _Paused(data)
        if self._conn.deadline != math.inf or self._conn.no_room():
            raise _Paused(None)

    def _start_chunk(self, data: bytes | bytearray | memoryview) -> bool:
        """Take a chunk received: handle its whole frames. False if it stopped for room with
        frames left (then :meth:`_finish_chunk`)."""
        self._conn.last_active = self._clock()
        self._decoder.feed(data)
        self._fed += len(data)
        self._frames = 0
        if not self._handle_frames(data):
            return False
        self._chunk_taken(data)
        return True

    async def _finish_chunk(self, data: bytes | bytearray | memoryview) -> None:
        """Handle the rest of a chunk's frames as room allows."""
        while True:
            await self._conn.wait_for_room()
            if self._handle_frames(data):
                self._chunk_taken(data)
                return

    def _chunk_taken(self, data: bytes | bytearray | memoryview) -> None:
        """After a chunk's whole frames: the deadline, and the partial frame's budget."""
        handler = self._handler
        config = handler.config
        # What is left in the decoder is the start of a frame: count it against the
        # bookie's budget for partial frames.
        held = self._decoder.buffered
        frames = self._frames
        if frames:
            self._conn.spoke = True
        if self._conn.spoke:  # (until then the first request's deadline holds)
            if not held:
                self._conn.deadline = math.inf  # between frames a peer may wait at will
            elif frames or not self._conn.partial:
                # A frame started in this chunk: it must be whole within frame_timeout.
                self._conn.deadline = self._conn.last_active + config.frame_timeout
                self._conn.frame_since = self._conn.last_active
        handler.stats.partial_frame_bytes += held - self._conn.partial
        self._conn.partial = held
        limit = config.max_partial_frame_bytes
        if held > _PARTIAL_FREE and handler.stats.partial_frame_bytes > limit:
            refuse_frame(
                self._conn,
                handler.bad_input,
                data,
                self._fed,
                self._consumed,
                f"the bookie holds too many partly received frames (limit {limit} bytes)",
                StatusCode.TOO_MANY_REQUESTS,
                "too_many_partial_frames",
            )
            raise Close

    def _handle_frames(self, data: bytes | bytearray | memoryview) -> bool:
        """Handle the whole frames the decoder holds: True once none is left, False if the
        connection ran out of room first. The adds handled together reach the group commit
        together (a lone one may be committed at the end: handler.flush_commits)."""
        handler = self._handler
        decoder = self._decoder
        handler.defer_commits()
        try:
            while True:
                # Checked per request, not per chunk: one chunk of small reads can ask for
                # far more answer bytes than the limits allow.
                if self._conn.no_room():
                    return False
                try:
                    body = decoder.next_frame()
                except FrameTooLargeError as exc:
                    refuse_frame(
                        self._conn, handler.bad_input, data, self._fed, self._consumed, str(exc)
                    )
                    raise Close from exc
                except RemoteProtocolError as exc:
                    handler.bad_input.report("bad_frame", peer=self._conn.peer, error=str(exc))
                    raise Close from exc
                if body is None:
                    return True
                self._frames += 1
                self._consumed += 4 + len(body)
                try:
                    message = decode_message(body)
                except RemoteProtocolError as exc:
                    if not refuse_message(self._conn, handler.bad_input, body, exc):
                        raise Close from exc
                    continue
                if self._conn.authenticated:
                    handler.handle(self._conn, body, message)
                else:
                    self._authenticate(message)
        finally:
            handler.flush_commits()

    def _timed_out(self, held: int) -> NoReturn:
        """The reader's deadline passed: report it and close (no answer: nothing to answer)."""
        handler = self._handler
        config = handler.config
        handler.stats.connections_timed_out += 1
        if not self._conn.spoke:
            kind = "first_request_timeout"
            error = f"no whole request within {config.first_request_timeout:g} s of connecting"
        else:
            kind = "frame_timeout"
            error = f"a frame not whole within {config.frame_timeout:g} s ({held} bytes came)"
        handler.bad_input.report(kind, peer=self._conn.peer, error=error)
        raise TimedOut

    def _authenticate(self, message: Message) -> None:
        handler = self._handler
        assert handler.authenticator is not None
        if not authenticate(
            self._conn, handler.authenticator, handler.stats, handler.bad_input, message
        ):
            raise Close


@final
class _Receiver:
    """Returns the next chunk of a stream (empty at EOF) when called.

    On TCP it receives into one reused buffer: a fresh 1 MiB bytes object per receive costs
    page faults that show at hundreds of MiB/s. The buffer is allocated once the socket has
    something to read and grows with what arrives (see FIRST_RECEIVE_SIZE); its size is
    counted in ``handler.stats.receive_buffer_bytes`` until :meth:`release`. The decoder copies
    what it keeps.
    """

    __slots__ = ("_buffer", "_fd", "_handler", "_loop", "_receiver", "_size", "_stream", "_view")

    def __init__(self, stream: anyio.abc.ByteStream, handler: Handler) -> None:
        self._stream = stream
        self._handler = handler
        self._fd = direct_fd(stream)
        self._loop = current_loop()
        self._receiver = (
            Receiver(stream.extra(SocketAttribute.raw_socket), self._loop, keep_registered=True)
            if self._fd >= 0
            else None
        )
        # TLS records hold <= 16 KiB: a larger read allocates a buffer that large per record
        # (a fixed 1 MiB read made TLS adds cost ~5x the CPU).
        self._size = 16384 if isinstance(stream, TLSStream) else RECEIVE_SIZE
        self._buffer = bytearray()
        self._view = memoryview(self._buffer)

    async def __call__(self) -> bytes | bytearray | memoryview:
        receiver = self._receiver
        if receiver is None:
            try:
                return await self._stream.receive(self._size)
            except anyio.EndOfStream:
                return b""
        try:
            if not self._buffer:
                await receiver.wait_readable()
                self._resize(FIRST_RECEIVE_SIZE)
            n = await receiver.receive_into(self._buffer)
        except OSError as exc:
            raise anyio.BrokenResourceError(f"connection broken: {exc}") from exc
        return self._taken(n)

    @property
    def serves_readable(self) -> bool:
        """Whether :meth:`serve` may be used (a plain socket on a loop with reader
        callbacks)."""
        return self._receiver is not None and self._loop.serves_readable

    async def serve(self, step: Callable[[], object]) -> None:
        """Call ``step()`` from the loop's reader callback each time the socket is readable,
        until it raises (see ``EventLoop.serve_readable``); ``step`` receives with
        :meth:`now`."""
        assert self._receiver is not None
        self._receiver.close()  # (its watch of the socket would clash with the callback's)
        await self._loop.serve_readable(self._fd, step)

    def now(self) -> bytes | bytearray | memoryview | None:
        """Receive what the socket holds without waiting: None if nothing, empty at the end."""
        if not self._buffer:
            self._resize(FIRST_RECEIVE_SIZE)
        try:
            n = os.readv(self._fd, (self._buffer,))
        except BlockingIOError:
            return None
        except OSError as exc:
            raise anyio.BrokenResourceError(f"connection broken: {exc}") from exc
        return self._taken(n)

    def _taken(self, n: int) -> memoryview:
        chunk = self._view[:n]
        if n == len(self._buffer) and n < RECEIVE_SIZE:
            # Full: more is probably waiting. The chunk keeps the old buffer alive until the
            # decoder has copied it.
            self._resize(min(RECEIVE_SIZE, n * 4))
        return chunk

    def _resize(self, size: int) -> None:
        self._handler.stats.receive_buffer_bytes += size - len(self._buffer)
        self._buffer = bytearray(size)
        self._view = memoryview(self._buffer)

    def release(self) -> None:
        if self._receiver is not None:
            self._receiver.close()
        self._handler.stats.receive_buffer_bytes -= len(self._buffer)
        self._buffer = bytearray()
        self._view = memoryview(self._buffer)
