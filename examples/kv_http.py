"""A small HTTP/1.1 server on trio and h11 (keep-alive, bounded bodies), for the KV service.

h11 does the parsing and framing; this module only moves bytes between it and a trio stream
and hands each complete request to an async handler. Peers cannot hold the server without using
it: connections are capped, a keep-alive connection waits at most ``idle_timeout`` for its
next request, and a request must arrive whole (and its answer be taken) within
``request_timeout``. At the cap a newcomer closes the connection idle longest (or one whose
request has been arriving for over 2 s) and gets a 503 only if every connection is busy.
"""

from __future__ import annotations

import functools
import http
import json
import resource
import urllib.parse
from collections.abc import Awaitable, Callable
from typing import Any, final

import attrs
import h11
import trio

#: Largest request head (request line and headers) accepted.
MAX_HEAD = 16 * 1024
_REASONS = {int(status): status.phrase.encode() for status in http.HTTPStatus}


@final
class Request:
    """One complete request (a plain class: one is made per request, on the hot path)."""

    __slots__ = ("body", "headers", "method", "path", "query")

    def __init__(
        self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: bytes
    ) -> None:
        self.method = method
        self.path = path  # percent-decoded
        self.query = query
        self.headers = headers  # lower-case names
        self.body = body


@final
@attrs.frozen
class Response:
    status: int
    body: bytes = b""
    headers: list[tuple[str, str]] = attrs.field(factory=list)
    content_type: str = "application/json"


def json_response(status: int, obj: Any, headers: list[tuple[str, str]] | None = None) -> Response:
    return Response(status, json.dumps(obj).encode() + b"\n", headers or [])


def error(status: int, message: str, headers: list[tuple[str, str]] | None = None) -> Response:
    return json_response(status, {"error": message}, headers)


Handler = Callable[[Request], Awaitable[Response]]


class BodyTooLarge(Exception):
    pass


class _RequestTimeout(Exception):
    pass


#: What a connection is doing, as the cap sees it. A newcomer at the cap closes one that is
#: idle between requests, else one whose request is arriving, else one whose answer its peer
#: is not taking; never one whose handler is running.
_IDLE, _ARRIVING, _ANSWERING, _SENDING = "idle", "arriving", "answering", "sending"
_EVICTION_ORDER = {_IDLE: 0, _ARRIVING: 1, _SENDING: 2}


@final
class _Slot:
    """One connection, as the cap sees it: its ``state`` since ``since``; ``scope`` is the
    cancel scope a newcomer cancels to close it."""

    __slots__ = ("scope", "since", "state")

    def __init__(self) -> None:
        self.state = _IDLE
        self.since = trio.current_time()
        self.scope = trio.CancelScope()

    def enter(self, state: str) -> None:
        self.state, self.since = state, trio.current_time()

    @property
    def reading(self) -> bool:
        """Whether its request is arriving (for tests and metrics)."""
        return self.state == _ARRIVING


def _victim(slots: set[_Slot]) -> _Slot | None:
    """The connection a newcomer closes at the cap: the one idle longest between requests,
    else the one whose request has been arriving longest, else the one whose peer has left
    its answer untaken longest. Any age: a slowloris that reconnects at once keeps every one
    of its connections young, so an age threshold would let it hold all slots (a re-attack
    on the bookie's admin endpoint answered 3.75 % of probes that way)."""
    best: _Slot | None = None
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
    """Connection counts, for the service's metrics."""

    def __init__(self) -> None:
        self.open = 0
        self.refused = 0
        self.idle_closed = 0
        self.timed_out = 0
        self.evicted = 0
        self.slots: set[_Slot] = set()


async def serve(
    handler: Handler,
    host: str,
    port: int,
    *,
    max_body: int,
    limits: Limits | None = None,
    stats: Stats | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until cancelled; ``task_status.started(port)`` once listening."""
    limits = limits or Limits()
    listeners = await trio.open_tcp_listeners(port, host=host)
    bound = listeners[0].socket.getsockname()[1]
    task_status.started(bound)
    await trio.serve_listeners(
        functools.partial(
            _admit,
            handler,
            limits,
            stats or Stats(),
            limits.max_connections or default_max_connections(),
            max_body,
        ),
        listeners,
    )


def _busy_answer(cap: int) -> bytes:
    body = json.dumps({"error": f"too many connections (limit {cap}); try again"}).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body) + 1}\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body + b"\n"


async def _admit(
    handler: Handler,
    limits: Limits,
    stats: Stats,
    cap: int,
    max_body: int,
    stream: trio.SocketStream,
) -> None:
    victim = _victim(stats.slots) if stats.open >= cap else None
    if victim is not None:
        stats.evicted += 1
        victim.enter(_ANSWERING)  # not chosen twice
        victim.scope.cancel()
    elif stats.open >= cap:
        stats.refused += 1
        with trio.move_on_after(1):
            try:
                await stream.send_all(_busy_answer(cap))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
        await trio.aclose_forcefully(stream)
        return
    stats.open += 1
    try:
        await _connection(handler, stream, max_body=max_body, limits=limits, stats=stats)
    finally:
        stats.open -= 1


async def _connection(
    handler: Handler,
    stream: trio.SocketStream,
    *,
    max_body: int,
    limits: Limits | None = None,
    stats: Stats | None = None,
) -> None:
    limits = limits or Limits()
    stats = stats or Stats()
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
    slot = _Slot()
    stats.slots.add(slot)
    try:
        while True:
            try:
                slot.scope = trio.CancelScope()
                slot.enter(_IDLE)
                with slot.scope:
                    request = await _read_request(conn, stream, max_body, limits, slot)
                if slot.scope.cancelled_caught:
                    return  # closed to make room for a newcomer
                slot.enter(_ANSWERING)
            except BodyTooLarge:
                await _send(conn, stream, error(413, f"body over {max_body} bytes"), close=True)
                return
            except _RequestTimeout:
                stats.timed_out += 1
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    why = f"request not received whole within {limits.request_timeout:g} s"
                    with trio.move_on_after(1):
                        await _send(conn, stream, error(408, why), close=True)
                return
            except h11.RemoteProtocolError as exc:
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await _send(conn, stream, error(400, f"bad request: {exc}"), close=True)
                return
            if request is None:
                if conn.their_state is h11.IDLE and conn.our_state is h11.IDLE:
                    stats.idle_closed += 1  # (a peer that closes leaves their_state CLOSED)
                return
            try:
                response = await handler(request)
            except Exception as exc:  # the connection (and the process) lives on
                response = error(500, f"internal error: {type(exc).__name__}: {exc}")
            slot.scope = trio.CancelScope(deadline=trio.current_time() + limits.request_timeout)
            slot.enter(_SENDING)
            with slot.scope:
                await _send(conn, stream, response, close=False, head=request.method == "HEAD")
            if slot.scope.cancelled_caught:  # the peer does not take its answer, or a
                if slot.state == _SENDING:  # newcomer at the cap closed it (counted there)
                    stats.timed_out += 1
                return
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return
    except Exception as exc:  # one connection's trouble must not stop the server
        print(f"kv: http connection failed: {type(exc).__name__}: {exc}", flush=True)
        return
    finally:
        stats.slots.discard(slot)
        with trio.move_on_after(1) as scope:
            scope.shield = True
            try:
                await stream.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass


async def _read_request(
    conn: h11.Connection,
    stream: trio.SocketStream,
    max_body: int,
    limits: Limits,
    slot: _Slot | None = None,
) -> Request | None:
    """The next request; None when the peer closes, or stays idle ``idle_timeout`` before
    sending its first byte. Raises _RequestTimeout when the rest takes ``request_timeout``."""
    head: h11.Request | None = None
    body = bytearray()
    started = conn.trailing_data[0] != b""  # pipelined bytes of this request are here
    deadline = trio.current_time() + (limits.request_timeout if started else limits.idle_timeout)
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            with trio.move_on_at(deadline):
                data = await stream.receive_some(65536)
                if not started:
                    started = True
                    deadline = trio.current_time() + limits.request_timeout
                    if slot is not None:
                        slot.enter(_ARRIVING)
                conn.receive_data(data)  # b"" means end of stream
                continue
            if started:
                raise _RequestTimeout
            return None  # idle past idle_timeout: close, as any keep-alive server does
        if isinstance(event, h11.Request):
            head = event
            for name, value in event.headers:
                if name == b"content-length" and int(value) > max_body:
                    raise BodyTooLarge
            if conn.they_are_waiting_for_100_continue:  # curl does, for bodies over 1 KiB
                await stream.send_all(
                    conn.send(h11.InformationalResponse(status_code=100, headers=[]))
                )
        elif isinstance(event, h11.Data):
            body += event.data
            if len(body) > max_body:
                raise BodyTooLarge
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            return _request(head, bytes(body))
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None


def _request(head: h11.Request, body: bytes) -> Request:
    target = head.target.decode("ascii", "replace")
    raw_path, _, raw_query = target.partition("?")
    path = raw_path
    if "%" in raw_path:
        try:
            path = urllib.parse.unquote(raw_path, errors="strict")
        except UnicodeDecodeError:
            path = "\x00bad"  # refused by the router
    return Request(
        head.method.decode("ascii", "replace").upper(),
        path,
        dict(urllib.parse.parse_qsl(raw_query, keep_blank_values=True)) if raw_query else {},
        {k.decode("latin-1"): v.decode("latin-1") for k, v in head.headers},
        body,
    )


async def _send(
    conn: h11.Connection,
    stream: trio.SocketStream,
    response: Response,
    *,
    close: bool,
    head: bool = False,
) -> None:
    """Send ``response``; for a HEAD request (``head``) its headers only, the length included."""
    headers = [
        ("content-type", response.content_type),
        ("content-length", str(len(response.body))),
        *response.headers,
    ]
    if close:
        headers.append(("connection", "close"))
    reason = _REASONS.get(response.status, b"")
    data = conn.send(h11.Response(status_code=response.status, headers=headers, reason=reason))
    data += conn.send(h11.Data(data=response.body)) if response.body and not head else b""
    data += conn.send(h11.EndOfMessage())
    await stream.send_all(data)
