"""Receiving from a trio socket with one system call per wake-up.

trio's ``recv_into`` tries the socket first and waits only if it would block. When the
previous receive drained the socket (a lone request or answer: what one append in flight
looks like), that first try is a wasted ``recvfrom`` returning EAGAIN, and on this machine a
system call is several microseconds. So after a receive that did not fill its buffer we wait
for the socket first and then read once; after one that filled it (more is probably queued)
we try at once, as trio does.
"""

from __future__ import annotations

import os
from typing import final

import trio

__all__ = ["Receiver"]


@final
class Receiver:
    """Receives from one non-blocking trio socket into the caller's buffers."""

    __slots__ = ("_fd", "_more", "_sock")

    def __init__(self, sock: trio.socket.SocketType) -> None:
        self._sock = sock
        self._fd = sock.fileno()
        #: Whether the last receive filled its buffer (then more is likely queued).
        self._more = False

    async def wait_readable(self) -> None:
        """Wait until the socket has data (or an end or error) to receive; the next receive
        then reads at once."""
        await trio.lowlevel.wait_readable(self._sock)
        self._more = True

    async def receive_into(self, buffer: bytearray | memoryview) -> int:
        """Receive into ``buffer``; the byte count (0: the peer closed). Raises OSError as
        the socket does; always a checkpoint."""
        size = len(buffer)
        if self._more:
            count = await self._sock.recv_into(buffer)
        else:
            sock, fd = self._sock, self._fd
            while True:
                await trio.lowlevel.wait_readable(sock)
                try:
                    count = os.readv(fd, (buffer,))
                except BlockingIOError:  # (woken without data: wait again)
                    continue
                break
        self._more = count == size
        return count
