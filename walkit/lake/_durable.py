"""Making a file:// lake's new files durable before the Iceberg commit names them.

pyarrow's local filesystem writes through the page cache and never fsyncs, so after a power
loss a committed table could name a file the disk never got (or a directory entry that was
never written). Two kinds of files:

- data files (walkit writes them): the offloader fsyncs each, then each directory from the
  file's up to the lake's root (the ``data`` and table directories are created by the first
  offload), before it commits (:func:`sync_files`);
- the table's metadata (pyiceberg writes it: table metadata, manifest lists, manifests): the
  lake's FileIO, :class:`DurableFileIO`, fsyncs each local file and its directories as it is
  closed, so each is on disk before the catalog's pointer moves to it.

Object stores (``s3://``) make a write durable before they acknowledge it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from pyiceberg.io.pyarrow import PyArrowFile, PyArrowFileIO

from walkit._core.lake import LakeUri

__all__ = ["DurableFileIO", "sync_files"]

#: The property that makes pyiceberg load :class:`DurableFileIO` as a catalog's FileIO.
DURABLE_IO_IMPL = "walkit.lake._durable.DurableFileIO"


def sync_files(lake: LakeUri, uris: Iterable[str]) -> None:
    """fsync the local files ``uris`` of the ``lake`` and their directories up to its root
    (nothing for an object store's lake); blocking."""
    if lake.scheme != "file":
        return
    root = os.path.normpath(lake.root)
    dirs: set[str] = set()
    for uri in uris:
        path = os.path.normpath(uri.removeprefix("file://"))
        try:
            _fsync(path, os.O_RDONLY)
        except FileNotFoundError:
            # Another offloader committed this ledger first, and its clean-up deleted this
            # copy (it deletes only files of ledgers the table holds): the commit step finds
            # the ledger there and keeps the winner's files.
            continue
        parent = os.path.dirname(path)
        while parent.startswith(root) and parent not in dirs:
            dirs.add(parent)
            if parent == root:
                break
            parent = os.path.dirname(parent)
    for directory in sorted(dirs, key=len, reverse=True):  # deepest first
        _fsync_dir(directory)


def _fsync(path: str, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str) -> None:
    """fsync a directory: its entries (a new file's name) are on disk."""
    _fsync(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


class DurableFileIO(PyArrowFileIO):
    """pyiceberg's PyArrowFileIO, whose new local files are fsynced, with their directory and
    the two above it (a table's ``metadata`` directory, the table's, the lake's), when closed.
    Reads, and files on object stores, are PyArrowFileIO's own."""

    def __init__(self, properties: Any = None) -> None:
        super().__init__(properties or {})
        self._synced_dirs: set[str] = set()

    def new_output(self, location: str) -> PyArrowFile:
        scheme, netloc, path = self.parse_location(location, self.properties)
        if scheme != "file":
            return super().new_output(location)
        return _SyncedFile(
            location=location,
            path=path,
            fs=self.fs_by_scheme(scheme, netloc),
            dirs=self._synced_dirs,
        )


class _SyncedFile(PyArrowFile):
    def __init__(self, location: str, path: str, fs: Any, dirs: set[str]) -> None:
        super().__init__(location=location, path=path, fs=fs)
        self._dirs = dirs

    def create(self, overwrite: bool = False) -> Any:
        return _SyncOnClose(super().create(overwrite), self._path, self._dirs)


class _SyncOnClose:
    """A pyarrow output stream that fsyncs its file, and the directories not yet synced, on
    close (pyiceberg writes through ``with create() as f`` or calls ``close``)."""

    def __init__(self, stream: Any, path: str, dirs: set[str]) -> None:
        self._stream = stream
        self._path = path
        self._dirs = dirs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def write(self, data: Any) -> int:
        return int(self._stream.write(data))

    def close(self) -> None:
        if self._stream.closed:
            return
        self._stream.close()
        _fsync(self._path, os.O_RDONLY)
        # Its directory every time (the new entry), and those above once per FileIO (their
        # entries are made when the table is created).
        parent = os.path.dirname(self._path)
        _fsync_dir(parent)
        for _ in range(2):
            parent = os.path.dirname(parent)
            if parent in self._dirs:
                break
            self._dirs.add(parent)
            _fsync_dir(parent)

    def __enter__(self) -> _SyncOnClose:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
