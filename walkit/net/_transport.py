"""The Network seam and its TCP implementation.

Two sides, two stream types. ``connect`` is the client's: it runs on whatever event loop the
client runs on (trio or asyncio), so it returns an AnyIO byte stream. ``serve`` is the bookie's,
and the bookie runs on trio alone: its connections are trio streams.
"""

from __future__ import annotations

import errno
import functools
import socket
from collections.abc import Awaitable, Callable
from typing import Protocol, final

import anyio
import anyio.abc
import trio

from walkit._core.types import BookieId
from walkit.errors import BookieUnavailableError
from walkit.net._socket import open_tcp_socket

#: What a bookie runs for each connection it accepts.
StreamHandler = Callable[[trio.abc.Stream], Awaitable[None]]
#: A client's connection to a bookie.
ClientStream = anyio.abc.ByteStream

#: What a broken client stream raises (AnyIO's stream errors, and the socket's own).
STREAM_ERRORS = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
    OSError,
)


class Network(Protocol):
    """Opens streams to bookies and serves bookies' listening sockets."""

    async def connect(self, address: BookieId) -> ClientStream:
        """Open a stream to ``address`` (on the running event loop, trio or asyncio); raise
        BookieUnavailableError if it cannot be reached."""
        ...

    async def serve(
        self,
        host: str,
        port: int,
        handler: StreamHandler,
        *,
        task_status: trio.TaskStatus[BookieId] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on host:port (0 picks a free port), report the bound address through
        ``task_status.started``, then run ``handler`` for each connection until cancelled
        (under trio: bookies run on trio)."""
        ...


@final
class TcpNetwork:
    """Real TCP (with TCP_NODELAY; small frames are coalesced by the callers instead)."""

    async def connect(self, address: BookieId) -> ClientStream:
        try:
            return await open_tcp_socket(address.host, address.port)
        except OSError as exc:
            raise BookieUnavailableError(f"cannot connect to bookie {address}: {exc}") from exc

    async def serve(
        self,
        host: str,
        port: int,
        handler: StreamHandler,
        *,
        task_status: trio.TaskStatus[BookieId] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            listeners = await trio.open_tcp_listeners(port, host=host)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise OSError(exc.errno, f"port {port} on {host} is already in use") from exc
            raise
        sock = listeners[0].socket
        bound_host, bound_port = sock.getsockname()[:2]
        if sock.family == socket.AF_INET6 and bound_host == "::":
            bound_host = host
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(trio.serve_listeners, handler, listeners))
            task_status.started(
                BookieId(host if bound_host in ("0.0.0.0", "::") else bound_host, bound_port)
            )
