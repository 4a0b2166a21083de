"""The bookie's HTTP admin endpoint: ``/metrics`` (prometheus text format), ``/health`` and
``/admin/gc`` (status; POST runs a garbage collection round).

Metrics are read from the bookie's own counters when scraped (a custom collector), so the
request path pays nothing for them. The registry is injected (a fresh one per bookie by
default). The HTTP side is deliberately tiny: one request per connection, bounded head and
body sizes, bounded time to send them, bounded connections; anything else gets a clear 4xx
(or 5xx) and the bookie goes on.
"""

from __future__ import annotations

import functools
import hmac
import json
import re
import urllib.parse
from collections.abc import Iterator
from typing import Any, Protocol, final

import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from walkit._logging import get_logger
from walkit.errors import BookieIOError
from walkit_bookie._config import BookieConfig
from walkit_bookie.server._requests import RequestHandler
from walkit_bookie.storage import BookieStorage, GarbageCollector, GcReport

log = get_logger(__name__)

_MAX_HEAD = 8192  # request line and headers
_MAX_BODY = 4096
_REQUEST_TIMEOUT = 5.0  # to send the whole request
_MAX_CONNECTIONS = 32
_LINGER = 1.0
_LINGER_BYTES = 1 << 20
_METHOD = re.compile(r"[A-Z]{1,20}")


class MetadataSession(Protocol):
    """What the admin endpoint reads of the bookie's metadata registration."""

    @property
    def registered(self) -> bool: ...

    @property
    def reregistrations(self) -> int: ...


class AdminTarget(Protocol):
    """What the admin endpoint and the metrics read of a running bookie (a ``Bookie``)."""

    config: BookieConfig
    storage: BookieStorage
    handler: RequestHandler
    gc: GarbageCollector

    @property
    def bookie_id(self) -> object: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def ledger_count(self) -> int: ...

    @property
    def registration(self) -> MetadataSession | None: ...

    async def collect_garbage(self, compaction: str | None = None) -> GcReport: ...


@final
class BookieCollector(Collector):
    """Reads a bookie's counters at scrape time."""

    def __init__(self, bookie: AdminTarget) -> None:
        self._bookie = bookie

    def collect(self) -> Iterator[Metric]:
        bookie = self._bookie
        b = bookie.handler
        s = bookie.storage.stats
        usage = bookie.storage.entry_log_usage()
        counters = [
            ("requests", "Requests taken off the wire", b.requests),
            ("adds_answered", "Adds answered (any status)", b.adds_answered),
            (
                "adds_idempotent",
                "Adds of an entry already stored with the same bytes (answered OK, not rewritten)",
                b.adds_idempotent,
            ),
            (
                "adds_refused_rewrite",
                "Adds refused with ENTRY_EXISTS: other bytes for an entry already stored",
                b.adds_refused_rewrite,
            ),
            ("reads_answered", "Reads and LAC reads answered (any status)", b.reads_answered),
            ("journal_syncs", "Durable journal writes (one per group commit)", s.journal_syncs),
            ("journal_records", "Records written to the journal", s.journal_records),
            ("journal_bytes", "Bytes written to the journal (with padding)", s.journal_bytes),
            ("group_commits", "Group commits", b.group_commit.groups),
            ("checkpoints", "Completed checkpoints", s.checkpoints),
            ("entries_flushed", "Entries written to entry logs at checkpoints", s.entries_flushed),
            ("connections_opened", "Client connections accepted", b.connections_opened),
            (
                "connections_refused",
                "Client connections closed at once: max_connections were open",
                b.connections_refused,
            ),
            (
                "requests_refused",
                "Requests answered TOO_MANY_REQUESTS (per-connection or long-poll cap)",
                b.requests_refused,
            ),
            (
                "bad_input_log_suppressed",
                "Warnings about bad input not logged (rate limit); counted in bad_input",
                b.bad_input.suppressed,
            ),
            ("gc_rounds", "Garbage collection rounds", bookie.gc.rounds),
            (
                "gc_skipped",
                "Rounds whose ledger part was skipped (metadata store error)",
                bookie.gc.skipped,
            ),
            (
                "gc_ledgers_deleted",
                "Ledgers forgotten because the metadata store no longer has them",
                bookie.gc.ledgers_deleted,
            ),
            ("minor_compactions", "Minor compaction passes", bookie.gc.minor_compactions),
            ("major_compactions", "Major compaction passes", bookie.gc.major_compactions),
            (
                "entry_logs_compacted",
                "Entry logs whose live entries were copied out, then removed",
                s.entry_logs_compacted,
            ),
            (
                "entry_logs_removed",
                "Entry logs removed because nothing in them was live",
                s.entry_logs_removed,
            ),
            (
                "compaction_entries_moved",
                "Entries copied by compaction",
                s.compaction_entries_moved,
            ),
            ("compaction_bytes_moved", "Bytes copied by compaction", s.compaction_bytes_moved),
            (
                "compaction_bytes_reclaimed",
                "Disk bytes given back by removing entry logs (minus what was copied out)",
                s.compaction_bytes_reclaimed,
            ),
            (
                "metadata_reregistrations",
                "Registrations redone after the metadata session was lost",
                0 if bookie.registration is None else bookie.registration.reregistrations,
            ),
        ]
        for name, text, value in counters:
            yield CounterMetricFamily(f"walkit_bookie_{name}", text, value=value)
        bad = CounterMetricFamily(
            "walkit_bookie_bad_input",
            "Malformed frames and messages (and refused connections), by kind",
            labels=["kind"],
        )
        for kind, count in sorted(b.bad_input.counts.items()):
            bad.add_metric([kind], count)
        yield bad
        gauges: list[tuple[str, str, float]] = [
            (
                "adds_in_flight",
                "Adds (and explicit LACs) accepted, not yet answered",
                b.adds_in_flight,
            ),
            (
                "reads_in_flight",
                "Reads (and long polls) accepted, not yet answered",
                b.reads_in_flight,
            ),
            ("connections", "Open client connections", b.connections),
            ("long_polls", "Long-poll LAC reads waiting", b.long_polls),
            (
                "partial_frame_bytes",
                "Bytes of frames received in part, over all connections",
                b.partial_frame_bytes,
            ),
            (
                "receive_buffer_bytes",
                "Bytes of receive buffers held by open connections",
                b.receive_buffer_bytes,
            ),
            ("ledgers", "Ledgers this bookie holds state for", bookie.ledger_count),
            ("read_only", "1 when the bookie refuses writes", 1 if bookie.read_only else 0),
            (
                "disk_usage_ratio",
                "Highest used fraction of the data dirs' disks",
                bookie.storage.disk_usage(),
            ),
            ("entry_logs", "Entry log files", len(usage)),
            ("entry_log_bytes", "Bytes in entry log files", sum(u.size for u in usage)),
            (
                "entry_log_live_bytes",
                "Bytes of entry logs the index still points at",
                sum(u.live for u in usage),
            ),
            (
                "metadata_registered",
                "1 while the bookie is registered in the metadata store",
                1 if bookie.registration is not None and bookie.registration.registered else 0,
            ),
        ]
        for gauge, text, level in gauges:
            yield GaugeMetricFamily(f"walkit_bookie_{gauge}", text, value=float(level))


@final
class _HttpError(Exception):
    def __init__(self, status: str, message: str, headers: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers


def _response(
    status: str,
    body: bytes,
    content_type: str = "text/plain; charset=utf-8",
    headers: tuple[str, ...] = (),
) -> bytes:
    extra = "".join(f"{h}\r\n" for h in headers)
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


def _json(status: str, doc: Any) -> bytes:
    return _response(status, json.dumps(doc).encode() + b"\n", "application/json")


@final
class _Request:
    def __init__(
        self, method: str, path: str, query: dict[str, list[str]], authorization: str | None
    ) -> None:
        self.method = method
        self.path = path
        self.query = query
        self.authorization = authorization


async def _read_request(stream: trio.abc.Stream) -> _Request | None:
    """Read one request (head and body); None when the peer closed without sending any."""
    data = bytearray()
    with trio.move_on_after(_REQUEST_TIMEOUT) as timer:
        while True:
            end = data.find(b"\r\n\r\n")
            if end >= 0:
                head, rest = bytes(data[:end]), len(data) - end - 4
                break
            end = data.find(b"\n\n")
            if end >= 0:
                head, rest = bytes(data[:end]), len(data) - end - 2
                break
            if len(data) > _MAX_HEAD:
                raise _HttpError("431 Request Header Fields Too Large", "request head too large")
            chunk = await stream.receive_some(4096)
            if not chunk:
                if not data:
                    return None
                raise _HttpError("400 Bad Request", "incomplete request")
            data += chunk
    if timer.cancelled_caught:
        raise _HttpError("408 Request Timeout", "request not received in time")
    if len(head) > _MAX_HEAD:
        raise _HttpError("431 Request Header Fields Too Large", "request head too large")
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise _HttpError("400 Bad Request", "request head is not ASCII") from None
    lines = text.replace("\r\n", "\n").split("\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not _METHOD.fullmatch(parts[0]) or not parts[1].startswith("/"):
        raise _HttpError("400 Bad Request", "malformed request line")
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise _HttpError("505 HTTP Version Not Supported", f"{version} not supported")
    length = 0
    authorization: str | None = None
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise _HttpError("400 Bad Request", "malformed header line")
        name = name.lower()
        if name == "authorization":
            if authorization is not None:
                raise _HttpError("400 Bad Request", "Authorization given twice")
            authorization = value.strip()
        if name == "transfer-encoding":
            raise _HttpError("501 Not Implemented", "chunked bodies are not accepted")
        if name == "content-length":
            if not value.strip().isdigit():
                raise _HttpError("400 Bad Request", "bad Content-Length")
            length = int(value.strip())
            if length > _MAX_BODY:
                raise _HttpError("413 Content Too Large", f"body above {_MAX_BODY} bytes")
    remaining = length - rest  # the body is not used: read it so the peer sees our answer
    with trio.move_on_after(_REQUEST_TIMEOUT):
        while remaining > 0:
            chunk = await stream.receive_some(min(remaining, 4096))
            if not chunk:
                break
            remaining -= len(chunk)
    path, _, query = target.partition("?")
    try:
        params = urllib.parse.parse_qs(query, strict_parsing=bool(query), max_num_fields=10)
    except ValueError:
        raise _HttpError("400 Bad Request", "malformed query string") from None
    return _Request(method, urllib.parse.unquote(path), params, authorization)


def _authorize(token: str | None, request: _Request) -> None:
    """POSTs change the bookie: they need ``Authorization: Bearer <admin token>``."""
    if token is None:
        raise _HttpError(
            "403 Forbidden",
            f"{request.method} {request.path} is disabled: start the bookie with "
            "--admin-token or --admin-token-file to allow admin POSTs",
        )
    scheme, _, given = (request.authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(
        given.strip().encode(), token.encode()
    ):
        raise _HttpError(
            "401 Unauthorized",
            f"{request.method} {request.path} needs the admin token (Authorization: Bearer TOKEN)",
            ('WWW-Authenticate: Bearer realm="walkit-bookie"',),
        )


def _allow(request: _Request, *methods: str) -> None:
    if request.method not in methods:
        raise _HttpError(
            "405 Method Not Allowed",
            f"{request.path} takes {' or '.join(methods)}",
            (f"Allow: {', '.join(methods)}",),
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


async def _route(bookie: AdminTarget, registry: CollectorRegistry, request: _Request) -> bytes:
    path = request.path
    if path == "/metrics":
        _allow(request, "GET")
        body = await trio.to_thread.run_sync(generate_latest, registry)
        return _response("200 OK", body, CONTENT_TYPE_LATEST)
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
        return _json("200 OK", doc)
    if path == "/admin/gc":
        _allow(request, "GET", "POST")
        if request.method == "GET":
            return _json("200 OK", gc_status(bookie))
        _authorize(bookie.config.admin_token, request)
        compaction = request.query.get("compact", ["none"])
        if len(compaction) != 1 or compaction[0] not in ("none", "minor", "major"):
            raise _HttpError("400 Bad Request", "compact must be none, minor or major")
        report = await bookie.collect_garbage(None if compaction[0] == "none" else compaction[0])
        return _json("200 OK", report.to_dict())
    raise _HttpError("404 Not Found", "try /metrics, /health or /admin/gc")


async def _handle(
    bookie: AdminTarget, registry: CollectorRegistry, slots: trio.Semaphore, stream: trio.abc.Stream
) -> None:
    try:
        if slots.value == 0:
            # Over the limit: answer at once, then half-close and drain briefly, as for any
            # answer (closing with the request unread would reset the connection, and the
            # client would see a reset instead of the 503).
            with trio.move_on_after(1.0):
                await stream.send_all(
                    _response(
                        "503 Service Unavailable",
                        b"too many admin connections\n",
                        headers=("Retry-After: 1",),
                    )
                )
            await _linger(stream)
            return
        async with slots:
            try:
                request = await _read_request(stream)
                if request is None:
                    return
                answer = await _route(bookie, registry, request)
            except _HttpError as exc:
                answer = _response(exc.status, f"{exc}\n".encode(), headers=exc.headers)
            except Exception as exc:  # never let a bad request or a bug stop the bookie
                log.exception("admin_request_failed", error=str(exc))
                answer = _response("500 Internal Server Error", f"{exc}\n".encode())
            with trio.move_on_after(_REQUEST_TIMEOUT):
                await stream.send_all(answer)
            await _linger(stream)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        log.debug("admin_connection_broken", error=str(exc))
    finally:
        await trio.aclose_forcefully(stream)


async def _linger(stream: trio.abc.Stream) -> None:
    """Half-close, then drain what the peer still sends (briefly, boundedly): closing with
    unread input resets the connection, which can destroy the answer before it is read."""
    if not isinstance(stream, trio.abc.HalfCloseableStream):
        return
    await stream.send_eof()
    drained = 0
    with trio.move_on_after(_LINGER):
        while drained < _LINGER_BYTES:
            chunk = await stream.receive_some(16384)
            if not chunk:
                return
            drained += len(chunk)


async def serve_admin(
    bookie: AdminTarget,
    host: str,
    port: int,
    registry: CollectorRegistry,
    *,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the admin endpoint until cancelled; report the bound (host, port)."""
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as exc:
        raise BookieIOError(f"cannot listen for HTTP on {host}:{port}: {exc}") from exc
    bound = listeners[0].socket.getsockname()[:2]
    async with trio.open_nursery() as nursery:
        handler = functools.partial(_handle, bookie, registry, trio.Semaphore(_MAX_CONNECTIONS))
        await nursery.start(functools.partial(trio.serve_listeners, handler, listeners))
        log.info("admin_listening", host=bound[0], port=bound[1])
        task_status.started((str(bound[0]), int(bound[1])))
