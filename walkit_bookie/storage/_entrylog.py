"""Entry logs: entries of all ledgers interleaved in append-only files, rolled by size.

A record is ``u32 length | u64 ledger | i64 entry | packet``. Entries reach entry logs at
checkpoints (from the write cache) and as rereplication copies (straight, in groups), sorted
by (ledger, entry) so that one ledger's entries sit together, synced once per write, and padded
with zeros to a block boundary at the end of each write. Checkpoints write in aligned 4 MiB
chunks through the page cache (entries just written stay cached for readers); copies, which
nobody reads soon, go around it (``direct``: one O_DIRECT write per group). The index maps
(ledger, entry) to (log id, offset of the packet, length). Compaction appends the live entries
of old logs the same way, then removes the old logs. Everything in here runs in a worker
thread.

A file opens with a header block: ``"WELG" | u32 format`` and zeros to the block's end. Entries
are read where the index points, so bookies that predate the header never look at it; files
they wrote have none, and are format 1 (docs/formats.md)."""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import final

from walkit.errors import BookieIOError
from walkit_bookie.storage._cookie import fsync_dir
from walkit_bookie.storage._directio import BLOCK, AlignedBuffer, AlignedFile
from walkit_bookie.storage._index import LOCATION, RECORD_HEADER, entry_key

ENTRYLOG_DIR = "entrylogs"
#: The format of entry log files this bookie writes (see docs/formats.md).
ENTRYLOG_FORMAT = 1
#: The formats it reads: files without a header are format 1.
ENTRYLOG_FORMATS = frozenset({1})
_FILE_HEADER = struct.Struct(">4sI")
_FILE_MAGIC = b"WELG"
_REC = struct.Struct(">IQq")
assert _REC.size == RECORD_HEADER
_SUFFIX = ".log"
_CHUNK = 4 << 20  # bytes per write (a multiple of BLOCK)
#: Bytes per O_DIRECT write: a whole group of copies (up to ``copy_group_max_bytes`` and one
#: entry) in one write, which the disk takes at once, not a chunk at a time.
_DIRECT_CHUNK = 16 << 20
#: Entries of at least this many bytes are read with two preads (record header, then the
#: packet alone) instead of one read sliced: a syscall more, a copy of the packet fewer.
_SPLIT_READ = 16 << 10

__all__ = ["ENTRYLOG_DIR", "LOCATION", "Appended", "EntryLogger"]


def file_format(head: bytes) -> int:
    """The format of an entry log file that starts with ``head`` (1 when it has no header)."""
    if len(head) >= _FILE_HEADER.size:
        magic, version = _FILE_HEADER.unpack_from(head, 0)
        if magic == _FILE_MAGIC:
            return int(version)
    return 1


def _header_size(path: Path) -> int:
    """The bytes of ``path``'s header (0: a file written before headers); BookieIOError for a
    format this bookie does not read."""
    with open(path, "rb") as file:
        head = file.read(_FILE_HEADER.size)
    version = file_format(head)
    if version not in ENTRYLOG_FORMATS:
        raise BookieIOError(
            f"entry log {path} is format {version}; this bookie reads {sorted(ENTRYLOG_FORMATS)} "
            "(a newer walkit wrote it: run that version)"
        )
    return BLOCK if head[:4] == _FILE_MAGIC else 0


@final
class Appended:
    """What one append wrote: (index key, location) pairs, the log, the bytes per ledger."""

    __slots__ = ("locations", "log_id", "usage")

    def __init__(
        self, locations: list[tuple[bytes, bytes]], log_id: int, usage: dict[int, int]
    ) -> None:
        self.locations = locations
        self.log_id = log_id
        self.usage = usage


@final
class EntryLogger:
    def __init__(self, dirs: Sequence[Path], max_size: int) -> None:
        self._dirs = [d / ENTRYLOG_DIR for d in dirs]
        self._max_size = max_size
        self._paths: dict[int, Path] = {}
        #: Bytes in each log file (padding and unindexed tails included).
        self.sizes: dict[int, int] = {}
        #: Bytes of each log file's header (0 for files written before headers).
        self.headers: dict[int, int] = {}
        for d in self._dirs:
            for p in d.iterdir():
                if p.suffix == _SUFFIX:
                    try:
                        log_id = int(p.stem, 16)
                    except ValueError:
                        continue
                    self.headers[log_id] = _header_size(p)
                    self._paths[log_id] = p
                    self.sizes[log_id] = p.stat().st_size
        self._readers: dict[int, int] = {}
        # A new log per start: the tail of the last one may hold a partial, unindexed write.
        self._next_id = max(self._paths, default=0) + 1
        self._file: AlignedFile | None = None
        self._id = 0
        self._offset = 0
        self._buffer = AlignedBuffer(_CHUNK + BLOCK)
        self._direct_buffer: AlignedBuffer | None = None  # made on the first direct write

    def _roll(self) -> AlignedFile:
        if self._file is not None:
            self._file.close()
        self._id = self._next_id
        self._next_id += 1
        directory = self._dirs[self._id % len(self._dirs)]
        path = directory / f"{self._id:016x}{_SUFFIX}"
        # Through the page cache, not O_DIRECT: one fdatasync then hands the whole write to
        # the disk at once, where O_DIRECT waits for each 4 MiB chunk in turn (the disk was
        # busy a third less while rereplicating; entries just written stay cached for readers).
        self._file = AlignedFile(path, sync=False, direct=False)
        if self._file.size == 0:  # (synced with the first write's entries)
            header = AlignedBuffer(BLOCK)
            _FILE_HEADER.pack_into(header.view, 0, _FILE_MAGIC, ENTRYLOG_FORMAT)
            self._file.write_at(header.view, 0)
            self.headers[self._id] = BLOCK
        else:
            self.headers[self._id] = _header_size(path)
        self._offset = self._file.size
        self._paths[self._id] = path
        self.sizes[self._id] = self._offset
        fsync_dir(directory)
        return self._file

    @property
    def current_id(self) -> int | None:
        """The log appends go to now (None before the first append of this run)."""
        return self._id if self._file is not None else None

    def log_ids(self) -> list[int]:
        return sorted(self._paths)

    def remove(self, log_id: int) -> int:
        """Delete a log file (not the current one); return its size. Readers must be done."""
        if log_id == self.current_id:
            raise ValueError(f"entry log {log_id} is being written")
        fd = self._readers.pop(log_id, None)
        if fd is not None:
            os.close(fd)
        path = self._paths.pop(log_id, None)
        size = self.sizes.pop(log_id, 0)
        self.headers.pop(log_id, None)
        if path is not None:
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            fsync_dir(path.parent)
        return size

    def append(self, entries: Sequence[tuple[int, int, bytes]]) -> list[tuple[bytes, bytes]]:
        """Write entries durably (aligned chunks, one fdatasync); return (key, location) pairs."""
        return self.write(entries).locations

    def write(self, entries: Sequence[tuple[int, int, bytes]], *, direct: bool = False) -> Appended:
        """Write entries durably (aligned chunks, one fdatasync): locations and usage.

        ``direct``: around the page cache (O_DIRECT), for entries nobody reads soon
        (rereplication copies): on a virtual machine, copying into fresh page-cache pages
        costs a bookie more CPU than the rest of storing a copy."""
        file = self._file
        if file is None or self._offset >= self._max_size:
            file = self._roll()
        if direct:
            if self._direct_buffer is None:
                self._direct_buffer = AlignedBuffer(_DIRECT_CHUNK + BLOCK)
            buffer, chunk, write_at = self._direct_buffer, _DIRECT_CHUNK, file.write_direct_at
        else:
            buffer, chunk, write_at = self._buffer, _CHUNK, file.write_at
        view = buffer.view
        locations: list[tuple[bytes, bytes]] = []
        usage: dict[int, int] = {}
        run_ledger, run_bytes = -1, 0  # entries come sorted by ledger: sum runs
        start = self._offset  # aligned: every append ends padded to a block
        at = start  # file offset of the next byte
        fill = 0  # bytes in the buffer
        pack_into = _REC.pack_into
        log_id = self._id
        try:
            for ledger_id, entry_id, packet in entries:
                size = len(packet)
                if ledger_id != run_ledger:
                    if run_bytes:
                        usage[run_ledger] = usage.get(run_ledger, 0) + run_bytes
                    run_ledger, run_bytes = ledger_id, 0
                run_bytes += _REC.size + size
                locations.append(
                    (entry_key(ledger_id, entry_id), LOCATION.pack(log_id, at + _REC.size, size))
                )
                if fill + _REC.size + size <= chunk:  # the usual case: it fits the chunk
                    pack_into(view, fill, size, ledger_id, entry_id)
                    view[fill + _REC.size : fill + _REC.size + size] = packet
                    fill += _REC.size + size
                    at += _REC.size + size
                    continue
                for part in (_REC.pack(size, ledger_id, entry_id), packet):
                    data = memoryview(part)
                    while data:
                        n = min(len(data), chunk - fill)
                        view[fill : fill + n] = data[:n]
                        fill += n
                        at += n
                        data = data[n:]
                        if fill == chunk:  # full chunks keep every write aligned
                            write_at(view[:fill], at - fill)
                            fill = 0
            if fill:
                end = buffer.pad(fill)
                write_at(view[:end], at - fill)
                at = at - fill + end
            file.sync()
        except OSError:
            # Leave no half-written record in the middle of the file: start a fresh log next time.
            file.close()
            self._file = None
            self.sizes[log_id] = file.size
            raise
        if run_bytes:
            usage[run_ledger] = usage.get(run_ledger, 0) + run_bytes
        self._offset = at
        self.sizes[log_id] = at
        return Appended(locations, log_id, usage)

    def read(self, location: bytes, ledger_id: int, entry_id: int) -> bytes | None:
        log_id, offset, length = LOCATION.unpack(location)
        fd = self._readers.get(log_id)
        if fd is None:
            path = self._paths.get(log_id)
            if path is None:
                return None
            fd = self._readers[log_id] = os.open(path, os.O_RDONLY)
        head_at = offset - _REC.size
        if length >= _SPLIT_READ:
            head = os.pread(fd, _REC.size, head_at)
            if len(head) != _REC.size or _REC.unpack(head) != (length, ledger_id, entry_id):
                return None
            packet = os.pread(fd, length, offset)
            return packet if len(packet) == length else None
        data = os.pread(fd, _REC.size + length, head_at)
        if len(data) != _REC.size + length:
            return None
        rec_len, rec_ledger, rec_entry = _REC.unpack_from(data, 0)
        if (rec_len, rec_ledger, rec_entry) != (length, ledger_id, entry_id):
            return None
        return data[_REC.size :]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        for fd in self._readers.values():
            os.close(fd)
        self._readers.clear()
