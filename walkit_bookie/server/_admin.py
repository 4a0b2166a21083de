"""The bookie's HTTP admin endpoint: ``/metrics`` (prometheus text format), ``/health``,
``/livez`` and ``/readyz`` (``_health``: 200, or 503 with the reasons) and ``/admin/gc``
(status; POST runs a garbage collection round), on h11.

Over HTTPS when the bookie has TLS (its certificate, CA and ``--tls-client-auth``; a failed
handshake ends that connection only). A POST is allowed with the admin token, or for a
principal ``--authorize admin=...`` lists: a client token's with ``--auth token``, the
verified client certificate's subject with ``--auth tls``.

h11 parses and frames HTTP/1.1; this module moves bytes between it and an AnyIO stream, and
bounds everything: one request per connection, the head's size (h11's
``max_incomplete_event_size``), the body's size, the time to send the request, and the
connections at a time. At that cap a newcomer closes the oldest connection that is not being
answered (still sending its request, or slow to take its answer), so peers trickling bytes or
not reading cannot hold the slots, however fast they reconnect; only if every slot is being
answered does it get ``503``, after its request was read, so that it is an answer and not a
reset. Anything else gets a clear 4xx (or 5xx) and the bookie goes on.
"""

from __future__ import annotations

import functools
import hmac
import http
import json
import re
import ssl
import urllib.parse
from typing import Any, final

import anyio
import anyio.abc
import attrs
import h11
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSStream
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from walkit.errors import AuthenticationError, BookieIOError
from walkit.net import principal_of
from walkit.shared import get_logger
from walkit_bookie.server import _health as health
from walkit_bookie.server._linger import linger
from walkit_bookie.server._metrics import AdminTarget

log = get_logger(__name__)

_MAX_HEAD = 8192  # request line and headers
_MAX_BODY = 4096
_REQUEST_TIMEOUT = 5.0  # to send the whole request
_MAX_CONNECTIONS = 32
_REFUSE_WAIT = 1.0  # an over-limit connection's time to send the request its 503 answers
_RECEIVE_SIZE = 4096
_LINGER = 1.0
_LINGER_BYTES = 1 << 20
_METHOD = re.compile(rb"[A-Z]{1,20}")
_TEXT = "text/plain; charset=utf-8"


@final
@attrs.frozen
class _Answer:
    status: int
    body: bytes
    content_type: str = _TEXT
    headers: tuple[tuple[str, str], ...] = ()


@final
class _HttpError(Exception):
    def __init__(
        self, status: int, message: str, headers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers

    def answer(self) -> _Answer:
        return _Answer(self.status, f"{self}\n".encode(), headers=self.headers)


def _json(doc: Any, status: int = 200) -> _Answer:
    return _Answer(status, json.dumps(doc).encode() + b"\n", "application/json")


@final
@attrs.frozen
class _Request:
    method: str
    path: str
    query: dict[str, list[str]]
    authorization: str | None


def _request(head: h11.Request) -> _Request:
    """Check what h11 leaves to the application; the request, or an _HttpError."""
    if not _METHOD.fullmatch(head.method) or not head.target.startswith(b"/"):
        raise _HttpError(400, "malformed request line")
    if head.http_version not in (b"1.0", b"1.1"):
        raise _HttpError(505, f"HTTP/{head.http_version.decode()} not supported")
    authorization: str | None = None
    for name, value in head.headers:
        if not value.isascii():
            raise _HttpError(400, "request head is not ASCII")
        if name == b"authorization":
            if authorization is not None:
                raise _HttpError(400, "Authorization given twice")
            authorization = value.decode("ascii")
        elif name == b"transfer-encoding":
            raise _HttpError(501, "chunked bodies are not accepted")
        elif name == b"content-length" and int(value) > _MAX_BODY:
            raise _HttpError(413, f"body above {_MAX_BODY} bytes")
    path, _, query = head.target.decode("ascii").partition("?")
    try:
        params = urllib.parse.parse_qs(query, strict_parsing=bool(query), max_num_fields=10)
    except ValueError:
        raise _HttpError(400, "malformed query string") from None
    return _Request(head.method.decode("ascii"), urllib.parse.unquote(path), params, authorization)


@final
class _Exchange:
    """One connection: its h11 state, its stream, whether the request was a HEAD (whose
    answer has no body), when it opened, whether a newcomer may close it at the cap (not while
    its answer is being made), the scope that closes it, and the TLS context of a handshake
    still to do (done as the request is read, within its time limit)."""

    def __init__(self, stream: anyio.abc.ByteStream, tls: ssl.SSLContext | None) -> None:
        self.conn = h11.Connection(h11.SERVER, max_incomplete_event_size=_MAX_HEAD)
        self.stream = stream
        self.tls = tls
        self.head_only = False
        self.opened = anyio.current_time()
        self.evictable = True
        self.scope = anyio.CancelScope()

    async def start_tls(self, context: ssl.SSLContext) -> None:
        # A client that closes without close_notify has said all it had to say (HTTPS
        # clients do so: RFC 9110's "incomplete close").
        self.stream = await TLSStream.wrap(
            self.stream, server_side=True, ssl_context=context, standard_compatible=False
        )
        self.tls = None


def _victim(open_: set[_Exchange]) -> _Exchange | None:
    """The connection a newcomer closes at the cap: the oldest not being answered (its
    request still arriving, or its answer not yet taken); None if every one is. No minimum
    age: a re-attack that reconnected at once kept every slot younger than any minimum."""
    return min((e for e in open_ if e.evictable), key=lambda e: e.opened, default=None)


async def _read_request(exchange: _Exchange) -> _Request | None:
    """Read one request (its body is read and dropped); None when the peer closed without
    sending one."""
    if exchange.tls is not None:
        await exchange.start_tls(exchange.tls)
    conn = exchange.conn
    request: _Request | None = None
    while True:
        try:
            event = conn.next_event()
        except h11.RemoteProtocolError as exc:
            raise _HttpError(exc.error_status_hint, f"malformed request: {exc}") from None
        if event is h11.NEED_DATA:
            try:
                data = await exchange.stream.receive(_RECEIVE_SIZE)
            except anyio.EndOfStream:
                data = b""
            conn.receive_data(data)  # b"": the end of the stream
        elif isinstance(event, h11.Request):
            exchange.head_only = event.method == b"HEAD"
            request = _request(event)
        elif isinstance(event, h11.EndOfMessage):
            return request
        elif isinstance(event, h11.ConnectionClosed):
            return None
        # h11.Data: the body (at most _MAX_BODY bytes) is not used


async def _send(exchange: _Exchange, answer: _Answer) -> None:
    conn = exchange.conn
    if conn.our_state not in (h11.IDLE, h11.SEND_RESPONSE) or exchange.tls is not None:
        return  # (the TLS handshake did not finish: nothing to answer over)
    headers = [
        ("Content-Type", answer.content_type),
        ("Content-Length", str(len(answer.body))),
        *answer.headers,
        ("Connection", "close"),
    ]
    reason = http.HTTPStatus(answer.status).phrase.encode("ascii")
    data = conn.send(h11.Response(status_code=answer.status, headers=headers, reason=reason))
    if not exchange.head_only:
        data += conn.send(h11.Data(data=answer.body))
    data += conn.send(h11.EndOfMessage())
    with anyio.move_on_after(_REQUEST_TIMEOUT):
        await exchange.stream.send(data)


def _principal_allowed(
    bookie: AdminTarget, given: str, request: _Request, tls_principal: str | None
) -> bool:
    """With ``--authorize admin=...``: whether the connection's principal (its verified
    client certificate's with ``--auth tls``, else the one whose client token is ``given``)
    is one the rule lists (403 if its principal is not listed)."""
    handler = bookie.handler
    rules, authenticator = handler.authorization, handler.authenticator
    if rules is None or "admin" not in rules.rules or authenticator is None:
        return False
    principal = authenticator.on_connect(tls_principal)
    if principal is None:
        if not given:
            return False
        try:
            principal = authenticator.authenticate("token", given.encode(), tls_principal)
        except AuthenticationError:
            return False
    if rules.allows("admin", principal):
        return True
    handler.unauthorized["admin"] = handler.unauthorized.get("admin", 0) + 1
    handler.bad_input.report("unauthorized", op="admin", principal=principal, path=request.path)
    raise _HttpError(
        403, f"principal {principal!r} may not admin on this bookie (its --authorize rules)"
    )


def _authorize(bookie: AdminTarget, request: _Request, tls_principal: str | None) -> None:
    """POSTs change the bookie: they need ``Authorization: Bearer <admin token>``, or the
    client token or certificate of a principal listed by ``--authorize admin=...``."""
    token = bookie.config.admin_token
    scheme, _, given = (request.authorization or "").partition(" ")
    given = given.strip() if scheme.lower() == "bearer" else ""
    if token is not None and given and hmac.compare_digest(given.encode(), token.encode()):
        return
    if _principal_allowed(bookie, given, request, tls_principal):
        return
    rules = bookie.handler.authorization
    if token is None and (rules is None or "admin" not in rules.rules):
        raise _HttpError(
            403,
            f"{request.method} {request.path} is disabled: start the bookie with "
            "--admin-token or --admin-token-file (or --authorize admin=PRINCIPAL with "
            "--auth token or --auth tls) to allow admin POSTs",
        )
    raise _HttpError(
        401,
        f"{request.method} {request.path} needs the admin token (Authorization: Bearer TOKEN)",
        (("WWW-Authenticate", 'Bearer realm="walkit-bookie"'),),
    )


def _allow(request: _Request, *methods: str) -> None:
    if request.method not in methods:
        raise _HttpError(
            405,
            f"{request.path} takes {' or '.join(methods)}",
            (("Allow", ", ".join(methods)),),
        )


def gc_status(bookie: AdminTarget) -> dict[str, Any]:
    """What ``GET /admin/gc`` answers: garbage collection and compaction, so far."""
    gc = bookie.gc
    config = bookie.config
    stats = bookie.storage.stats
    usage = bookie.storage.entry_log_usage()
    return {
        "ledger_gc": bookie.registration is not None,
        "rounds": gc.rounds,
        "skipped": gc.skipped,
        "ledgers_deleted": gc.ledgers_deleted,
        "minor_compactions": gc.minor_compactions,
        "major_compactions": gc.major_compactions,
        "entry_logs": len(usage),
        "entry_log_bytes": sum(u.size for u in usage),
        "entry_log_live_bytes": sum(u.live for u in usage),
        "entry_logs_compacted": stats.entry_logs_compacted,
        "entry_logs_removed": stats.entry_logs_removed,
        "compaction_entries_moved": stats.compaction_entries_moved,
        "compaction_bytes_moved": stats.compaction_bytes_moved,
        "compaction_bytes_reclaimed": stats.compaction_bytes_reclaimed,
        "last_round": None if gc.last_report is None else gc.last_report.to_dict(),
        "config": {
            "gc_interval": config.gc_interval,
            "minor_compaction_threshold": config.minor_compaction_threshold,
            "minor_compaction_interval": config.minor_compaction_interval,
            "major_compaction_threshold": config.major_compaction_threshold,
            "major_compaction_interval": config.major_compaction_interval,
            "compaction_max_rate": config.compaction_max_rate,
        },
    }


def _journal_stall(request: _Request, default: float) -> float:
    """The ``journal_stall`` parameter of a probe (seconds), else ``default``."""
    unknown = sorted(set(request.query) - {"journal_stall"})
    if unknown:
        raise _HttpError(400, f"unknown parameter {unknown[0]!r}: only journal_stall=SECONDS")
    values = request.query.get("journal_stall")
    if values is None:
        return default
    try:
        seconds = float(values[-1])
    except ValueError:
        seconds = -1.0
    if len(values) != 1 or not 0 < seconds < 86400:
        raise _HttpError(400, "journal_stall must be one number of seconds, above 0")
    return seconds


async def _probe(bookie: AdminTarget, probe: health.MetadataProbe, request: _Request) -> _Answer:
    if request.path == "/livez":
        verdict = health.liveness(
            bookie, journal_stall=_journal_stall(request, health.LIVENESS_JOURNAL_STALL)
        )
    else:
        verdict = await health.readiness(
            bookie, probe, journal_stall=_journal_stall(request, health.JOURNAL_STALL)
        )
    return _json(verdict.to_dict(bookie.bookie_id), 200 if verdict.ok else 503)


async def _route(
    bookie: AdminTarget,
    registry: CollectorRegistry,
    request: _Request,
    tls_principal: str | None = None,
    probe: health.MetadataProbe | None = None,
) -> _Answer:
    path = request.path
    if path in ("/livez", "/readyz"):
        _allow(request, "GET")
        return await _probe(bookie, probe or health.MetadataProbe(), request)
    if path == "/metrics":
        _allow(request, "GET")
        body = await anyio.to_thread.run_sync(generate_latest, registry)
        return _Answer(200, body, CONTENT_TYPE_LATEST)
    if path in ("/health", "/healthz"):
        _allow(request, "GET")
        full = bookie.handler.degraded
        doc: dict[str, Any] = {
            "status": "degraded" if full else "ok",
            "bookie_id": str(bookie.bookie_id),
            "read_only": bookie.read_only,
        }
        if full:
            doc["full"] = full
        return _json(doc)
    if path == "/admin/gc":
        _allow(request, "GET", "POST")
        if request.method == "GET":
            return _json(gc_status(bookie))
        _authorize(bookie, request, tls_principal)
        compaction = request.query.get("compact", ["none"])
        if len(compaction) != 1 or compaction[0] not in ("none", "minor", "major"):
            raise _HttpError(400, "compact must be none, minor or major")
        report = await bookie.collect_garbage(None if compaction[0] == "none" else compaction[0])
        return _json(report.to_dict())
    raise _HttpError(404, "try /metrics, /health, /livez, /readyz or /admin/gc")


async def _answer(
    bookie: AdminTarget,
    registry: CollectorRegistry,
    probe: health.MetadataProbe,
    exchange: _Exchange,
) -> None:
    try:
        with anyio.move_on_after(_REQUEST_TIMEOUT) as timer:
            request = await _read_request(exchange)
        if timer.cancelled_caught:
            raise _HttpError(408, "request not received in time")
        if request is None:
            return
        exchange.evictable = False  # its answer is being made: not closed for a newcomer
        answer = await _route(bookie, registry, request, principal_of(exchange.stream), probe)
    except _HttpError as exc:
        answer = exc.answer()
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError):
        raise  # the peer went away, or its TLS handshake failed: nobody to answer
    except Exception as exc:  # never let a bad request or a bug stop the bookie
        log.exception("admin_request_failed", error=str(exc))
        answer = _Answer(500, f"{exc}\n".encode())
    exchange.evictable = True  # made: a peer slow to take it may be closed for a newcomer
    await _send(exchange, answer)
    await linger(exchange.stream, grace=_LINGER, limit=_LINGER_BYTES)


async def _refuse(exchange: _Exchange) -> None:
    """Over the limit: take the request (briefly), answer 503, then linger as for any answer
    (closing with the request unread would reset the connection, and the client would see a
    reset instead of the 503)."""
    with anyio.move_on_after(_REFUSE_WAIT):
        try:
            if await _read_request(exchange) is None:
                return  # closed without asking
        except _HttpError:
            pass
    busy = _Answer(503, b"too many admin connections\n", headers=(("Retry-After", "1"),))
    await _send(exchange, busy)
    await linger(exchange.stream, grace=_LINGER, limit=_LINGER_BYTES)


async def _handle(
    bookie: AdminTarget,
    registry: CollectorRegistry,
    probe: health.MetadataProbe,
    open_: set[_Exchange],
    tls: ssl.SSLContext | None,
    stream: anyio.abc.ByteStream,
) -> None:
    exchange = _Exchange(stream, tls)
    try:
        if len(open_) >= _MAX_CONNECTIONS:
            victim = _victim(open_)
            if victim is None:
                await _refuse(exchange)
                return
            open_.discard(victim)  # the newcomer takes its slot at once
            victim.scope.cancel()
            log.debug("admin_connection_evicted", after=round(exchange.opened - victim.opened, 1))
        open_.add(exchange)
        try:
            with exchange.scope:
                await _answer(bookie, registry, probe, exchange)
        finally:
            open_.discard(exchange)
    except (
        anyio.BrokenResourceError,
        anyio.ClosedResourceError,
        anyio.EndOfStream,
        OSError,
    ) as exc:
        log.debug("admin_connection_broken", error=repr(exc))
    except Exception as exc:  # one connection's trouble must not stop the endpoint
        log.exception("admin_connection_failed", error=str(exc))
    finally:
        await anyio.aclose_forcefully(exchange.stream)


async def serve_admin(
    bookie: AdminTarget,
    host: str,
    port: int,
    registry: CollectorRegistry,
    *,
    ssl_context: ssl.SSLContext | None = None,
    task_status: anyio.abc.TaskStatus[tuple[str, int]] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the admin endpoint until cancelled (over HTTPS with ``ssl_context``); report the
    bound (host, port)."""
    try:
        listener = await anyio.create_tcp_listener(local_host=host or None, local_port=port)
    except OSError as exc:
        raise BookieIOError(f"cannot listen for HTTP on {host}:{port}: {exc}") from exc
    async with listener, anyio.create_task_group() as tasks:
        bound = listener.extra(SocketAttribute.local_address)
        open_: set[_Exchange] = set()
        handler = functools.partial(
            _handle, bookie, registry, health.MetadataProbe(), open_, ssl_context
        )
        tasks.start_soon(listener.serve, handler, tasks)
        log.info("admin_listening", host=bound[0], port=bound[1], tls=ssl_context is not None)
        task_status.started((str(bound[0]), int(bound[1])))
