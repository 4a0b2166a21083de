"""The bookie's HTTP admin endpoint: ``/metrics`` (prometheus text format) and ``/health``.

Metrics are read from the bookie's own counters when scraped (a custom collector), so the
request path pays nothing for them. The registry is injected (a fresh one per bookie by
default). The HTTP side is deliberately tiny: GET only, one request per connection, bounded
request size and time; anything else gets a 4xx and the bookie goes on.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, final

import structlog
import trio
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from walkit_bookie._bookie import Bookie

log = structlog.get_logger()

_MAX_REQUEST = 8192
_REQUEST_TIMEOUT = 5.0


@final
class BookieCollector(Collector):
    """Reads a bookie's counters at scrape time."""

    def __init__(self, bookie: Bookie) -> None:
        self._bookie = bookie

    def collect(self) -> Iterator[Metric]:
        b = self._bookie
        s = b.storage.stats
        counters = [
            ("requests", "Requests taken off the wire", b.requests),
            ("adds_answered", "Adds answered (any status)", b.adds_answered),
            ("reads_answered", "Reads and LAC reads answered (any status)", b.reads_answered),
            ("journal_syncs", "Durable journal writes (one per group commit)", s.journal_syncs),
            ("journal_records", "Records written to the journal", s.journal_records),
            ("journal_bytes", "Bytes written to the journal (with padding)", s.journal_bytes),
            ("group_commits", "Group commits", b.group_commit.groups),
            ("checkpoints", "Completed checkpoints", s.checkpoints),
            ("entries_flushed", "Entries written to entry logs at checkpoints", s.entries_flushed),
            ("connections_opened", "Client connections accepted", b.connections_opened),
        ]
        for name, text, value in counters:
            yield CounterMetricFamily(f"walkit_bookie_{name}", text, value=value)
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
            ("ledgers", "Ledgers this bookie holds state for", b.ledger_count),
            ("read_only", "1 when the bookie refuses writes", 1 if b.read_only else 0),
            (
                "disk_usage_ratio",
                "Highest used fraction of the data dirs' disks",
                b.storage.disk_usage(),
            ),
        ]
        for gauge, text, level in gauges:
            yield GaugeMetricFamily(f"walkit_bookie_{gauge}", text, value=float(level))


def _response(status: str, body: bytes, content_type: str = "text/plain; charset=utf-8") -> bytes:
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body


async def _read_request_line(stream: trio.abc.Stream) -> str | None:
    data = b""
    with trio.move_on_after(_REQUEST_TIMEOUT):
        while b"\r\n\r\n" not in data and b"\n\n" not in data:
            chunk = await stream.receive_some(4096)
            if not chunk:
                break
            data += chunk
            if len(data) > _MAX_REQUEST:
                return None
    line = data.split(b"\n", 1)[0].strip()
    try:
        return line.decode("ascii")
    except UnicodeDecodeError:
        return None


async def _handle(bookie: Bookie, registry: CollectorRegistry, stream: trio.abc.Stream) -> None:
    try:
        line = await _read_request_line(stream)
        parts = line.split() if line else []
        if len(parts) != 3 or not parts[2].startswith("HTTP/"):
            answer = _response("400 Bad Request", b"bad request\n")
        elif parts[0] != "GET":
            answer = _response("405 Method Not Allowed", b"only GET\n")
        else:
            path = parts[1].split("?", 1)[0]
            if path == "/metrics":
                body = await trio.to_thread.run_sync(generate_latest, registry)
                answer = _response("200 OK", body, CONTENT_TYPE_LATEST)
            elif path in ("/health", "/healthz"):
                doc: dict[str, Any] = {
                    "status": "ok",
                    "bookie_id": str(bookie.bookie_id),
                    "read_only": bookie.read_only,
                }
                answer = _response("200 OK", json.dumps(doc).encode(), "application/json")
            else:
                answer = _response("404 Not Found", b"try /metrics or /health\n")
        await stream.send_all(answer)
    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
        log.debug("admin_connection_broken", error=str(exc))
    finally:
        await trio.aclose_forcefully(stream)


async def serve_admin(
    bookie: Bookie,
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
        from walkit.errors import BookieIOError

        raise BookieIOError(f"cannot listen for HTTP on {host}:{port}: {exc}") from exc
    bound = listeners[0].socket.getsockname()[:2]
    async with trio.open_nursery() as nursery:
        handler = functools.partial(_handle, bookie, registry)
        await nursery.start(functools.partial(trio.serve_listeners, handler, listeners))
        log.info("admin_listening", host=bound[0], port=bound[1])
        task_status.started((str(bound[0]), int(bound[1])))
