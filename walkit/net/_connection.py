"""One connection to one bookie, shared by every ledger of a client.

Requests are enqueued synchronously (:meth:`BookieConnection.send`) with a request id, a
handler and a tag; the outbox's task (:mod:`walkit.net._outbox`) writes everything queued at
once (coalescing is worth ~10x for small frames), a reader task decodes responses and calls the
handler of each request id. No task per request: the writer's acks and the reader's entries arrive as calls.

Failures are answers too: a request that gets no answer before its deadline gets a
:class:`~walkit.errors.BookieTimeoutError`; when the connection cannot be made or breaks, every
request on it gets a :class:`~walkit.errors.BookieUnavailableError`. The next request after a
failure reconnects.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Sequence
from typing import Final, Protocol, final

import anyio
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSStream

from walkit._core.types import BookieId
from walkit._core.wire import (
    ADD_RESPONSE_FRAME,
    ADD_RESPONSE_HEAD,
    DEFAULT_MAX_FRAME_SIZE,
    AddFlag,
    AddResponse,
    AuthResponse,
    BatchReadResponse,
    CopyFragmentResponse,
    ErrorResponse,
    ReadLacResponse,
    ReadResponse,
    Request,
    Response,
    StatusCode,
    WriteLacResponse,
    decode_message,
    encode_adds_into,
    encode_frame,
    frame_length,
)
from walkit._logging import get_logger
from walkit._loop import EventLoop, current_loop
from walkit.errors import (
    AuthenticationError,
    BookieTimeoutError,
    BookieUnavailableError,
    ClientClosedError,
    RemoteProtocolError,
    TLSError,
    WalkitError,
)
from walkit.net._inbox import Inbox
from walkit.net._network import STREAM_ERRORS, ClientStream, Network
from walkit.net._outbox import Outbox
from walkit.net._receive import Receiver
from walkit.net._socket import SocketStream
from walkit.net._tls import tls_failure

log = get_logger(__name__)

__all__ = ["BookieConnection", "ResponseHandler"]

_RESPONSES = (
    AddResponse,
    BatchReadResponse,
    CopyFragmentResponse,
    ReadResponse,
    ReadLacResponse,
    WriteLacResponse,
    ErrorResponse,
    AuthResponse,
)

#: Bytes asked from the socket at a time.
_RECEIVE_SIZE: Final = 256 * 1024
#: Largest TLS record's plaintext.
_TLS_RECORD: Final = 16 * 1024


class ResponseHandler(Protocol):
    """Receives the outcome of requests sent with :meth:`BookieConnection.send`.

    Exactly one of the two is called per request, from the connection's tasks; handlers must not
    block or raise.
    """

    def on_response(self, tag: int, status: int, msg: Response | None) -> None:
        """An answer. ``msg`` is None for add responses (``tag`` and ``status`` say it all)."""

    def on_error(self, tag: int, error: WalkitError) -> None:
        """No answer: a timeout, a broken connection, or a client shutting down."""


@final
class _Waiter:
    """Turns one request's callback into something a task can await."""

    __slots__ = ("error", "event", "response")

    def __init__(self) -> None:
        self.event = anyio.Event()
        self.response: Response | None = None
        self.error: WalkitError | None = None

    def on_response(self, tag: int, status: int, msg: Response | None) -> None:
        self.response = msg
        self.event.set()

    def on_error(self, tag: int, error: WalkitError) -> None:
        self.error = error
        self.event.set()


# Pending request record: (handler, tag, deadline, time sent).
_Record = tuple[ResponseHandler, int, float, float]


@final
class BookieConnection:
    """The client's connection to one bookie (see the module docstring)."""

    def __init__(
        self,
        bookie: BookieId,
        network: Network,
        *,
        loop: EventLoop | None = None,
        connect_timeout: float,
        on_failure: Callable[[BookieId], None] | None = None,
        on_activity: Callable[[], None] | None = None,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self.bookie = bookie
        self._network = network
        self._loop = loop = loop if loop is not None else current_loop()
        self._time = loop.time
        self._connect_timeout = connect_timeout
        self._on_failure = on_failure
        self._on_activity = on_activity
        self._max_frame_size = max_frame_size
        self._next_rid = 1
        self._pending: dict[int, _Record] = {}
        self._outbox = Outbox(loop)
        self._wanted = anyio.Event()
        self._connected = False
        self._connecting = False
        self._closed = False
        self._error: WalkitError | None = None
        self._tls_unconfirmed = False
        self._min_timeout = float("inf")
        #: Statistics (for tests and benchmarks).
        self.connects = 0

    def __repr__(self) -> str:
        return f"BookieConnection({self.bookie}, pending={len(self._pending)})"

    @property
    def connected(self) -> bool:
        return self._connected

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def sends(self) -> int:
        """Writes made to the socket (for tests and benchmarks)."""
        return self._outbox.sends

    # --- sending ---------------------------------------------------------------------------

    def new_request_id(self) -> int:
        rid = self._next_rid
        self._next_rid = rid + 1
        return rid

    def send(
        self,
        parts: Sequence[bytes],
        request_id: int,
        handler: ResponseHandler,
        tag: int,
        timeout: float,
        now: float | None = None,
    ) -> None:
        """Queue one encoded request (its frame split in ``parts``); its outcome goes to
        ``handler`` with ``tag``. Never blocks; never calls the handler before returning.
        ``now`` (the loop's clock) saves reading the clock when the caller has it."""
        if self._closed:
            raise ClientClosedError(f"connection to bookie {self.bookie} is closed")
        if now is None:
            now = self._time()
        if not self._pending and self._on_activity is not None:
            self._on_activity()
        self._pending[request_id] = (handler, tag, now + timeout, now)
        if timeout < self._min_timeout:
            self._min_timeout = timeout
        out = self._outbox.parts
        idle = not out
        out.extend(parts)
        if idle:
            self._outbox.kick()
        if not self._connected and not self._connecting:
            self._connecting = True
            self._wanted.set()

    def send_adds(
        self,
        ledger_id: int,
        master_key: bytes,
        entries: Sequence[tuple[int, bytes]],
        handler: ResponseHandler,
        timeout: float,
        now: float,
        flags: AddFlag = AddFlag.NONE,
    ) -> None:
        """Queue an AddRequest per ``(entry_id, packet)``; each answer goes to ``handler``
        with the entry id as tag. The writer's hot path: one call per batch and bookie."""
        if self._closed:
            raise ClientClosedError(f"connection to bookie {self.bookie} is closed")
        if not entries:
            return
        pending = self._pending
        if not pending and self._on_activity is not None:
            self._on_activity()
        out = self._outbox.parts
        idle = not out
        if timeout < self._min_timeout:
            self._min_timeout = timeout
        deadline = now + timeout
        rid = self._next_rid
        for entry_id, _ in entries:
            pending[rid] = (handler, entry_id, deadline, now)
            rid += 1
        self._next_rid = encode_adds_into(
            out, self._next_rid, ledger_id, master_key, entries, flags
        )
        if idle:
            self._outbox.kick()
        if not self._connected and not self._connecting:
            self._connecting = True
            self._wanted.set()

    async def call(self, build: Callable[[int], Request], timeout: float) -> Response:
        """Send the request ``build(request_id)`` and wait for its answer (any status).

        Raises BookieTimeoutError, BookieUnavailableError, or ClientClosedError.
        """
        rid = self.new_request_id()
        frame = encode_frame(build(rid))
        waiter = _Waiter()
        self.send((frame,), rid, waiter, 0, timeout)
        try:
            await waiter.event.wait()
        finally:
            self._pending.pop(rid, None)
        if waiter.error is not None:
            raise waiter.error
        if waiter.response is None:  # pragma: no cover - only add responses come without a body
            raise RemoteProtocolError(f"bookie {self.bookie} answered without a message")
        return waiter.response

    # --- timeouts --------------------------------------------------------------------------

    def expire(self, now: float) -> int:
        """Fail requests whose deadline passed; returns how many are still pending."""
        pending = self._pending
        if not pending:
            return 0
        # Requests are in send order; one sent after ``cutoff`` cannot have expired, nor can
        # any later one, whatever its timeout.
        cutoff = now - self._min_timeout
        expired: list[int] = []
        for rid, rec in pending.items():
            if rec[3] > cutoff:
                break
            if rec[2] <= now:
                expired.append(rid)
        if expired:
            self._report_failure()
            for rid in expired:
                rec = pending.pop(rid)
                self._notify_error(
                    rec,
                    BookieTimeoutError(
                        f"bookie {self.bookie} did not answer within {rec[2] - rec[3]:.3g} s"
                    ),
                )
        return len(pending)

    # --- running ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Connect when there is something to send; serve the connection until it breaks; fail
        what was pending; wait for the next request. Runs until cancelled (the client closes)."""
        try:
            while True:
                await self._wanted.wait()
                self._wanted = anyio.Event()
                stream = await self._connect()
                if stream is None:
                    continue
                self._connected = True
                self._connecting = False
                self.connects += 1
                try:
                    await self._serve(stream)
                finally:
                    self._connected = False
                    with anyio.CancelScope(shield=True):
                        await anyio.aclose_forcefully(stream)
                self._fail_all(
                    self._error or BookieUnavailableError(f"connection to {self.bookie} closed")
                )
        finally:
            self._closed = True
            self._fail_all(ClientClosedError("the client is closed"))

    async def _connect(self) -> ClientStream | None:
        error: WalkitError
        try:
            with anyio.fail_after(self._connect_timeout):
                return await self._network.connect(self.bookie)
        except TimeoutError:
            error = BookieUnavailableError(
                f"cannot connect to bookie {self.bookie}: no answer within "
                f"{self._connect_timeout:.3g} s"
            )
        except BookieUnavailableError as exc:
            error = exc
        except OSError as exc:
            error = BookieUnavailableError(f"cannot connect to bookie {self.bookie}: {exc}")
        log.debug("bookie_connect_failed", bookie=str(self.bookie), error=str(error))
        self._connecting = False
        self._fail_all(error)
        return None

    async def _serve(self, stream: ClientStream) -> None:
        self._error = None
        # Under TLS 1.3 a bookie checks the client's certificate after the client's side of
        # the handshake is done: a refusal can reach us as a plain reset before any answer.
        self._tls_unconfirmed = isinstance(stream, TLSStream)
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._send_loop, stream, tasks.cancel_scope)
            tasks.start_soon(self._receive_loop, stream, tasks.cancel_scope)

    def _lost(self, exc: BaseException) -> WalkitError:
        """The error for a broken stream: a TLSError when TLS broke it (a client certificate
        the bookie requires or refuses shows only here, after the handshake)."""
        failure = tls_failure(self.bookie, exc, handshaken=True)
        if failure is None and self._tls_unconfirmed:
            failure = TLSError(
                f"bookie {self.bookie} closed the TLS connection before answering anything "
                f"({exc!r}): it may require a client certificate (TLSConfig.cert and key) or "
                "not trust this one (its --tls-ca)"
            )
        return failure or BookieUnavailableError(
            f"lost connection to bookie {self.bookie}: {exc!r}"
        )

    def _broken(self, error: WalkitError, scope: anyio.CancelScope) -> None:
        if self._error is None:
            self._error = error
            log.info("bookie_connection_lost", bookie=str(self.bookie), error=str(error))
        scope.cancel()

    async def _send_loop(self, stream: ClientStream, scope: anyio.CancelScope) -> None:
        try:
            await self._outbox.run(stream)
        except STREAM_ERRORS as exc:
            self._broken(self._lost(exc), scope)
        except WalkitError as exc:
            self._broken(
                BookieUnavailableError(f"lost connection to bookie {self.bookie}: {exc}"), scope
            )

    async def _receive_loop(self, stream: ClientStream, scope: anyio.CancelScope) -> None:
        try:
            if isinstance(stream, SocketStream):
                # (taken as the raw socket: the stream's own watch, kept by an authentication
                # read through it, ends; this reader keeps the only one)
                await self._receive_into(stream.extra(SocketAttribute.raw_socket))
            else:
                await self._receive_some(stream)
        except STREAM_ERRORS as exc:
            self._broken(self._lost(exc), scope)
        except RemoteProtocolError as exc:
            self._broken(
                BookieUnavailableError(f"bookie {self.bookie} broke the protocol: {exc}"), scope
            )
        except WalkitError as exc:
            self._broken(exc, scope)

    async def _receive_into(self, sock: socket.socket) -> None:
        """A plain socket: it writes straight into one reused buffer (see walkit.net._inbox)."""
        inbox = Inbox(_RECEIVE_SIZE, self._max_frame_size)
        if self._loop.serves_readable:
            await self._receive_by_callback(sock, inbox, self._loop)
            return
        receiver = Receiver(sock, self._loop)
        while True:
            count = await receiver.receive_into(inbox.space())
            if not count:
                raise self._lost(EOFError("the bookie closed the connection"))
            inbox.received(count)
            with inbox.data() as data:
                inbox.consume(self._dispatch(data))

    async def _receive_by_callback(
        self, sock: socket.socket, inbox: Inbox, loop: EventLoop
    ) -> None:
        """On asyncio, answers are read and dispatched from the loop's reader callback: one
        loop round from the socket to the waiting append, as asyncio's transports do, where a
        receive task would add a round and two epoll changes per wait."""
        fd = sock.fileno()

        def readable() -> None:
            try:
                count = os.readv(fd, (inbox.space(),))
            except BlockingIOError:
                return
            if not count:
                raise self._lost(EOFError("the bookie closed the connection"))
            inbox.received(count)
            with inbox.data() as data:
                inbox.consume(self._dispatch(data))

        await loop.serve_readable(sock, readable)

    async def _receive_some(self, stream: ClientStream) -> None:
        """TLS (and in-memory streams): take what the stream gives."""
        buffer = bytearray()
        # TLS: a read allocates what it asks for, and records are at most 16 KiB.
        size = _TLS_RECORD if isinstance(stream, TLSStream) else _RECEIVE_SIZE
        while True:
            try:
                data = await stream.receive(size)
            except anyio.EndOfStream:
                raise self._lost(EOFError("the bookie closed the connection")) from None
            self._tls_unconfirmed = False
            if buffer:
                buffer += data
                used = self._dispatch(buffer)
                if used:
                    del buffer[:used]
            else:
                # Whole frames are taken straight from what was received; only a partial
                # frame at its end is kept (saves a copy of every large answer).
                used = self._dispatch(data)
                if used < len(data):
                    buffer += memoryview(data)[used:]

    def _dispatch(self, buffer: bytes | bytearray | memoryview) -> int:
        """Hand every complete frame in ``buffer`` to its handler; return bytes consumed."""
        pos = 0
        size = len(buffer)
        pending = self._pending
        max_frame_size = self._max_frame_size
        unpack_add = ADD_RESPONSE_FRAME.unpack_from
        add_size = ADD_RESPONSE_FRAME.size
        add_length, add_version, add_type = ADD_RESPONSE_HEAD
        while size - pos >= 4:
            if size - pos >= add_size:
                # The hot path of the writer: one unpack, no message object.
                length, version, mtype, rid, status, ledger_id, entry_id = unpack_add(buffer, pos)
                if length == add_length and mtype == add_type and version == add_version:
                    pos += add_size
                    rec = pending.pop(rid, None)
                    if rec is not None:
                        msg: Response | None = None
                        if type(rec[0]) is _Waiter:  # an awaited call wants the message
                            msg = AddResponse(rid, _status(status), ledger_id, entry_id)
                        try:
                            rec[0].on_response(rec[1], status, msg)
                        except Exception:  # a handler bug must not kill the connection
                            log.exception("response_handler_failed", bookie=str(self.bookie))
                    continue
            length = frame_length(buffer, pos, max_frame_size)
            if length is None or pos + 4 + length > size:
                break
            end = pos + 4 + length
            with memoryview(buffer) as view:  # decoded with no copy of the frame
                decoded = decode_message(view[pos + 4 : end])
            if not isinstance(decoded, _RESPONSES):
                raise RemoteProtocolError(f"got a {type(decoded).__name__} from a bookie")
            if isinstance(decoded, ErrorResponse) and decoded.status == StatusCode.AUTH_REQUIRED:
                # The bookie closes the connection after this: fail everything on it.
                raise AuthenticationError(f"bookie {self.bookie}: {decoded.message}")
            rec = pending.pop(decoded.request_id, None)
            if (
                rec is None
                and isinstance(decoded, ErrorResponse)
                and decoded.status == StatusCode.TLS_REQUIRED
            ):
                raise TLSError(
                    f"bookie {self.bookie} serves TLS only ({decoded.message}); connect with "
                    "walkit.Client.connect(url, tls=walkit.TLSConfig(...))"
                )
            if rec is not None:
                try:
                    rec[0].on_response(rec[1], int(decoded.status), decoded)
                except Exception:
                    log.exception("response_handler_failed", bookie=str(self.bookie))
            pos = end
        return pos

    # --- failing ---------------------------------------------------------------------------

    def _report_failure(self) -> None:
        if self._on_failure is not None:
            self._on_failure(self.bookie)

    def _notify_error(self, rec: _Record, error: WalkitError) -> None:
        try:
            rec[0].on_error(rec[1], error)
        except Exception:
            log.exception("response_handler_failed", bookie=str(self.bookie))

    def _fail_all(self, error: WalkitError) -> None:
        self._outbox.clear()
        if not self._pending:
            return
        if not isinstance(error, ClientClosedError):
            self._report_failure()
        pending = self._pending
        self._pending = {}
        for rec in pending.values():
            # A fresh error per request: one exception object must not be raised in two tasks.
            self._notify_error(rec, type(error)(str(error)))


def _status(value: int) -> StatusCode:
    try:
        return StatusCode(value)
    except ValueError:
        raise RemoteProtocolError(f"unknown status code {value}") from None
