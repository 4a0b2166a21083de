"""The Network seam and its TCP implementation.

Both sides are AnyIO byte streams: ``connect`` (a client's) and ``serve`` (a bookie's) run on
whatever event loop their caller runs on, trio or asyncio (uvloop too). Plain TCP connections
on both sides are walkit's own :class:`~walkit.net._socket.SocketStream`, a non-blocking socket
nobody else reads, so the hot paths can read into reused buffers and write from the caller.
"""

from __future__ import annotations

import contextlib
import errno
import socket
import sys
from collections.abc import Awaitable, Callable
from typing import Final, Protocol, final

import anyio
import anyio.abc

from walkit._core.types import BookieId
from walkit._loop import current_loop
from walkit.errors import BookieUnavailableError
from walkit.net._socket import SocketStream, open_tcp_socket

#: What a bookie runs for each connection it accepts (the stream is closed when it returns).
StreamHandler = Callable[[anyio.abc.ByteStream], Awaitable[None]]
#: A client's connection to a bookie.
ClientStream = anyio.abc.ByteStream

#: What a broken stream raises (AnyIO's stream errors, and the socket's own).
STREAM_ERRORS = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.EndOfStream,
    OSError,
)

#: Connections the kernel queues for a listening socket before it is accepted.
_BACKLOG = 4096
#: Accept errors that say nothing about the listening socket (the connection went, or the
#: process is out of descriptors for a while): the accept loop goes on.
_ACCEPT_TRANSIENT = frozenset(
    {
        errno.ECONNABORTED,
        errno.EPROTO,
        errno.EPERM,
        errno.EMFILE,
        errno.ENFILE,
        errno.ENOBUFS,
        errno.ENOMEM,
    }
)
#: TCP_NOTSENT_LOWAT (Linux 3.12, macOS; not in Python's socket module everywhere).
_NOTSENT_LOWAT: Final = getattr(
    socket, "TCP_NOTSENT_LOWAT", 25 if sys.platform == "linux" else None
)
_NOTSENT_LOWAT_BYTES: Final = 16 * 1024
_OUT_OF_DESCRIPTORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


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
        task_status: anyio.abc.TaskStatus[BookieId] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Listen on host:port (0 picks a free port), report the bound address through
        ``task_status.started``, then run ``handler`` for each connection (closing its stream
        when it returns) until cancelled."""
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
        task_status: anyio.abc.TaskStatus[BookieId] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        listening = await listen_tcp(host, port)
        with listening:
            bound_host, bound_port = listening.getsockname()[:2]
            if bound_host in ("0.0.0.0", "::"):
                bound_host = host
            async with anyio.create_task_group() as tasks:
                task_status.started(BookieId(bound_host, bound_port))
                await accept_loop(listening, handler, tasks)


async def listen_tcp(host: str, port: int) -> socket.socket:
    """A non-blocking socket listening on host:port (the first address ``host`` resolves to);
    OSError saying so when the port is taken."""
    infos = await anyio.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise OSError(exc.errno, f"port {port} on {host} is already in use") from exc
            raise
        sock.listen(_BACKLOG)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


async def accept_loop(
    listening: socket.socket, handler: StreamHandler, tasks: anyio.abc.TaskGroup
) -> None:
    """Accept connections on ``listening`` for ever, each served by ``handler`` in a task of
    ``tasks`` (as a :class:`SocketStream`, closed when the handler returns)."""
    wait_readable = current_loop().wait_readable
    while True:
        try:
            sock, _ = listening.accept()
        except BlockingIOError:
            await wait_readable(listening)
            continue
        except OSError as exc:
            if exc.errno not in _ACCEPT_TRANSIENT:
                raise
            if exc.errno in _OUT_OF_DESCRIPTORS:
                await anyio.sleep(0.01)  # (as trio.serve_listeners: let connections close)
            continue
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if _NOTSENT_LOWAT is not None:
            # Bytes the kernel holds unsent stay few (as trio's sockets do): what a peer
            # does not read stays in the bookie's own queues, where its limits count it.
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, _NOTSENT_LOWAT, _NOTSENT_LOWAT_BYTES)
        tasks.start_soon(_run_handler, handler, SocketStream(sock))


async def _run_handler(handler: StreamHandler, stream: anyio.abc.ByteStream) -> None:
    try:
        await handler(stream)
    finally:
        await anyio.aclose_forcefully(stream)
