"""Entry logs: entries of all ledgers interleaved in append-only files, rolled by size.

A record is ``u32 length | u64 ledger | i64 entry | packet``. Entries reach entry logs only at
checkpoints (from the write cache), sorted by (ledger, entry) so that one ledger's entries sit
together. The index maps (ledger, entry) to (log id, offset of the packet, length). Everything in
here runs in a worker thread.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from pathlib import Path
from typing import final

from walkit_bookie._cookie import fsync_dir
from walkit_bookie._index import entry_key

ENTRYLOG_DIR = "entrylogs"
_REC = struct.Struct(">IQq")
_SUFFIX = ".log"
LOCATION = struct.Struct(">QQI")  # log id, offset of the packet, packet length


@final
class EntryLogger:
    def __init__(self, dirs: Sequence[Path], max_size: int) -> None:
        self._dirs = [d / ENTRYLOG_DIR for d in dirs]
        self._max_size = max_size
        self._paths: dict[int, Path] = {}
        for d in self._dirs:
            for p in d.iterdir():
                if p.suffix == _SUFFIX:
                    try:
                        self._paths[int(p.stem, 16)] = p
                    except ValueError:
                        continue
        self._readers: dict[int, int] = {}
        # A new log per start: the tail of the last one may hold a partial, unindexed write.
        self._next_id = max(self._paths, default=0) + 1
        self._fd = -1
        self._id = 0
        self._offset = 0

    def _roll(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._id = self._next_id
        self._next_id += 1
        directory = self._dirs[self._id % len(self._dirs)]
        path = directory / f"{self._id:016x}{_SUFFIX}"
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._offset = os.fstat(self._fd).st_size
        self._paths[self._id] = path
        fsync_dir(directory)

    def append(self, entries: Sequence[tuple[int, int, bytes]]) -> list[tuple[bytes, bytes]]:
        """Write entries durably (one write, one fsync); return (index key, location) pairs."""
        if self._fd < 0 or self._offset >= self._max_size:
            self._roll()
        parts: list[bytes] = []
        locations: list[tuple[bytes, bytes]] = []
        at = self._offset
        pack = _REC.pack
        for ledger_id, entry_id, packet in entries:
            parts.append(pack(len(packet), ledger_id, entry_id))
            parts.append(packet)
            at += _REC.size
            locations.append(
                (entry_key(ledger_id, entry_id), LOCATION.pack(self._id, at, len(packet)))
            )
            at += len(packet)
        data = memoryview(b"".join(parts))
        written = 0
        try:
            while written < len(data):
                written += os.write(self._fd, data[written:])
            os.fdatasync(self._fd)
        except OSError:
            # Leave no half-written record in the middle of the file: start a fresh log next time.
            os.close(self._fd)
            self._fd = -1
            raise
        self._offset = at
        return locations

    def read(self, location: bytes, ledger_id: int, entry_id: int) -> bytes | None:
        log_id, offset, length = LOCATION.unpack(location)
        fd = self._readers.get(log_id)
        if fd is None:
            path = self._paths.get(log_id)
            if path is None:
                return None
            fd = self._readers[log_id] = os.open(path, os.O_RDONLY)
        head_at = offset - _REC.size
        data = os.pread(fd, _REC.size + length, head_at)
        if len(data) != _REC.size + length:
            return None
        rec_len, rec_ledger, rec_entry = _REC.unpack_from(data, 0)
        if (rec_len, rec_ledger, rec_entry) != (length, ledger_id, entry_id):
            return None
        return data[_REC.size :]

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        for fd in self._readers.values():
            os.close(fd)
        self._readers.clear()
