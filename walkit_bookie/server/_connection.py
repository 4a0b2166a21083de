"""Connections: read frames in large chunks, hand requests to the bookie, coalesce answers.

One reader and one writer task per connection; no task per request on the add path. Answers
queued while the writer was busy (for example all the adds of one group commit) go out in one
``send_all``. Backpressure: the reader stops reading its socket while the bookie is at its
in-flight limits or while this connection has too many answers its peer has not read.

Peers that hold a connection without using it are cut off: a connection must deliver its first
request within ``first_request_timeout``, each frame within ``frame_timeout`` of its first
bytes, and its peer must take queued answers within ``send_timeout``. At ``max_connections``
a newcomer closes the connection idle longest instead of being refused (``_admission``),
and while the answers queued over all connections are at their bound, a connection whose peer
takes none of them is closed after ``evict_unread_after`` (see ``RequestHandler``).

A connection's authentication is in :mod:`._authentication`; what bad input is reported and
answered, in :mod:`._refusals`; the linger before closing, in :mod:`._linger`.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, NoReturn, Protocol, final

import anyio
import anyio.abc
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSStream

from walkit._core.wire import (
    FrameDecoder,
    Message,
    StatusCode,
    decode_message,
)
from walkit.errors import (
    FrameTooLargeError,
    RemoteProtocolError,
)
from walkit.net import principal_of
from walkit.shared import (
    ParkingLot,
    Receiver,
    current_loop,
    direct_fd,
    get_logger,
    unwritten,
    write_now,
)
from walkit_bookie.server._authentication import authenticate, on_connect
from walkit_bookie.server._linger import linger
from walkit_bookie.server._refusals import REFUSE_DRAIN, refuse_frame, refuse_message

if TYPE_CHECKING:
    from walkit._core.auth import Authenticator
    from walkit_bookie._config import BookieConfig
    from walkit_bookie.server._badinput import BadInputLog
    from walkit_bookie.server._stats import BookieStats

log = get_logger(__name__)

#: The receive buffer of a connection starts at FIRST_RECEIVE_SIZE once it has something to
#: read (an idle connection holds none) and grows 4x each time a receive fills it, up to
#: RECEIVE_SIZE: a connection costs memory in proportion to what it sends.
FIRST_RECEIVE_SIZE = 16 * 1024
RECEIVE_SIZE = 1024 * 1024
#: A partial frame this small is never refused for the partial-frame budget.
_PARTIAL_FREE = 64 * 1024
_CLOSE_GRACE = 1.0  # seconds to flush answers before closing a connection
#: The writer sends queued answers in pieces of about this size (joining small ones, slicing
#: big ones): never a copy of everything queued, and ``send_timeout`` is per piece.
_SEND_PIECE = 1024 * 1024


class RequestHandler(Protocol):
    """What a connection needs from the bookie."""

    config: BookieConfig
    #: Held while a group commit answers its adds: one write per connection at the end.
    cork: Cork
    #: The counters and gauges connections keep (connections, buffers, queued answers, ...).
    stats: BookieStats
    #: Connections wait here for room while the bookie is ``saturated``.
    capacity: ParkingLot
    #: Open client connections by the peer's address (host), for
    #: ``max_connections_per_address``.
    connections_by_address: dict[str, int]
    bad_input: BadInputLog
    #: Checks clients' credentials; None: authentication is off.
    authenticator: Authenticator | None
    client_connections: set[Connection]

    @property
    def saturated(self) -> bool: ...

    def handle(self, conn: Peer, body: bytes, message: Message) -> None: ...

    def defer_commits(self) -> None:
        """The requests handled from now until :meth:`flush_commits` came in one chunk: let
        the group commit see them all before it acts (no checkpoint in between)."""

    def flush_commits(self) -> None:
        """End :meth:`defer_commits`."""

    def answers_taken(self, conn: Peer) -> None:
        """Some of ``conn``'s queued answers were sent (or dropped as it closed)."""


class Peer(Protocol):
    """Whom the request handler answers: a client :class:`Connection`, or this bookie's own
    autorecovery worker storing copies in the same process (``_local.LocalCopyStore``)."""

    outstanding: int
    peer: str
    #: The peer's host address ("" if unknown).
    address: str
    principal: str | None
    #: Closed: answers sent to it are dropped.
    closed: bool

    @property
    def unsent(self) -> int:
        """Bytes of answers queued for this peer, not yet taken."""
        ...

    def send(self, frame: bytes) -> None: ...

    def send_parts(self, parts: tuple[bytes, ...]) -> None: ...

    def spawn(self, fn: object, *args: object) -> bool: ...


@final
class Cork:
    """Answers sent while corked wait, and each connection writes its own at :meth:`uncork`
    with one system call: a group commit answers hundreds of adds at once, and a write per
    answer cost more CPU than the rest of the add (it also wakes the peer once per answer)."""

    __slots__ = ("corked", "pending")

    def __init__(self) -> None:
        self.corked = False
        #: Connections holding corked answers, each once.
        self.pending: list[Connection] = []

    def uncork(self) -> None:
        self.corked = False
        pending, self.pending = self.pending, []
        for conn in pending:
            conn.flush_corked()


class _Close(Exception):
    """Stop reading this connection (after flushing what is queued)."""


class _TimedOut(Exception):
    """The peer did not deliver a request or frame in time: close without answering."""


class _Ended(Exception):
    """The reader callback met the end of the stream."""


class _Paused(Exception):
    """The reader callback hands the connection back to the reader task: a deadline began,
    or room ran out (``data``: a chunk whose frames are not all handled yet, else None)."""

    def __init__(self, data: bytes | bytearray | memoryview | None) -> None:
        super().__init__()
        self.data = data


@final
class Connection:
    """One client connection. ``send`` queues a frame; the writer task sends queued frames."""

    __slots__ = (
        "_clock",
        "_consumed",
        "_cork",
        "_corked",
        "_counted",
        "_deadline",
        "_direct_fd",
        "_fed",
        "_frames",
        "_handler",
        "_out",
        "_partial",
        "_space",
        "_stats",
        "_stream",
        "_unsent",
        "_writer_idle",
        "address",
        "authenticated",
        "closed",
        "frame_since",
        "last_active",
        "opened",
        "outstanding",
        "peer",
        "principal",
        "spoke",
        "taken_at",
        "tasks",
    )

    def __init__(
        self, handler: RequestHandler, stream: anyio.abc.ByteStream, peer: str, address: str = ""
    ) -> None:
        self._handler = handler
        #: The peer's host address ("" if unknown), counted per address.
        self.address = address
        #: Who the client is (the subject of its verified TLS certificate, else None, until
        #: an AUTH request proves one), and whether its requests are served.
        self.principal, self.authenticated = on_connect(
            handler.authenticator, handler.stats, principal_of(stream)
        )
        self._stream = stream
        self._out: list[bytes | memoryview] = []
        self._unsent = 0
        self._partial = 0  # bytes of a partly received frame, counted in the handler's budget
        self._fed = 0  # bytes received and fed to the frame decoder
        self._consumed = 0  # bytes of whole frames taken out of it
        self._frames = 0  # whole frames of the chunk being handled
        #: The writer task parks here while nothing is queued.
        self._writer_idle = ParkingLot()
        #: The handler's cork, and whether answers of this connection wait for it.
        self._cork = handler.cork
        self._corked = False
        #: The socket to write answers to directly while the writer task is parked, else -1.
        self._direct_fd = -1
        self._space = ParkingLot()
        self.closed = False
        self.outstanding = 0
        self.peer = peer
        #: The connection's reader and writer, and its long polls.
        self.tasks: anyio.abc.TaskGroup | None = None
        #: The loop's clock, bound once (read per chunk received).
        self._clock = current_loop().time
        #: When it opened, when it last received bytes, and whether it has sent a request.
        self.opened = self.last_active = self._clock()
        self.spoke = False
        self.frame_since = 0.0  # when the frame being received began
        #: When the peer last took queued answers (a piece of about 1 MiB), or answers were
        #: queued with none before: ``evict_unread`` picks connections by how long ago.
        self.taken_at = self.opened
        #: The reader gives up waiting for bytes at this time (inf: it may wait forever).
        self._deadline = self.opened + handler.config.first_request_timeout
        self._counted = False  # counted in handler.stats.connections
        self._stats = handler.stats

    @property
    def unsent(self) -> int:
        return self._unsent

    @property
    def partial(self) -> int:
        """Bytes of a frame received in part."""
        return self._partial

    def evict(self) -> None:
        """Close this idle connection to make room for a new one."""
        handler = self._handler
        handler.stats.connections_evicted += 1
        self._uncount()  # the newcomer takes the slot at once
        log.debug("idle_connection_evicted", peer=self.peer, spoke=self.spoke)
        self._close_now()

    def evict_unread(self) -> None:
        """Close this connection: its peer takes none of its answers while the bookie's queued
        answers are at their bound (its queued answers are dropped)."""
        self._stats.connections_evicted_unread += 1
        self._close_unread(
            "answers_not_read",
            f"the peer took none of its answers for {self._clock() - self.taken_at:.1f} "
            f"s while the bookie's queued answers were at their bound",
        )

    def _close_unread(self, kind: str, error: str) -> None:
        """Report (as bad input of ``kind``) and close a connection whose peer does not take
        its answers."""
        self._handler.bad_input.report(kind, peer=self.peer, unsent_bytes=self._unsent, error=error)
        self._close_now()

    def _close_now(self) -> None:
        self.closed = True
        if self.tasks is not None:
            self.tasks.cancel_scope.cancel()

    def send(self, frame: bytes) -> None:
        self.send_parts((frame,))

    def send_parts(self, parts: tuple[bytes, ...]) -> None:
        """Send one frame, whole or in parts (a header and a large packet, written with one
        writev and never joined unless the writer task must send it)."""
        if self.closed:
            return
        out = self._out
        size = sum(map(len, parts))
        rest: Sequence[bytes | memoryview] = parts
        if self._corked:
            out.extend(parts)
            self._unsent += size
            self._stats.unsent_bytes += size
            return
        if not out and self._direct_fd >= 0 and self._cork.corked:
            # The writer is parked: this answer and the next ones go out at uncork.
            self._corked = True
            self._cork.pending.append(self)
            if not self._unsent:
                self.taken_at = self._clock()
            out.extend(parts)
            self._unsent += size
            self._stats.unsent_bytes += size
            return
        if not out and self._direct_fd >= 0:
            # The writer is parked: write the answer now (walkit.net._direct).
            written = write_now(self._direct_fd, parts)
            if written == size:
                return
            if written:
                rest = unwritten(parts, written)
                size -= written
        if not self._unsent:
            # The peer's clock starts now (``evict_unread``), not when the writer next runs:
            # a client whose read waited for room had an old mark and was closed as unread.
            self.taken_at = self._clock()
        out.extend(rest)
        self._unsent += size
        self._stats.unsent_bytes += size
        if self._writer_idle:
            self._writer_idle.unpark_all()

    def flush_corked(self) -> None:
        """Write the answers queued while corked, what the socket takes now; the writer task
        sends the rest."""
        self._corked = False
        out = self._out
        if not out or self.closed:
            return
        if self._direct_fd >= 0:
            written = write_now(self._direct_fd, out)
            if written:
                self._unsent -= written
                self._stats.unsent_bytes -= written
                out = self._out = unwritten(out, written)
                self._handler.answers_taken(self)
                if not out:
                    return
        if self._writer_idle:
            self._writer_idle.unpark_all()

    def spawn(self, fn: object, *args: object) -> bool:
        """Run a task for this connection (long polls); False if the connection is gone."""
        if self.closed or self.tasks is None:
            return False
        self.tasks.start_soon(fn, *args)  # type: ignore[arg-type]
        return True

    async def _writer(self) -> None:
        stream = self._stream
        handler = self._handler
        send_timeout = handler.config.send_timeout
        fd = direct_fd(stream)
        while True:
            if not self._out:
                self._direct_fd = fd
                try:
                    await self._writer_idle.park()
                finally:
                    self._direct_fd = -1
                continue
            out, self._out = self._out, []
            for piece in send_pieces(out):
                with anyio.move_on_after(send_timeout) as scope:
                    await stream.send(piece)  # type: ignore[arg-type]  # (any buffer)
                if scope.cancelled_caught:
                    return self._send_timed_out(send_timeout)
                self._unsent -= len(piece)
                handler.stats.unsent_bytes -= len(piece)
                self.taken_at = self._clock()
                if self._space:
                    self._space.unpark_all()
                handler.answers_taken(self)

    def _send_timed_out(self, send_timeout: float) -> None:
        self._stats.connections_timed_out += 1
        self._close_unread(
            "send_timeout", f"the peer took none of its answers for {send_timeout:g} s"
        )

    async def _drain(self) -> None:
        # Answer what is already in flight (a peer may half-close and still read), briefly.
        with anyio.move_on_after(_CLOSE_GRACE):
            while self._out or self._unsent or self.outstanding:
                with anyio.move_on_after(0.05):
                    await self._space.park()

    def _no_room(self) -> bool:
        handler = self._handler
        config = handler.config
        return (
            self._unsent >= config.max_unsent_bytes
            or handler.saturated
            or (self._unsent > 0 and handler.stats.unsent_bytes >= config.max_unsent_bytes_total)
        )

    async def _wait_for_room(self) -> None:
        """Return once this connection may take another request (backpressure point). Time
        spent here does not count against the frame being received."""
        handler = self._handler
        config = handler.config
        started = self._clock()
        while True:
            unsent = self._unsent
            if unsent >= config.max_unsent_bytes or (
                unsent > 0 and handler.stats.unsent_bytes >= config.max_unsent_bytes_total
            ):
                # Its own answers must go first (the writer wakes us as they do).
                handler.stats.stalled_connections += 1
                try:
                    await self._space.park()
                finally:
                    handler.stats.stalled_connections -= 1
            elif handler.saturated:
                await handler.capacity.park()
            else:
                break
        self._deadline += self._clock() - started

    async def _reader(self) -> None:
        handler = self._handler
        config = handler.config
        decoder = FrameDecoder(config.max_frame_size)
        receive = _Receiver(self._stream, handler)
        try:
            await self._read_frames(receive, decoder)
        finally:
            receive.release()
            handler.stats.partial_frame_bytes -= self._partial
            self._partial = 0

    async def _read_frames(self, receive: _Receiver, decoder: FrameDecoder) -> None:
        while True:
            if self._no_room():
                await self._wait_for_room()
            if self._deadline == math.inf and receive.serves_readable:
                # No deadline to keep: take chunks from the loop's reader callback (no task
                # wakes per request) until a deadline, a lack of room or the end stops it.
                try:
                    await receive.serve(
                        functools.partial(self._chunk_by_callback, decoder, receive)
                    )
                except _Paused as paused:
                    if paused.data is not None:
                        await self._finish_chunk(decoder, paused.data)
                    continue
                except _Ended:
                    return
            if self._deadline != math.inf:
                if not await self._receive_under_deadline(receive, decoder):
                    return
                continue
            data = await receive()
            if not data:
                return
            if not self._start_chunk(decoder, data):
                await self._finish_chunk(decoder, data)

    async def _receive_under_deadline(self, receive: _Receiver, decoder: FrameDecoder) -> bool:
        """Receive and take chunks while a deadline holds, under one cancel scope moved with
        the deadline (a scope per receive cost more than the receive: TLS hands over a
        16 KiB record per read), until the deadline ends or room runs out; False at the end
        of the stream."""
        unfinished: bytes | bytearray | memoryview | None = None
        with anyio.CancelScope(deadline=self._deadline) as scope:
            while True:
                data = await receive()
                if not data:
                    return False
                if not self._start_chunk(decoder, data):
                    unfinished = data
                    break
                if self._deadline == math.inf or self._no_room():
                    return True
                if scope.deadline != self._deadline:
                    scope.deadline = self._deadline
        if unfinished is None:  # (only a cancellation by the deadline leaves the loop so)
            self._timed_out(decoder.buffered)
        await self._finish_chunk(decoder, unfinished)  # (time waiting for room is not counted)
        return True

    def _chunk_by_callback(self, decoder: FrameDecoder, receive: _Receiver) -> None:
        """The reader callback: take what the socket holds, if anything. Raises to hand the
        connection back to the reader task: _Ended at the end, _Paused when a deadline
        starts or room runs out."""
        data = receive.now()
        if data is None:
            return  # (woken with nothing to read)
        if not data:
            raise _Ended
        if not self._start_chunk(decoder, data):
            raise _Paused(data)
        if self._deadline != math.inf or self._no_room():
            raise _Paused(None)

    def _start_chunk(self, decoder: FrameDecoder, data: bytes | bytearray | memoryview) -> bool:
        """Take a chunk received: handle its whole frames. False if it stopped for room with
        frames left (then :meth:`_finish_chunk`)."""
        self.last_active = self._clock()
        decoder.feed(data)
        self._fed += len(data)
        self._frames = 0
        if not self._handle_frames(decoder, data):
            return False
        self._chunk_taken(decoder, data)
        return True

    async def _finish_chunk(
        self, decoder: FrameDecoder, data: bytes | bytearray | memoryview
    ) -> None:
        """Handle the rest of a chunk's frames as room allows."""
        while True:
            await self._wait_for_room()
            if self._handle_frames(decoder, data):
                self._chunk_taken(decoder, data)
                return

    def _chunk_taken(self, decoder: FrameDecoder, data: bytes | bytearray | memoryview) -> None:
        """After a chunk's whole frames: the deadline, and the partial frame's budget."""
        handler = self._handler
        config = handler.config
        # What is left in the decoder is the start of a frame: count it against the
        # bookie's budget for partial frames.
        held = decoder.buffered
        frames = self._frames
        if frames:
            self.spoke = True
        if self.spoke:  # (until then the first request's deadline holds)
            if not held:
                self._deadline = math.inf  # between frames a peer may wait at will
            elif frames or not self._partial:
                # A frame started in this chunk: it must be whole within frame_timeout.
                self._deadline = self.last_active + config.frame_timeout
                self.frame_since = self.last_active
        handler.stats.partial_frame_bytes += held - self._partial
        self._partial = held
        limit = config.max_partial_frame_bytes
        if held > _PARTIAL_FREE and handler.stats.partial_frame_bytes > limit:
            refuse_frame(
                self,
                handler.bad_input,
                data,
                self._fed,
                self._consumed,
                f"the bookie holds too many partly received frames (limit {limit} bytes)",
                StatusCode.TOO_MANY_REQUESTS,
                "too_many_partial_frames",
            )
            raise _Close

    def _handle_frames(self, decoder: FrameDecoder, data: bytes | bytearray | memoryview) -> bool:
        """Handle the whole frames the decoder holds: True once none is left, False if the
        connection ran out of room first. The adds handled together reach the group commit
        together (a lone one may be committed at the end: handler.flush_commits)."""
        handler = self._handler
        handler.defer_commits()
        try:
            while True:
                # Checked per request, not per chunk: one chunk of small reads can ask for
                # far more answer bytes than the limits allow.
                if self._no_room():
                    return False
                try:
                    body = decoder.next_frame()
                except FrameTooLargeError as exc:
                    refuse_frame(self, handler.bad_input, data, self._fed, self._consumed, str(exc))
                    raise _Close from exc
                except RemoteProtocolError as exc:
                    handler.bad_input.report("bad_frame", peer=self.peer, error=str(exc))
                    raise _Close from exc
                if body is None:
                    return True
                self._frames += 1
                self._consumed += 4 + len(body)
                try:
                    message = decode_message(body)
                except RemoteProtocolError as exc:
                    if not refuse_message(self, handler.bad_input, body, exc):
                        raise _Close from exc
                    continue
                if self.authenticated:
                    handler.handle(self, body, message)
                else:
                    self._authenticate(message)
        finally:
            handler.flush_commits()

    def _timed_out(self, held: int) -> NoReturn:
        """The reader's deadline passed: report it and close (no answer: nothing to answer)."""
        handler = self._handler
        config = handler.config
        handler.stats.connections_timed_out += 1
        if not self.spoke:
            kind = "first_request_timeout"
            error = f"no whole request within {config.first_request_timeout:g} s of connecting"
        else:
            kind = "frame_timeout"
            error = f"a frame not whole within {config.frame_timeout:g} s ({held} bytes came)"
        handler.bad_input.report(kind, peer=self.peer, error=error)
        raise _TimedOut

    def _authenticate(self, message: Message) -> None:
        handler = self._handler
        assert handler.authenticator is not None
        if not authenticate(self, handler.authenticator, handler.stats, handler.bad_input, message):
            raise _Close

    async def serve(self) -> None:
        handler = self._handler
        handler.stats.connections += 1
        by_address = handler.connections_by_address
        by_address[self.address] = by_address.get(self.address, 0) + 1
        handler.stats.connections_opened += 1
        handler.client_connections.add(self)
        self._counted = True
        try:
            async with anyio.create_task_group() as tasks:
                self.tasks = tasks
                tasks.start_soon(self._writer)
                refused = False
                try:
                    await self._reader()
                except _Close:
                    refused = True
                except _TimedOut:
                    tasks.cancel_scope.cancel()
                await self._drain()
                if refused and not self._out and not self._unsent:
                    # (with answers still queued the writer is still sending: it is broken)
                    await linger(self._stream, grace=_CLOSE_GRACE, limit=REFUSE_DRAIN)
                tasks.cancel_scope.cancel()
        finally:
            self.closed = True
            handler.client_connections.discard(self)
            handler.stats.unsent_bytes -= self._unsent
            self._unsent = 0
            self._out = []
            handler.answers_taken(self)
            self._uncount()

    def _uncount(self) -> None:
        if not self._counted:
            return
        self._counted = False
        handler = self._handler
        handler.stats.connections -= 1
        by_address = handler.connections_by_address
        left = by_address[self.address] - 1
        if left:
            by_address[self.address] = left
        else:
            del by_address[self.address]


def send_pieces(parts: Sequence[bytes | memoryview]) -> Iterator[bytes | memoryview]:
    """Queued answers as pieces of about ``_SEND_PIECE`` bytes: small parts joined (one
    send for many answers), big ones sliced (never copied)."""
    if len(parts) == 1 and len(parts[0]) <= _SEND_PIECE:
        yield parts[0]
        return
    small: list[bytes | memoryview] = []
    size = 0
    for part in parts:
        if len(part) >= _SEND_PIECE // 4:
            if small:
                yield small[0] if len(small) == 1 else b"".join(small)
                small, size = [], 0
            view = memoryview(part)
            for at in range(0, len(part), _SEND_PIECE):
                yield view[at : at + _SEND_PIECE]
            continue
        small.append(part)
        size += len(part)
        if size >= _SEND_PIECE:
            yield b"".join(small)
            small, size = [], 0
    if small:
        yield small[0] if len(small) == 1 else b"".join(small)


class _Receiver:
    """Returns the next chunk of a stream (empty at EOF) when called.

    On TCP it receives into one reused buffer: a fresh 1 MiB bytes object per receive costs
    page faults that show at hundreds of MiB/s. The buffer is allocated once the socket has
    something to read and grows with what arrives (see FIRST_RECEIVE_SIZE); its size is
    counted in ``handler.stats.receive_buffer_bytes`` until :meth:`release`. The decoder copies
    what it keeps.
    """

    __slots__ = ("_buffer", "_fd", "_handler", "_loop", "_receiver", "_size", "_stream", "_view")

    def __init__(self, stream: anyio.abc.ByteStream, handler: RequestHandler) -> None:
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
