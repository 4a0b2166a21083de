"""Receiving from a socket with one system call per wake-up.

A plain receive tries the socket first and waits only if it would block (trio's ``recv_into``
does). When the
previous receive drained the socket (a lone request or answer: what one append in flight
looks like), that first try is a wasted ``recvfrom`` returning EAGAIN, and on this machine a
system call is several microseconds. So after a receive that did not fill its buffer we wait
for the socket first and then read once; after one that filled it (more is probably queued)
we try at once, as trio does.
"""

from __future__ import annotations

import os
from typing import Protocol, final

from walkit._loop import EventLoop, current_loop

__all__ = ["Receiver"]


class Socket(Protocol):
    """A non-blocking socket."""

    def fileno(self) -> int: ...


@final
class Receiver:
    """Receives from one non-blocking socket into the caller's buffers, waiting with the
    running event loop's readiness call."""

    __slots__ = ("_checkpoint", "_fd", "_more", "_sock", "_wait")

    def __init__(
        self, sock: Socket, loop: EventLoop | None = None, *, keep_registered: bool = False
    ) -> None:
        """``keep_registered``: keep the socket watched between waits (a reader that waits
        for it all its life; then :meth:`close` it before the socket)."""
        loop = loop if loop is not None else current_loop()
        self._sock = sock
        self._fd = sock.fileno()
        self._wait = loop.readable_waiter(sock, keep_registered=keep_registered)
        self._checkpoint = loop.checkpoint
        #: Whether the last receive filled its buffer (then more is likely queued).
        self._more = False

    async def wait_readable(self) -> None:
        """Wait until the socket has data (or an end or error) to receive; the next receive
        then reads at once."""
        await self._wait()
        self._more = True

    async def receive_into(self, buffer: bytearray | memoryview) -> int:
        """Receive into ``buffer``; the byte count (0: the peer closed). Raises OSError as
        the socket does; always a checkpoint."""
        size = len(buffer)
        fd = self._fd
        if self._more:
            try:
                count = os.readv(fd, (buffer,))
            except BlockingIOError:
                count = -1
            else:
                await self._checkpoint()  # (it read without waiting: let others run)
        else:
            count = -1
        while count < 0:
            await self._wait()
            try:
                count = os.readv(fd, (buffer,))
            except BlockingIOError:  # (woken without data: wait again)
                continue
        self._more = count == size
        return count

    def close(self) -> None:
        """Stop watching the socket (``keep_registered``)."""
        self._wait.close()
