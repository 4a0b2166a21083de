"""A small HTTP/1.1 server for the KV service: asyncio (uvloop when installed) and httptools.

httptools (llhttp, the parser of Node.js and uvicorn, in C) parses; an ``asyncio.Protocol``
per connection moves bytes, so reading, parsing and writing cost no Python per byte and no
task per connection. h11 did the same on trio at ~150 µs of CPU per request, this does it at
~15-20 µs: most of the service's CPU per PUT was there. The strictness h11 gave stays at the
edges: a request head over ``MAX_HEAD`` bytes gets 431, a body over ``max_body`` 413 (from
its ``Content-Length`` before it arrives, else as it arrives), bytes that are not HTTP/1.x
400, an upgrade 400; each closes the connection and the server lives on.

A handler returns a :class:`Response`, or an awaitable of one (a coroutine, or a future that
the application completes: the KV service answers a whole group commit from one loop, with no
task per request). Requests pipelined on one connection are answered in order.

Peers cannot hold the server without using it: connections are capped, a keep-alive
connection waits at most ``idle_timeout`` for its next request, and a request must arrive
whole (and its answer be taken) within ``request_timeout``. At the cap a newcomer closes the
connection idle longest, else the one whose request has been arriving longest, else the one
whose answer has gone untaken longest, and gets a 503 only if every handler is running. The
deadlines are checked by one sweep per server every few hundredths of a second, so a request
costs a float store, not a timer.

What a connection holds is bounded by construction (docs/kv.md, "Limits"): the bytes of an
unfinished head are counted as they arrive, not when a header line ends (httptools keeps the
line in one growing object until then); reading and answering pause while the peer leaves
``MAX_UNSENT`` bytes of answers untaken, and it is closed if it takes nothing for
``request_timeout``; a connection answers at most ``TURN`` requests per turn of the loop; a
refused request is answered after the requests before it, then the connection closes.
"""

from __future__ import annotations

import asyncio
import http
import json
import os
import resource
import time
import urllib.parse
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, cast, final

import anyio
import anyio.abc
import attrs
import httptools

#: Largest request head (request line and headers) accepted.
MAX_HEAD = 16 * 1024
#: Requests read ahead of the one being answered, on one connection, before reading pauses.
MAX_PIPELINED = 32
#: Bytes of requests (bodies and heads) read ahead on one connection before reading pauses.
MAX_QUEUED_BYTES = 128 * 1024
#: Bytes handed to the parser at a time. Between slices the connection counts the bytes of an
#: unfinished head (httptools keeps an unfinished header in one growing bytes object and
#: reports it only when its line ends) and stops parsing while answers are backed up, so one
#: slice is the most either can overshoot by.
SLICE = 4096
#: Answers (or slices parsed) per connection per turn of the event loop: a peer that pipelines
#: thousands of requests in one write gets them answered a few at a time, between the turns
#: of every other connection and of the service's own work (its metadata session included).
TURN = 8
#: Bytes of answers a connection buffers before it stops reading and answering, and waits for
#: its peer to take them (asyncio's write-buffer high-water mark; the low one is a quarter).
MAX_UNSENT = 64 * 1024
_REASONS = {int(s): s.phrase.encode() for s in http.HTTPStatus}
_STATUS_LINES = {code: b"HTTP/1.1 %d %s\r\n" % (code, reason) for code, reason in _REASONS.items()}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
#: A request's path when its percent-decoding is not UTF-8 (compared by identity): the
#: connection answers 400 and the handler never sees it.
BAD_PATH = "\x00 path not UTF-8"


@final
class Request:
    """One complete request (a plain class: one is made per request, on the hot path)."""

    __slots__ = ("body", "headers", "method", "path", "query", "received")

    def __init__(
        self,
        method: str,
        path: str,
        query: dict[str, str],
        headers: dict[str, str],
        body: bytes,
        received: float = 0.0,
    ) -> None:
        self.method = method
        self.path = path  # percent-decoded
        self.query = query
        self.headers = headers  # lower-case names
        self.body = body
        #: ``time.perf_counter()`` when the request was whole (for latency metrics).
        self.received = received


@final
class Response:
    __slots__ = ("body", "content_type", "headers", "status")

    def __init__(
        self,
        status: int,
        body: bytes = b"",
        headers: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
    ) -> None:
        self.status = status
        self.body = body
        self.headers = headers or []
        self.content_type = content_type

    def __repr__(self) -> str:
        return f"Response({self.status}, {self.body[:60]!r})"


def json_response(status: int, obj: Any, headers: list[tuple[str, str]] | None = None) -> Response:
    return Response(status, json.dumps(obj).encode() + b"\n", headers)


def error(status: int, message: str, headers: list[tuple[str, str]] | None = None) -> Response:
    return json_response(status, {"error": message}, headers)


Handler = Callable[[Request], "Response | Awaitable[Response]"]
#: Told of every answer, as it goes out (metrics): the request, the answer, the loop's time.
#: (``time.perf_counter()``: uvloop's clock counts whole milliseconds.)
Observer = Callable[[Request, Response, float], None]


def encode(response: Response, *, head: bool = False, close: bool = False) -> bytes:
    """The bytes of ``response``; for a HEAD request (``head``) its headers only, the length
    included. Header values must not hold CR or LF (they would split the answer)."""
    out = [
        _STATUS_LINES.get(response.status) or b"HTTP/1.1 %d \r\n" % response.status,
        b"content-type: %s\r\ncontent-length: %d\r\n"
        % (response.content_type.encode("latin-1"), len(response.body)),
    ]
    for name, value in response.headers:
        if "\r" in value or "\n" in value:
            raise ValueError(f"header {name!r} holds a line break")
        out.append(b"%s: %s\r\n" % (name.encode("latin-1"), value.encode("latin-1")))
    if close:
        out.append(b"connection: close\r\n")
    out.append(b"\r\n")
    if not head:
        out.append(response.body)
    return b"".join(out)


#: What a connection is doing, as the cap sees it. A newcomer at the cap closes one that is
#: idle between requests, else one whose request is arriving, else one whose answer its peer
#: is not taking; never one whose handler is running.
_IDLE, _ARRIVING, _ANSWERING, _SENDING = "idle", "arriving", "answering", "sending"
#: Refused, its answer sent and its side shut: reading and dropping what the peer still sends
#: (a close with unread bytes resets the connection, and the peer would lose the answer).
_LINGERING = "lingering"
_EVICTION_ORDER = {_LINGERING: -1, _IDLE: 0, _ARRIVING: 1, _SENDING: 2}
#: Seconds, and bytes, a refused connection drops of what its peer still sends before it closes.
LINGER = 2.0
LINGER_BYTES = 1 << 20


def _victim(slots: set[_Connection]) -> _Connection | None:
    """The connection a newcomer closes at the cap: the one idle longest between requests,
    else the one whose request has been arriving longest, else the one whose peer has left
    its answer untaken longest. Any age: a slowloris that reconnects at once keeps every one
    of its connections young, so an age threshold would let it hold all slots."""
    best: _Connection | None = None
    best_key = (len(_EVICTION_ORDER), 0.0)
    for slot in slots:
        rank = _EVICTION_ORDER.get(slot.state)
        if rank is None:
            continue
        key = (rank, slot.since)
        if key < best_key:
            best, best_key = slot, key
    return best


def default_max_connections() -> int:
    """Half the process's open-file limit, at most 1,024: the rest stays for the log client
    and the metadata store (at the limit, accept() fails and so does everything else)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1024
    return max(16, min(1024, soft // 2))


@final
@attrs.frozen
class Limits:
    """What one HTTP peer may hold."""

    #: Connections open at once; one more is answered 503 and closed. None: see
    #: :func:`default_max_connections`.
    max_connections: int | None = None
    #: Seconds a keep-alive connection may wait for the first byte of its next request.
    idle_timeout: float = 30.0
    #: Seconds from a request's first byte to its whole body, and to send its answer.
    request_timeout: float = 30.0


@final
class Stats:
    """Connection counts, for the service's metrics. kv_http keeps them all; on uvicorn only
    the open connections are known (``open_now`` reads uvicorn's own count)."""

    def __init__(self) -> None:
        self.open = 0
        #: Set by a server that counts its connections itself (uvicorn); None on kv_http.
        self.open_now: Callable[[], int] | None = None
        self.refused = 0
        self.idle_closed = 0
        self.timed_out = 0
        self.evicted = 0
        self.slots: set[_Connection] = set()

    def open_connections(self) -> int:
        """The connections open now, whichever server counts them."""
        return self.open_now() if self.open_now is not None else self.open


class _Refuse(Exception):
    """Raised in a parser callback: answer ``status`` with ``message`` and close."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@final
class _Server:
    def __init__(
        self,
        handler: Handler,
        max_body: int,
        limits: Limits,
        stats: Stats,
        observe: Observer | None,
    ) -> None:
        self.handler = handler
        self.observe = observe
        self.max_body = max_body
        self.limits = limits
        self.stats = stats
        self.cap = limits.max_connections or default_max_connections()
        self.loop = asyncio.get_running_loop()
        self.busy = encode(
            error(
                503, f"too many connections (limit {self.cap}); try again", [("retry-after", "1")]
            ),
            close=True,
        )

    async def sweep(self) -> None:
        """Close the connections whose deadline passed: idle ones, requests that do not
        arrive whole, answers not taken. Every few hundredths of a second, whatever the
        number of requests."""
        limits = self.limits
        tick = max(0.01, min(0.25, limits.idle_timeout / 20, limits.request_timeout / 20))
        while True:
            await asyncio.sleep(tick)
            now = self.loop.time()
            for conn in [c for c in self.stats.slots if c.deadline <= now]:
                conn.expire()


@final
class _Connection(asyncio.Protocol):
    """One HTTP connection: the parser's callbacks build requests; answers go out in order."""

    def __init__(self, server: _Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpRequestParser(self)
        self.state = _IDLE
        self.since = 0.0
        #: When the sweep closes this connection (inf: never, while its handler runs).
        self.deadline = float("inf")
        self.closed = False
        self._url = b""
        self._headers: dict[str, str] = {}
        self._body: list[bytes] = []
        self._body_size = 0
        self._head_size = 0
        self._in_message = False
        #: Requests whole and not answered yet (the first is being answered if ``_busy``).
        self._queue: deque[tuple[Request, bool, int]] = deque()
        self._busy = False
        self._paused_reading = False
        self._answer_head = False
        self._answer_close = False
        self._eof = False
        #: Bytes read and not yet parsed (parsing stops while answers are backed up).
        self._unparsed = b""
        #: Bytes parsed with no progress (a body byte or a head's end): an unfinished head or
        #: trailer section. Counted per slice, so at most ``SLICE`` over the truth.
        self._stalled = 0
        self._headers_done = False
        #: The peer is not taking answers (the write buffer is over its high-water mark).
        self._blocked = False
        self._blocked_deadline = float("inf")
        #: The answer (and close) owed after the queued requests' answers: a refused request.
        self._refusal: bytes | None = None
        self._parsing = False
        self._progress = False
        self._dropped = 0
        #: Bytes of the requests read ahead (bodies and heads), for ``MAX_QUEUED_BYTES``.
        self._queued_bytes = 0
        self._budget = TURN
        self._resuming = False

    @property
    def reading(self) -> bool:
        """Whether its request is arriving (for tests and metrics)."""
        return self.state == _ARRIVING

    def _enter(self, state: str, timeout: float | None) -> None:
        now = self.server.loop.time()
        if self._blocked:  # the peer takes nothing: its deadline holds whatever else happens
            self.state, self.since, self.deadline = _SENDING, now, self._blocked_deadline
            return
        self.state, self.since = state, now
        self.deadline = float("inf") if timeout is None else now + timeout

    # --- the connection's life ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports are not asyncio.Transport subclasses, but have its methods)
        self.transport = transport = cast(asyncio.Transport, transport)
        server, stats = self.server, self.server.stats
        if stats.open >= server.cap:
            victim = _victim(stats.slots)
            if victim is None:
                stats.refused += 1
                self.closed = True
                transport.write(server.busy)
                transport.close()
                return
            stats.evicted += 1
            victim.state = _ANSWERING  # not chosen twice
            victim.close(abort=True)
        stats.open += 1
        stats.slots.add(self)
        transport.set_write_buffer_limits(high=MAX_UNSENT)
        self._enter(_IDLE, server.limits.idle_timeout)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.transport is None:
            return
        if self in self.server.stats.slots:
            self.server.stats.slots.discard(self)
            self.server.stats.open -= 1
        self.closed = True
        self._queue.clear()
        self._unparsed = b""

    def close(self, *, abort: bool = False) -> None:
        if self.closed or self.transport is None:
            return
        self.closed = True
        self.deadline = float("inf")
        if abort:
            self.transport.abort()
        else:
            self.transport.close()

    def expire(self) -> None:
        """The sweep found this connection past its deadline."""
        stats = self.server.stats
        state = self.state
        if state == _IDLE:
            stats.idle_closed += 1
            self.close()
        elif state == _ARRIVING:
            stats.timed_out += 1
            why = f"request not received whole within {self.server.limits.request_timeout:g} s"
            self._refuse(408, why)
        elif state == _SENDING:
            stats.timed_out += 1  # the peer does not take its answer
            self.close(abort=True)
        elif state == _LINGERING:
            self.close()
        else:
            self.deadline = float("inf")

    def pause_writing(self) -> None:
        # The peer is not taking its answers: stop reading and answering (what is unsent stays
        # bounded), and give it request_timeout to take some, across pipelined requests.
        self._enter(_SENDING, self.server.limits.request_timeout)
        self._blocked, self._blocked_deadline = True, self.deadline
        self._pause_reading()

    def resume_writing(self) -> None:
        self._blocked, self._blocked_deadline = False, float("inf")
        self._budget = TURN
        if self.closed:
            return
        if self._busy:
            self._enter(_ANSWERING, None)  # its answer, when ready, answers on
        else:
            self._next()

    def _pause_reading(self) -> None:
        if not self._paused_reading and self.transport is not None and not self.closed:
            self._paused_reading = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._paused_reading and self.transport is not None and not self.closed:
            self._paused_reading = False
            self.transport.resume_reading()

    # --- reading --------------------------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        if self._refusal is not None:  # (reading resumes once the refusal went out)
            self._dropped += len(data)
            if self._dropped > LINGER_BYTES:
                self.close(abort=True)
            return
        if self.state == _IDLE:
            self._enter(_ARRIVING, self.server.limits.request_timeout)
        self._unparsed = self._unparsed + data if self._unparsed else data
        self._budget = TURN
        self._parse()

    def _backed_up(self) -> bool:
        return (
            self._blocked
            or len(self._queue) > MAX_PIPELINED
            or self._queued_bytes > MAX_QUEUED_BYTES
        )

    def _parse(self) -> None:
        """Feed what was read to the parser a slice at a time, while answers are not backed
        up; count the bytes of an unfinished head as they arrive."""
        if self._parsing:
            return  # (an answer went out from a parser callback: the loop below goes on)
        self._parsing = True
        try:
            self._parse_slices()
        finally:
            self._parsing = False
        if self._refusal is not None or self.closed:
            return  # (a refused connection reads only to drop, once its answer went out)
        if self._unparsed or self._backed_up():
            self._pause_reading()  # nothing more is read until this is parsed and answered
        else:
            self._resume_reading()

    def _turn(self) -> bool:
        """Take one unit of this turn's budget; when spent, go on at the loop's next turn."""
        if self._budget > 0:
            self._budget -= 1
            return True
        if not self._resuming:
            self._resuming = True
            self.server.loop.call_soon(self._resume)
        return False

    def _resume(self) -> None:
        self._resuming = False
        self._budget = TURN
        self._next()

    def _parse_slices(self) -> None:
        feed = self.parser.feed_data
        while self._unparsed and not self.closed and self._refusal is None:
            if self._backed_up() or not self._turn():
                return
            data = self._unparsed
            if len(data) > SLICE:
                piece, self._unparsed = data[:SLICE], data[SLICE:]
            else:
                piece, self._unparsed = data, b""
            self._progress = False
            try:
                feed(piece)
            except httptools.HttpParserCallbackError as exc:
                refused = exc.__context__
                if isinstance(refused, _Refuse):
                    self._refuse(refused.status, str(refused))
                else:
                    self._refuse(500, f"internal error: {type(refused).__name__}: {refused}")
                return
            except httptools.HttpParserUpgrade:
                self._refuse(400, "bad request: protocol upgrades are not served here")
                return
            except httptools.HttpParserError as exc:
                self._refuse(400, f"bad request: {exc}")
                return
            if not self._in_message:
                self._stalled = 0
            elif self._progress:
                self._stalled = len(piece)  # (an upper bound: the head began in this slice)
            else:
                self._stalled += len(piece)
            if self._stalled > MAX_HEAD + SLICE:
                if self._headers_done:
                    self._refuse(431, f"trailer section over {MAX_HEAD} bytes")
                else:
                    self._refuse(431, f"request head over {MAX_HEAD} bytes")
                return

    def eof_received(self) -> bool | None:
        self._eof = True
        if not self._busy and not self._queue:
            self.close()
        return True  # keep the transport: what is being answered still goes out, then close

    def on_message_begin(self) -> None:
        self._in_message = True
        self._url = b""
        self._headers = {}
        self._body = []
        self._body_size = 0
        self._head_size = 0
        self._headers_done = False
        self._progress = True
        if self.state == _IDLE:  # (pipelined: the previous answer went out meanwhile)
            self._enter(_ARRIVING, self.server.limits.request_timeout)

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._grow_head(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._grow_head(len(name) + len(value) + 4)
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        headers = self._headers
        if key in headers:  # one field, its values in order (RFC 9110 section 5.3)
            if key == "host":
                raise _Refuse(400, "bad request: more than one Host field")
            text = headers[key] + ", " + text
        headers[key] = text

    def _grow_head(self, size: int) -> None:
        self._head_size += size
        if self._head_size > MAX_HEAD:
            raise _Refuse(431, f"request head over {MAX_HEAD} bytes")

    def on_headers_complete(self) -> None:
        self._headers_done = self._progress = True
        parser, headers = self.parser, self._headers
        if parser.should_upgrade():  # (else the parser stops after this request)
            raise _Refuse(400, "bad request: protocol upgrades are not served here")
        version = parser.get_http_version()
        if version not in ("1.1", "1.0"):  # RFC 9110 section 15.6.6
            raise _Refuse(505, f"HTTP/{version} is not supported; this server speaks HTTP/1.1")
        coding = headers.get("transfer-encoding")
        if coding is not None:
            # RFC 9112 section 6.1: framing that HTTP/1.0 does not know is faulty; a coding
            # the server does not implement gets 501.
            if version == "1.0":
                raise _Refuse(400, "bad request: Transfer-Encoding in an HTTP/1.0 request")
            if coding.strip().lower() != "chunked":
                raise _Refuse(501, f"transfer coding {coding!r} not implemented (only chunked)")
        if version == "1.1" and "host" not in headers:  # RFC 9112 section 3.2
            raise _Refuse(400, "bad request: no Host field")
        max_body = self.server.max_body
        length = self._headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > max_body:
            raise _Refuse(413, f"body over {max_body} bytes")
        if self._headers.get("expect", "").lower() == "100-continue" and self.transport:
            self.transport.write(_CONTINUE)  # curl waits for it, for bodies over 1 KiB

    def on_body(self, body: bytes) -> None:
        self._progress = True
        self._body_size += len(body)
        if self._body_size > self.server.max_body:
            raise _Refuse(413, f"body over {self.server.max_body} bytes")
        self._body.append(body)

    def on_message_complete(self) -> None:
        self._in_message = False
        self._progress = True
        if self.closed:
            return
        request = _request(
            self.parser.get_method(),
            self._url,
            self._headers,
            b"".join(self._body),
            time.perf_counter(),
        )
        size = len(request.body) + self._head_size
        self._queue.append((request, self.parser.should_keep_alive(), size))
        self._queued_bytes += size
        if not self._busy and not self._blocked:
            self._next()

    # --- answering ------------------------------------------------------------------------

    def _next(self) -> None:
        """Answer the queued requests in order, while the peer takes the answers; a handler
        that answers later (an awaitable) resumes this loop when it does."""
        queue = self._queue
        while queue and not self._busy and not self._blocked and not self.closed:
            if not self._turn():
                return
            request, keep_alive, _size = queue[0]
            self._busy = True
            self._answer_head = request.method == "HEAD"
            self._answer_close = not keep_alive
            self._enter(_ANSWERING, None)
            if request.path is BAD_PATH:  # refused here; the connection serves on
                self._send(error(400, "bad request: the path is not UTF-8 once percent-decoded"))
                continue
            try:
                result = self.server.handler(request)
            except Exception as exc:  # the connection (and the process) lives on
                self._send(error(500, f"internal error: {type(exc).__name__}: {exc}"))
                continue
            if isinstance(result, Response):
                self._send(result)
                continue
            future = asyncio.ensure_future(result)
            future.add_done_callback(self._answered)
            return
        self._drained()

    def _answered(self, future: asyncio.Future[Response]) -> None:
        if future.cancelled():
            self.close(abort=True)
            return
        exc = future.exception()
        if exc is not None:
            self._send(error(500, f"internal error: {type(exc).__name__}: {exc}"))
        else:
            self._send(future.result())
        self._budget = TURN
        self._next()

    def _send(self, response: Response) -> None:
        """Write the answer to the oldest queued request."""
        if self.closed or self.transport is None:
            return  # the peer left (or was closed for a newcomer) while its handler ran
        request, _keep_alive, size = self._queue.popleft()
        self._queued_bytes -= size
        self._busy = False
        if self.server.observe is not None:
            self.server.observe(request, response, time.perf_counter())
        close = self._answer_close
        try:
            data = encode(response, head=self._answer_head, close=close)
        except ValueError as exc:
            data = encode(error(500, f"internal error: {exc}"), close=close)
        self.transport.write(data)  # (may call pause_writing)
        if close:
            self.close()

    def _drained(self) -> None:
        """No answer in progress: settle, send what is owed after the answers, read on."""
        if self.closed or self._busy or self._blocked or self._queue:
            return
        self._settle()
        if self._refusal is not None or self._eof:
            self._after_answers()
        if self._unparsed or self._paused_reading:
            self._parse()

    def _after_answers(self) -> None:
        """Every answer due has gone out: the refusal owed, or the close the peer asked for."""
        if self._queue or self._busy or self.closed or self.transport is None:
            return
        if self._refusal is not None:
            self.transport.write(self._refusal)
            if self._eof or not self.transport.can_write_eof():
                self.close()
                return
            self.transport.write_eof()  # the answer, then the end; drop what still comes
            self._enter(_LINGERING, min(LINGER, self.server.limits.request_timeout))
            self._resume_reading()
        elif self._eof:
            self.close()

    def _settle(self) -> None:
        """Between answers: idle, or a pipelined request is arriving."""
        limits = self.server.limits
        if self._in_message:
            self._enter(_ARRIVING, limits.request_timeout)
        elif self._busy:
            self._enter(_ANSWERING, None)
        else:
            self._enter(_IDLE, limits.idle_timeout)

    def _refuse(self, status: int, message: str) -> None:
        """Answer ``status`` and close, once the requests before it on the connection are
        answered (RFC 9112 section 9.3.2: answers go out in the order of the requests)."""
        if self.closed or self.transport is None or self._refusal is not None:
            return
        self._refusal = encode(error(status, message), close=True)
        self._unparsed = b""
        self._in_message = False
        self._pause_reading()
        if not self._busy:
            self._settle()
        self._after_answers()


def _request(
    method: bytes, target: bytes, headers: dict[str, str], body: bytes, at: float
) -> Request:
    raw_path, _, raw_query = target.decode("ascii", "replace").partition("?")
    path = raw_path
    if "%" in raw_path:
        try:
            path = urllib.parse.unquote(raw_path, errors="strict")
        except UnicodeDecodeError:
            path = BAD_PATH  # answered 400 by the connection
    return Request(
        method.decode("ascii", "replace").upper(),
        path,
        dict(urllib.parse.parse_qsl(raw_query, keep_blank_values=True)) if raw_query else {},
        headers,
        body,
        at,
    )


async def serve(
    handler: Handler,
    host: str,
    port: int,
    *,
    max_body: int,
    limits: Limits | None = None,
    stats: Stats | None = None,
    observe: Observer | None = None,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; ``task_status.started(port)`` once listening. Runs on asyncio
    (or uvloop): the connections are asyncio protocols."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise RuntimeError("kv_http serves on asyncio (or uvloop), not on this loop") from None
    server = _Server(handler, max_body, limits or Limits(), stats or Stats(), observe)
    try:
        listener = await server.loop.create_server(
            lambda: _Connection(server), host, port, backlog=1024
        )
    except OSError as exc:
        # In the OS's words, whichever loop: uvloop words a bind error its own way.
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise OSError(exc.errno, f"cannot serve HTTP on {host}:{port}: {reason}") from exc
    try:
        task_status.started(listener.sockets[0].getsockname()[1])
        await server.sweep()
    finally:
        listener.close()
        for conn in list(server.stats.slots):
            conn.close(abort=True)
