"""Closing a connection whose peer may still be sending: half-close, drain, then close.

Closing a TCP socket with unread input makes the kernel send a reset, and the reset can
destroy an answer already sent (the refusal that says why, an HTTP 400) before the peer reads
it. So a server that ends a connection on its own initiative half-closes first and reads what
the peer still sends, for a bounded time and a bounded number of bytes, before closing: what
web servers call a lingering close (RFC 9112, section 9.6).
"""

from __future__ import annotations

import trio

__all__ = ["linger"]


async def linger(stream: trio.abc.Stream, *, grace: float, limit: int) -> None:
    """Half-close ``stream``, then drain what the peer sends until it closes its side, for at
    most ``grace`` seconds and ``limit`` bytes. A stream that cannot half-close (not TCP) and
    a peer that is already gone end it at once."""
    if not isinstance(stream, trio.abc.HalfCloseableStream):
        return
    try:
        with trio.move_on_after(grace):
            await stream.send_eof()
            drained = 0
            while drained < limit and (chunk := await stream.receive_some(65536)):
                drained += len(chunk)
    except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
        pass
