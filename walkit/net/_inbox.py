"""The bytes a connection has received and not yet handed out, in one reused buffer.

The socket writes straight into the buffer (``recv_into``). Asking trio for a fresh ``bytes``
per read instead allocates the whole read size every time (large reads come from ``mmap``, so
each one page-faults), and a frame split across two reads was copied again to join it, then
moved down when the frame before it was dropped. Here, whole frames are decoded where they
landed; only the start of a frame cut off at the buffer's end is moved, once, to the front.
"""

from __future__ import annotations

from typing import Final, final

from walkit._core.wire import frame_length

__all__ = ["Inbox"]

#: Fewer free bytes than this after the data: move the data down before the next read.
_MIN_ROOM: Final = 16 * 1024
#: Bytes of a frame's start needed to know its length.
_PREFIX: Final = 4
#: A buffer grown for a large frame is kept up to this size (batch read answers of 1 MiB
#: come one after another: a fresh buffer for each, from ``mmap``, page-faulted every time and
#: dropped again, cost a copier ~8 % of its CPU); past it, the first size comes back.
_KEEP: Final = 4 * 1024 * 1024


@final
class Inbox:
    """``[start, end)`` of ``buffer`` holds received bytes not yet consumed."""

    __slots__ = ("_buffer", "_end", "_size", "_start", "_view", "max_frame_size")

    def __init__(self, size: int, max_frame_size: int) -> None:
        self._size = size
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._view = memoryview(self._buffer)
        self._start = 0
        self._end = 0

    def __len__(self) -> int:
        return self._end - self._start

    def space(self) -> memoryview:
        """Where the next read goes: room for the rest of the frame being received (its
        length is checked against ``max_frame_size``: RemoteProtocolError or
        FrameTooLargeError), and at least ``_MIN_ROOM`` bytes; no more than the first size
        unless that frame needs it."""
        start, end = self._start, self._end
        if start == end:
            start = end = self._start = self._end = 0
            if len(self._buffer) < self._size or len(self._buffer) > _KEEP:
                self._replace(self._size)  # first use, or after an oversized frame
        length = frame_length(self._view, start, self.max_frame_size) if end > start else None
        needed = _PREFIX if length is None else _PREFIX + length
        wanted = max(start + needed, end + _MIN_ROOM)
        if wanted > len(self._buffer):
            held = end - start
            if max(needed, held + _MIN_ROOM) > len(self._buffer):
                # Twice the frame (within _KEEP): the next such frame lands after this one
                # more often than it must be moved down.
                grown = max(self._size, needed, held + _MIN_ROOM)
                self._replace(max(grown, min(2 * grown, _KEEP)))
            else:
                self._view[:held] = self._view[start:end]
            self._start, self._end = 0, held
            start, end = 0, held
        # At most the first size, or the rest of the frame being received: a receive that
        # fills what it was offered tells the receiver more is queued (``walkit.net._receive``),
        # which a buffer kept large for big frames would hide.
        return self._view[end : end + max(self._size, start + needed - end)]

    def _replace(self, size: int) -> None:
        """A new buffer of ``size`` bytes, holding what is unconsumed at its front (a new
        object, not a resize: views of the old one may still be alive)."""
        held = self._view[self._start : self._end]
        buffer = bytearray(size)
        buffer[: len(held)] = held
        self._buffer = buffer
        self._view = memoryview(buffer)
        self._end -= self._start
        self._start = 0

    def received(self, count: int) -> None:
        """``count`` bytes were written at the start of :meth:`space`."""
        self._end += count

    def data(self) -> memoryview:
        """The unconsumed bytes (valid until the next :meth:`space`)."""
        return self._view[self._start : self._end]

    def consume(self, count: int) -> None:
        self._start += count
