"""The client's TCP connections to bookies: a non-blocking socket of walkit's own.

AnyIO's TCP streams on asyncio sit on an asyncio transport, which owns the socket and reads it
itself; the connection's hot path (:mod:`walkit.net._connection`) reads into one reused buffer
and writes from the caller while the send task is parked, which needs the socket itself. So
plain TCP connections are made here, as a :class:`SocketStream`: an AnyIO byte stream over a
socket nobody else reads, waiting with the running loop's readiness calls (trio's, or AnyIO's
on asyncio). TLS and simulated connections are other AnyIO streams.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from typing import Any, Final, final

import anyio
import anyio.abc
from anyio.abc import SocketAttribute

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

    @property
    def extra_attributes(self) -> dict[Any, Any]:
        return {
            SocketAttribute.raw_socket: lambda: self.socket,
            SocketAttribute.family: lambda: self.socket.family,
            SocketAttribute.remote_address: lambda: self.socket.getpeername(),
            SocketAttribute.local_address: lambda: self.socket.getsockname(),
        }

    def _failed(self, exc: OSError) -> Exception:
        if self._closed:
            return anyio.ClosedResourceError()
        return anyio.BrokenResourceError(f"connection broken: {exc}")

    async def receive(self, max_bytes: int = _RECEIVE_SIZE) -> bytes:
        await anyio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self._closed:
                raise anyio.ClosedResourceError
            try:
                data = self.socket.recv(max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(self.socket)
                continue
            except OSError as exc:
                raise self._failed(exc) from exc
            if not data:
                raise anyio.EndOfStream
            await anyio.lowlevel.cancel_shielded_checkpoint()  # (as trio's sockets do)
            return data

    async def send(self, item: bytes | bytearray | memoryview) -> None:
        await anyio.lowlevel.checkpoint_if_cancelled()
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
        await anyio.lowlevel.cancel_shielded_checkpoint()

    async def send_eof(self) -> None:
        try:
            self.socket.shutdown(socket.SHUT_WR)
        except OSError as exc:
            raise self._failed(exc) from exc

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            # Wakes a task waiting on the socket (it then sees the stream closed).
            anyio.notify_closing(self.socket)
            self.socket.close()
        await anyio.lowlevel.checkpoint()
