"""Making a file:// lake's new data files durable before the Iceberg commit names them.

pyarrow's local filesystem writes through the page cache and never fsyncs, so after a power
loss a committed table could name a file the disk never got (or a directory entry that was
never written). The offloader fsyncs each data file, then each directory from the file's up
to the lake's root (the ``data`` and table directories are created by the first offload),
before it commits. Object stores (``s3://``) make a write durable before they acknowledge it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from walkit._core.lake import LakeUri

__all__ = ["sync_files"]


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
        _fsync(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))


def _fsync(path: str, flags: int) -> None:
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
