"""Connections: a reader hands requests to the bookie, a writer coalesces the answers.

One reader (:mod:`._intake`: frames in large chunks, deadlines, the loop's reader callback)
and one writer task per connection; no task per request on the add path. Answers queued while
the writer was busy (for example all the adds of one group commit) go out in one ``send_all``.
Backpressure: the reader stops reading its socket while the bookie is at its in-flight limits
or while this connection has too many answers its peer has not read.

Peers that hold a connection without using it are cut off: its reader keeps the deadlines of
requests and frames, and its peer must take queued answers within ``send_timeout``. At
``max_connections`` a newcomer closes the connection idle longest instead of being refused
(``_admission``), and while the answers queued over all connections are at their bound, a
connection whose peer takes none of them is closed after ``evict_unread_after`` (see
``RequestHandler``).

A connection's authentication is in :mod:`._authentication`; what bad input is reported and
answered, in :mod:`._refusals`; the linger before closing, in :mod:`._linger`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Protocol, final

import anyio
import anyio.abc

from walkit.net import principal_of
from walkit.shared import (
    ParkingLot,
    current_loop,
    direct_fd,
    get_logger,
    unwritten,
    write_now,
)
from walkit_bookie.server._authentication import on_connect
from walkit_bookie.server._intake import Close, Handler, Intake, TimedOut
from walkit_bookie.server._linger import linger
from walkit_bookie.server._peer import Peer
from walkit_bookie.server._refusals import REFUSE_DRAIN

log = get_logger(__name__)

_CLOSE_GRACE = 1.0  # seconds to flush answers before closing a connection
#: The writer sends queued answers in pieces of about this size (joining small ones, slicing
#: big ones): never a copy of everything queued, and ``send_timeout`` is per piece.
_SEND_PIECE = 1024 * 1024


class RequestHandler(Handler, Protocol):
    """What a connection needs from the bookie (its reader's needs: :class:`Handler`)."""

    #: Held while a group commit answers its adds: one write per connection at the end.
    cork: Cork
    #: Connections wait here for room while the bookie is ``saturated``.
    capacity: ParkingLot
    #: Open client connections by the peer's address (host), for
    #: ``max_connections_per_address``.
    connections_by_address: dict[str, int]
    client_connections: set[Connection]

    @property
    def saturated(self) -> bool: ...

    def answers_taken(self, conn: Peer) -> None:
        """Some of ``conn``'s queued answers were sent (or dropped as it closed)."""


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


@final
class Connection:
    """One client connection. ``send`` queues a frame; the writer task sends queued frames."""

    __slots__ = (
        "_clock",
        "_cork",
        "_corked",
        "_counted",
        "_direct_fd",
        "_handler",
        "_out",
        "_space",
        "_stats",
        "_unsent",
        "_writer_idle",
        "address",
        "authenticated",
        "closed",
        "deadline",
        "frame_since",
        "last_active",
        "opened",
        "outstanding",
        "partial",
        "peer",
        "principal",
        "spoke",
        "stream",
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
        self.stream = stream
        self._out: list[bytes | memoryview] = []
        self._unsent = 0
        self.partial = 0  # bytes of a partly received frame, counted in the handler's budget
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
        self.deadline = self.opened + handler.config.first_request_timeout
        self._counted = False  # counted in handler.stats.connections
        self._stats = handler.stats

    @property
    def unsent(self) -> int:
        return self._unsent

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
        stream = self.stream
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

    def no_room(self) -> bool:
        handler = self._handler
        config = handler.config
        return (
            self._unsent >= config.max_unsent_bytes
            or handler.saturated
            or (self._unsent > 0 and handler.stats.unsent_bytes >= config.max_unsent_bytes_total)
        )

    async def wait_for_room(self) -> None:
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
        self.deadline += self._clock() - started

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
                    await Intake(self, handler).run()
                except Close:
                    refused = True
                except TimedOut:
                    tasks.cancel_scope.cancel()
                await self._drain()
                if refused and not self._out and not self._unsent:
                    # (with answers still queued the writer is still sending: it is broken)
                    await linger(self.stream, grace=_CLOSE_GRACE, limit=REFUSE_DRAIN)
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
