"""Writing to an idle socket from the caller, without waking its send task.

A connection's send task parks while it has nothing to send. Waking it for every request (or
every answer) costs a scheduling round of the event loop per message, which at one request in
flight is a good part of the latency. So when the task is parked, the code that queues bytes
writes them itself, without blocking; whatever the socket does not take at once (or an error)
is left for the send task, which then sends the rest and meets the error itself.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final

from walkit.net._socket import SocketStream

__all__ = ["direct_fd", "unwritten", "write_now"]

#: Most buffers one writev takes (POSIX guarantees at least 16; Linux takes 1024).
_IOV_MAX: Final = 1024


def direct_fd(stream: object) -> int:
    """The descriptor to write to directly, or -1 (TLS and in-memory streams: never): a
    :class:`~walkit.net._socket.SocketStream`, a client's or a bookie's."""
    if type(stream) is SocketStream:
        return stream.socket.fileno()
    return -1


def write_now(fd: int, parts: Sequence[bytes | memoryview]) -> int:
    """Write what the socket takes now of ``parts`` (non-blocking, as every socket here is);
    return how many bytes (0 when it would block or failed)."""
    try:
        if len(parts) == 1:
            return os.write(fd, parts[0])
        if len(parts) <= _IOV_MAX:
            return os.writev(fd, parts)
    except OSError:
        pass
    return 0


def unwritten(parts: Sequence[bytes | memoryview], written: int) -> list[bytes | memoryview]:
    """What is left of ``parts`` after their first ``written`` bytes (a view of the part
    written in part, not a copy: a bookie's answers share the write cache's entries, and one
    copy of a 4 MiB entry per connection was gigabytes over a thousand connections)."""
    for i, part in enumerate(parts):
        if written < len(part):
            return [memoryview(part)[written:], *parts[i + 1 :]]
        written -= len(part)
    return []
