"""The KV service's handler served by uvicorn instead of kv_http: for comparison only.

``kv_store.py serve --http-server uvicorn-httptools`` (or ``uvicorn-h11``) serves the same
handler through an ASGI app on uvicorn, in the service's own event loop. bench/kv.py
measures the service on each server in one run (docs/benchmarks.md); docs/kv.md, "Why this
server", says why the service keeps kv_http: uvicorn bounds neither how long a request head
may take to arrive nor (on httptools) how long an unfinished header line may grow, and it
never closes a peer that does not take its answers.

What uvicorn lets us set is set: connections (``limit_concurrency``: one more gets 503),
the keep-alive idle time, and on h11 the bytes of an unfinished head
(``h11_max_incomplete_event_size``). A body over ``max_body`` gets 413, from its
``Content-Length`` before it arrives, else as it arrives.
"""

from __future__ import annotations

import inspect
import socket
import time
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import anyio
import anyio.abc
from kv_http import MAX_HEAD, Handler, Limits, Observer, Request, Response, Stats, error

#: The servers ``--http-server`` may choose: kv_http, or uvicorn on one of its parsers.
HTTP_SERVERS = ("kv_http", "uvicorn-httptools", "uvicorn-h11")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def asgi_app(
    handler: Handler, max_body: int, observe: Observer | None = None
) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """An ASGI app that answers each request with ``handler``."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return  # (lifespan is off; no websockets)
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope["headers"]
        }
        response = await _body(receive, headers, max_body)
        query = scope["query_string"].decode("latin-1")
        request = Request(
            scope["method"],
            scope["path"],  # percent-decoded by uvicorn
            dict(urllib.parse.parse_qsl(query, keep_blank_values=True)) if query else {},
            headers,
            response if isinstance(response, bytes) else b"",
            time.perf_counter(),
        )
        if not isinstance(response, Response):
            answer = handler(request)
            response = await answer if inspect.isawaitable(answer) else answer
        await send(
            {
                "type": "http.response.start",
                "status": response.status,
                "headers": [(b"content-type", response.content_type.encode("latin-1"))]
                + [(k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers],
            }
        )
        await send({"type": "http.response.body", "body": response.body})
        if observe is not None:
            observe(request, response, time.perf_counter())

    return app


async def _body(receive: Receive, headers: dict[str, str], max_body: int) -> bytes | Response:
    """The request's body, or a 413 once it is known to be over ``max_body``."""
    length = headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_body:
        return error(413, f"body over {max_body} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b""  # the peer went away; the answer goes nowhere
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > max_body:
            return error(413, f"body over {max_body} bytes")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def serve_uvicorn(
    handler: Handler,
    host: str,
    port: int,
    *,
    parser: str,
    max_body: int,
    limits: Limits,
    stats: Stats | None = None,
    observe: Observer | None = None,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``handler`` on uvicorn (``parser``: ``httptools`` or ``h11``) in this event
    loop until cancelled; ``task_status.started(port)`` once listening. ``stats`` learns
    the open connections from uvicorn's own count (its other counters are kv_http's)."""
    import uvicorn

    config = uvicorn.Config(
        asgi_app(handler, max_body, observe),
        http=parser,
        lifespan="off",
        access_log=False,
        log_level="warning",
        limit_concurrency=limits.max_connections,
        timeout_keep_alive=max(1, round(limits.idle_timeout)),
        h11_max_incomplete_event_size=MAX_HEAD,
        backlog=1024,
    )
    config.load()
    server = uvicorn.Server(config)
    server.lifespan = config.lifespan_class(config)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot serve HTTP on {host}:{port}: {exc.strerror}") from exc
    sock.listen(1024)
    sock.setblocking(False)
    await server.startup(sockets=[sock])
    if stats is not None:
        # uvicorn keeps the set of its open connections (its protocols) on the server state.
        stats.open_now = lambda: len(server.server_state.connections)
    try:
        task_status.started(sock.getsockname()[1])
        await server.main_loop()  # (ticks uvicorn's Date header; ends when cancelled)
    finally:
        server.should_exit = True
        config.timeout_graceful_shutdown = 1
        with anyio.CancelScope(shield=True):
            await server.shutdown(sockets=[sock])
