"""OpenTelemetry trace context in record headers (the otel extra): a log opened with
``trace_context=True`` puts the current span's context in each record it appends, and
``walkit.otel.extract`` gives it back to the consumer, so one trace runs from an HTTP request
that appended a record (walkit.sync in a threaded HTTP server) to the consumer that applied
it. Spans are recorded by the OpenTelemetry SDK's in-memory exporter."""

from __future__ import annotations

import http.client
import http.server
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

import walkit.otel
import walkit.sync
from tests._cluster import process_cluster
from tests.client.conftest import cluster, connect
from walkit import Log, Record


@pytest.fixture
def spans() -> Iterator[tuple[trace.Tracer, InMemorySpanExporter]]:
    """A tracer of a provider of its own (the global one is set once per process)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("walkit-tests"), exporter
    provider.shutdown()


def _trace_id(record: walkit.LogRecord) -> int:
    return trace.get_current_span(walkit.otel.extract(record)).get_span_context().trace_id


async def test_appends_carry_the_current_trace_context(
    memory_url: str, tmp_path: Path, spans: tuple[trace.Tracer, InMemorySpanExporter]
) -> None:
    tracer, exporter = spans
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        async with Log.open(client, "traced", trace_context=True) as log:
            async with log.writer() as w:
                with tracer.start_as_current_span("produce") as produce:
                    one = await w.append(b"one", headers={"app": b"x"})
                    batch = await w.append_batch([b"two", Record(b"three", key=b"k")])
                    own = await w.append(b"own", headers={"traceparent": b"kept"})
                outside = await w.append(b"outside")  # no current span: nothing added
            got = {r.position: r async for r in log.reader(follow=False)}
            for pos in [one, *batch]:
                assert _trace_id(got[pos]) == produce.get_span_context().trace_id
            headers = got[one].headers
            assert headers is not None and headers[0] == ("app", b"x")
            assert got[batch[1]].key == b"k"
            assert got[own].headers == (("traceparent", b"kept"),)
            assert got[outside].headers is None
            # The consumer continues the trace.
            with tracer.start_as_current_span("apply", context=walkit.otel.extract(got[one])):
                pass
        async with Log.open(client, "untraced") as log:
            async with log.writer() as w:
                with tracer.start_as_current_span("quiet"):
                    plain = await w.append(b"plain")
            assert [r.headers async for r in log.reader(plain, follow=False)] == [None]
    finished = {s.name: s for s in exporter.get_finished_spans()}
    apply = finished["apply"]
    assert apply.parent is not None
    assert apply.parent.span_id == finished["produce"].context.span_id
    assert apply.context.trace_id == finished["produce"].context.trace_id


def test_one_trace_from_the_http_request_to_the_consumer(
    tmp_path: Path, spans: tuple[trace.Tracer, InMemorySpanExporter]
) -> None:
    """An HTTP client's request (W3C traceparent in its headers), a threaded HTTP server that
    appends through walkit.sync in the request's span, a consumer that applies the record in a
    span of the trace the record carries: three spans, one trace, each the parent of the next."""
    tracer, exporter = spans
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 3), walkit.sync.Client.connect(url) as client:
        log = walkit.sync.Log.open(client, "orders", trace_context=True)
        with log.writer() as writer:

            class Handler(http.server.BaseHTTPRequestHandler):
                def do_PUT(self) -> None:
                    incoming = propagate.extract(dict(self.headers.items()))
                    with tracer.start_as_current_span("PUT /orders", context=incoming):
                        body = self.rfile.read(int(self.headers["Content-Length"]))
                        pos = writer.append(body, key=b"order")
                    self.send_response(201)
                    self.send_header("Content-Length", str(len(str(pos))))
                    self.end_headers()
                    self.wfile.write(str(pos).encode())

                def log_message(self, format: str, *args: Any) -> None:
                    pass

            server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
            threading.Thread(target=server.serve_forever, daemon=True).start()
            try:
                with tracer.start_as_current_span("client PUT"):
                    headers: dict[str, str] = {}
                    propagate.inject(headers)
                    conn = http.client.HTTPConnection("127.0.0.1", server.server_address[1])
                    conn.request("PUT", "/orders", body=b"pay 10", headers=headers)
                    answer = conn.getresponse()
                    assert answer.status == 201
                    position = answer.read().decode()
                    conn.close()
            finally:
                server.shutdown()
                server.server_close()
        reader = log.reader(follow=False)
        record = next(iter(reader))
        assert str(record.position) == position and record.key == b"order"
        with tracer.start_as_current_span("apply", context=walkit.otel.extract(record)):
            pass
        log.close()
    finished = {s.name: s for s in exporter.get_finished_spans()}
    client_span, server_span, apply = (
        finished["client PUT"],
        finished["PUT /orders"],
        finished["apply"],
    )
    assert {s.context.trace_id for s in finished.values()} == {client_span.context.trace_id}
    assert server_span.parent is not None and apply.parent is not None
    assert server_span.parent.span_id == client_span.context.span_id
    assert apply.parent.span_id == server_span.context.span_id


def test_trace_context_without_opentelemetry_is_a_clear_error() -> None:
    """(opentelemetry-api is installed here: the check itself is tested by hiding it.)"""
    import sys

    from walkit.errors import ConfigurationError
    from walkit.log import LogOptions

    saved = {k: v for k, v in sys.modules.items() if k.startswith("opentelemetry")}
    try:
        for name in saved:
            sys.modules[name] = None  # type: ignore[assignment]  # (import raises ImportError)
        with pytest.raises(ConfigurationError, match=r"walkit\[otel\]"):
            LogOptions.from_kwargs({"trace_context": True})
        assert LogOptions.from_kwargs({"trace_context": False}).trace_context is False
    finally:
        sys.modules.update(saved)
    with pytest.raises(ConfigurationError, match="trace_context"):
        LogOptions.from_kwargs({"trace_context": "yes"})
