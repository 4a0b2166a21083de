"""The Network seam and its TCP implementation."""

from __future__ import annotations

import errno
import functools
import socket
from collections.abc import Awaitable, Callable
from typing import Protocol, final

import trio

from walkit._core.types import BookieId
from walkit.errors import BookieUnavailableError

StreamHandler = Callable[[trio.abc.Stream], Awaitable[None]]


class Network(Protocol):
    """Opens streams to bookies and serves bookies' listening sockets."""

    async def connect(self, address: BookieId) -> trio.abc.Stream:
        """Open a stream to ``address``; raise BookieUnavailableError if it cannot be reached."""
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
        ``task_status.started``, then run ``handler`` for each connection until cancelled."""
        ...


@final
class TcpNetwork:
    """Real TCP (with TCP_NODELAY; small frames are coalesced by the callers instead)."""

    async def connect(self, address: BookieId) -> trio.abc.Stream:
        try:
            stream = await trio.open_tcp_stream(address.host, address.port)
        except OSError as exc:
            raise BookieUnavailableError(f"cannot connect to bookie {address}: {exc}") from exc
        return stream

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
