"""The frames queued for one bookie, and the task that writes them.

Requests are queued synchronously; one task writes everything queued with one send (coalescing
small frames is worth ~10x), big entries go to the kernel as they are with scatter-gather
writes, and a huge backlog goes out in bounded writes. While that task is parked, the code that
queues bytes writes them itself (:mod:`walkit.net._direct`).
"""

from __future__ import annotations

import socket
from typing import Final, final

import anyio

from walkit._loop import EventLoop
from walkit.net._direct import direct_fd, unwritten, write_now
from walkit.net._network import ClientStream
from walkit.net._socket import SocketStream

__all__ = ["Outbox"]

#: Largest single ``send``: beyond this, queued frames go out in several writes.
_MAX_SEND: Final = 4 * 1024 * 1024
#: Average bytes per queued part above which parts are sent with one sendmsg, not joined.
_VECTOR_MIN: Final = 8 * 1024
#: Buffers per sendmsg call (Linux's IOV_MAX is 1024).
_IOV_MAX: Final = 512


@final
class Outbox:
    """What waits to be written to one connection (see the module docstring)."""

    __slots__ = ("_direct_fd", "_loop", "_ready", "parts", "sends")

    def __init__(self, loop: EventLoop) -> None:
        self._loop = loop
        #: Queued parts of frames, in order; replaced (not cleared) when the task takes them.
        self.parts: list[bytes | memoryview] = []
        self._ready = anyio.Event()
        #: The socket to write to directly while the task is parked, else -1.
        self._direct_fd = -1
        #: Writes made (for tests and benchmarks).
        self.sends = 0

    def kick(self) -> None:
        """Parts were queued on an empty outbox: write them now if the task is parked, else
        (or for what the socket did not take) wake it."""
        fd = self._direct_fd
        if fd >= 0:
            out = self.parts
            written = write_now(fd, out)
            if written:
                self.sends += 1
                rest = unwritten(out, written)
                out.clear()
                if not rest:
                    return
                out.extend(rest)
        self._ready.set()

    def clear(self) -> None:
        """Drop what is queued (the connection broke: its requests are failed)."""
        self.parts = []

    async def run(self, stream: ClientStream) -> None:
        """Write what is queued to ``stream`` until cancelled or the stream fails (raises)."""
        sock = stream.socket if isinstance(stream, SocketStream) else None
        fd = direct_fd(stream)
        while True:
            if not self.parts:
                self._ready = anyio.Event()
                self._direct_fd = fd
                try:
                    await self._ready.wait()
                finally:
                    self._direct_fd = -1
                continue
            out = self.parts
            self.parts = []
            self.sends += 1
            if len(out) == 1:
                # (memoryviews of large entries too: every stream here takes buffers)
                await stream.send(out[0])  # type: ignore[arg-type]
                continue
            total = sum(map(len, out))
            if sock is not None and total >= _VECTOR_MIN * len(out):
                # Big entries: hand the parts to the kernel as they are (no joined copy).
                await _send_vectored(sock, out, self._loop)
                continue
            if total <= _MAX_SEND:
                await stream.send(b"".join(out))
                continue
            # A huge backlog goes out in bounded writes (no giant joined copy).
            start = 0
            while start < len(out):
                end, size = start, 0
                while end < len(out) and (size < _MAX_SEND or end == start):
                    size += len(out[end])
                    end += 1
                await stream.send(b"".join(out[start:end]))
                start = end


async def _send_vectored(
    sock: socket.socket, parts: list[bytes | memoryview], loop: EventLoop
) -> None:
    """Send every byte of ``parts`` with scatter-gather writes (partial sends resumed)."""
    index = 0
    offset = 0  # bytes of parts[index] already sent
    count = len(parts)
    while index < count:
        batch: list[bytes | memoryview] = list(parts[index : index + _IOV_MAX])
        if offset:
            batch[0] = memoryview(parts[index])[offset:]
        try:
            sent = sock.sendmsg(batch)
        except BlockingIOError:
            await loop.wait_writable(sock)
            continue
        while sent > 0 and index < count:
            left = len(parts[index]) - offset
            if sent >= left:
                sent -= left
                index += 1
                offset = 0
            else:
                offset += sent
                sent = 0
    await loop.checkpoint()
