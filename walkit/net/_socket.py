"""The client's TCP connections to bookies: a non-blocking socket of walkit's own.

AnyIO's TCP streams on asyncio sit on an asyncio transport, which owns the socket and reads it
itself; the connection's hot path (:mod:`walkit.net._connection`) reads into one reused buffer
and writes from the caller while the send task is parked, which needs the socket itself. So
plain TCP connections are made here, as a :class:`SocketStream`: an AnyIO byte stream over a
socket nobody else reads, waiting with the running loop's readiness calls (trio's, or AnyIO's
on asyncio). TLS runs over it (an AnyIO ``TLSStream``); simulated connections are other AnyIO
streams.

Its ``receive`` keeps the socket watched between waits (``EventLoop.readable_waiter``), and
each call is one schedule point: the wait, or a checkpoint before a read that needs none.
AnyIO's ``wait_readable`` on uvloop adds and removes the watch per wait (an ``ioctl``, two
``epoll_ctl`` and an ``io_uring_enter``), and a checkpoint after the read cost another pass
of the loop: a TLS connection reads its transport once per request at low load.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import Any, Final, final

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

from walkit._loop import ReadableWaiter, current_loop

__all__ = ["SocketStream", "open_tcp_socket"]

#: Bytes one ``receive()`` asks for when the caller does not say.
_RECEIVE_SIZE: Final = 65536


async def _resolve(host: str, port: int) -> list[tuple[int, Any]]:
    """(family, address) to try, in order; a literal address needs no lookup (on asyncio a
    lookup is a round trip through a thread)."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        infos = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return [(info[0], info[4]) for info in infos]
    if ip.version == 6:
        return [(socket.AF_INET6, (host, port, 0, 0))]
    return [(socket.AF_INET, (host, port))]


async def open_tcp_socket(host: str, port: int) -> SocketStream:
    """Connect to ``host:port`` (each address in turn); OSError when none answers."""
    last: OSError | None = None
    for family, address in await _resolve(host, port):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            try:
                sock.connect(address)
            except BlockingIOError:
                await anyio.wait_writable(sock)
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if code:
                    raise OSError(
                        code, f"{errno.errorcode.get(code, code)}: {host}:{port}"
                    ) from None
        except OSError as exc:
            sock.close()
            last = exc
            continue
        except BaseException:
            sock.close()
            raise
        return SocketStream(sock)
    raise last or OSError(errno.EHOSTUNREACH, f"no address for {host}")


@final
class SocketStream(anyio.abc.ByteStream):
    """A connected, non-blocking TCP socket as an AnyIO byte stream (``.socket`` is it)."""

    def __init__(self, sock: socket.socket) -> None:
        self.socket = sock
        self._closed = False
        #: The socket's watch, made by the first receive (it needs the running loop).
        self._readable: ReadableWaiter | None = None
        self._checkpoint = current_loop().checkpoint
        #: Whether the last receive filled ``max_bytes`` (more is probably queued: read at
        #: once; else wait first, saving a read that would find nothing).
        self._more = False

    @property
    def extra_attributes(self) -> dict[Any, Any]:
        return {
            SocketAttribute.raw_socket: self._hand_over,
            SocketAttribute.family: lambda: self.socket.family,
            SocketAttribute.remote_address: lambda: self.socket.getpeername(),
            SocketAttribute.local_address: lambda: self.socket.getsockname(),
        }

    def _hand_over(self) -> socket.socket:
        """The socket, for a caller that reads it itself (a connection's hot path after the
        authentication read here): this stream's watch ends, so that only one is kept (a
        receive waiting on it meanwhile raises ClosedResourceError)."""
        readable, self._readable = self._readable, None
        if readable is not None:
            readable.close()
        return self.socket

    def _failed(self, exc: OSError) -> Exception:
        if self._closed:
            return anyio.ClosedResourceError()
        return anyio.BrokenResourceError(f"connection broken: {exc}")

    def _recv(self, max_bytes: int) -> bytes | None:
        """What the socket holds, without waiting (None: nothing yet)."""
        if self._closed:
            raise anyio.ClosedResourceError
        try:
            return self.socket.recv(max_bytes)
        except BlockingIOError:
            return None
        except OSError as exc:
            raise self._failed(exc) from exc

    async def receive(self, max_bytes: int = _RECEIVE_SIZE) -> bytes:
        data = None
        if self._more:
            await self._checkpoint()  # (before the read: a cancellation loses nothing)
            data = self._recv(max_bytes)
        while data is None:
            if self._closed:
                raise anyio.ClosedResourceError
            readable = self._readable
            if readable is None:
                readable = self._readable = current_loop().readable_waiter(
                    self.socket, keep_registered=True
                )
            try:
                await readable()
            except Exception:
                if self._closed:  # (closed while waiting; trio says so in its own words)
                    raise anyio.ClosedResourceError from None
                raise
            data = self._recv(max_bytes)
        if not data:
            raise anyio.EndOfStream
        self._more = len(data) == max_bytes
        return data

    async def send(self, item: bytes | bytearray | memoryview) -> None:
        await self._checkpoint()  # (before the send, as AnyIO's streams do)
        with memoryview(item) as view:
            sent = 0
            while sent < len(view):
                if self._closed:
                    raise anyio.ClosedResourceError
                try:
                    sent += self.socket.send(view[sent:])
                except BlockingIOError:
                    await anyio.wait_writable(self.socket)
                except OSError as exc:
                    raise self._failed(exc) from exc

    async def send_eof(self) -> None:
        try:
            self.socket.shutdown(socket.SHUT_WR)
        except OSError as exc:
            raise self._failed(exc) from exc

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            # Wakes a task waiting on the socket (it then sees the stream closed).
            if self._readable is not None:
                self._readable.close()
            anyio.notify_closing(self.socket)
            self.socket.close()
        await anyio.lowlevel.checkpoint()
