"""Aligned, direct writes for the journal and entry logs.

Writing through the page cache costs more CPU than anything else in a bookie on this kind of
machine (the copy into fresh page-cache pages); O_DIRECT writes skip it. O_DIRECT needs the
buffer, the offset and the length aligned to the block size, so writers copy into one reused
page-aligned buffer and pad each write to a ``BLOCK`` boundary. Where the file system refuses
O_DIRECT (tmpfs, some overlays) the same code falls back to ordinary writes.
"""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path
from typing import final

BLOCK = 4096
_ZEROS = bytes(BLOCK)


@final
class AlignedBuffer:
    """One reused page-aligned buffer (an anonymous mmap), grown on demand."""

    def __init__(self, size: int) -> None:
        self._mm = mmap.mmap(-1, _round_up(size))
        self.view = memoryview(self._mm)

    def reserve(self, size: int) -> memoryview:
        if size > len(self._mm):
            self.view.release()
            self._mm.close()
            self._mm = mmap.mmap(-1, _round_up(size * 2))
            self.view = memoryview(self._mm)
        return self.view

    def pad(self, end: int, *, at_least: int = 0) -> int:
        """Zero-fill from ``end`` to the first block boundary at or after ``end + at_least``;
        return that boundary."""
        padded = _round_up(end + at_least)
        while end < padded:
            n = min(padded - end, BLOCK)
            self.view[end : end + n] = _ZEROS[:n]
            end += n
        return padded


def _round_up(n: int) -> int:
    return n + (-n) % BLOCK


@final
class AlignedFile:
    """A file written at aligned offsets, with O_DIRECT when possible.

    ``sync``: every write is durable when it returns (O_DSYNC); otherwise call ``sync()``.
    ``direct=False``: through the page cache (entry logs: big writes, then one sync), except
    what is written with :meth:`write_direct_at`.
    """

    def __init__(self, path: Path, *, sync: bool, direct: bool = True) -> None:
        self.path = path
        self._flags = os.O_WRONLY | os.O_CREAT | (os.O_DSYNC if sync else 0)
        self.direct = direct and hasattr(os, "O_DIRECT")
        try:
            self._fd = os.open(path, self._flags | (os.O_DIRECT if self.direct else 0), 0o600)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            self.direct = False
            self._fd = os.open(path, self._flags, 0o600)
        self.size = os.fstat(self._fd).st_size
        #: A second descriptor with O_DIRECT for ``write_direct_at`` (opened on first use;
        #: -1: not yet; -2: the file system refuses O_DIRECT).
        self._direct_fd = -1

    def write_at(self, data: memoryview, offset: int) -> None:
        """Write all of ``data`` (aligned length) at ``offset`` (aligned)."""
        written = 0
        while written < len(data):
            try:
                written += os.pwrite(self._fd, data[written:], offset + written)
            except OSError as exc:
                if exc.errno != errno.EINVAL or not self.direct:
                    raise
                self._fall_back()
        self.size = max(self.size, offset + written)

    def write_direct_at(self, data: memoryview, offset: int) -> None:
        """Write all of ``data`` (aligned length, from an aligned buffer) at ``offset``
        (aligned) around the page cache, on a file opened without O_DIRECT: for bulk data
        nobody reads soon (rereplication copies), whose copy into fresh page-cache pages would
        cost more CPU than anything else in the bookie. Not durable before ``sync()``, as any
        write here. Falls back to ``write_at`` where O_DIRECT is refused."""
        if self.direct or self._direct_fd == -2:
            self.write_at(data, offset)
            return
        if self._direct_fd == -1:
            try:
                self._direct_fd = os.open(self.path, os.O_WRONLY | os.O_DIRECT)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                self._direct_fd = -2
                self.write_at(data, offset)
                return
        written = 0
        while written < len(data):
            try:
                written += os.pwrite(self._direct_fd, data[written:], offset + written)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
                os.close(self._direct_fd)
                self._direct_fd = -2
                self.write_at(data[written:], offset + written)
                return
        self.size = max(self.size, offset + written)

    def _fall_back(self) -> None:
        os.close(self._fd)
        self.direct = False
        self._fd = os.open(self.path, self._flags, 0o600)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)
        self.size = size

    def sync(self) -> None:
        os.fdatasync(self._fd)

    def close(self) -> None:
        if self._direct_fd >= 0:
            os.close(self._direct_fd)
        self._direct_fd = -2
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
