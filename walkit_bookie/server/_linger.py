"""Closing a connection whose peer may still be sending: half-close, drain, then close.

Closing a TCP socket with unread input makes the kernel send a reset, and the reset can
destroy an answer already sent (the refusal that says why, an HTTP 400) before the peer reads
it. So a server that ends a connection on its own initiative half-closes first and reads what
the peer still sends, for a bounded time and a bounded number of bytes, before closing: what
web servers call a lingering close (RFC 9112, section 9.6).
"""

from __future__ import annotations

import anyio
import anyio.abc

__all__ = ["BROKEN", "linger"]

#: What a stream whose peer is gone (or that was closed here) raises.
BROKEN = (
    anyio.BrokenResourceError,
    anyio.ClosedResourceError,
    anyio.BusyResourceError,
    anyio.EndOfStream,
    OSError,
)


async def linger(stream: anyio.abc.ByteStream, *, grace: float, limit: int) -> None:
    """Half-close ``stream``, then drain what the peer sends until it closes its side, for at
    most ``grace`` seconds and ``limit`` bytes. A stream that cannot half-close (TLS) and a
    peer that is already gone end it at once."""
    try:
        with anyio.move_on_after(grace):
            await stream.send_eof()
            drained = 0
            while drained < limit:
                drained += len(await stream.receive(65536))
    except (*BROKEN, NotImplementedError):
        pass
