"""Changes to the log's table (blocking pyiceberg calls: run them in a worker thread).

- :func:`commit_ledger`: add a ledger's data files, exactly once. pyiceberg's appends assert
  the snapshot they were planned on (``AssertRefSnapshotId``), so a commit raced by another
  fails and is tried again from a fresh read, which finds the ledger there if the other
  offloader committed it.
- :func:`drop_ledgers`: remove ledgers' rows (whole files: each file holds one ledger), expire
  the older snapshots and delete the files.
- :func:`sweep`: what the next run of an offloader cleans up after a crash or a lost race.
"""

from __future__ import annotations

import datetime
from collections.abc import Collection, Iterable
from typing import Final

from pyarrow import fs as pafs
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import Table

from walkit._core.lake import ledger_id_of_file
from walkit._logging import get_logger
from walkit.errors import ConfigurationError
from walkit.lake._table import Lake

log = get_logger(__name__)

__all__ = ["commit_ledger", "drop_ledgers", "drop_table", "ledger_files", "sweep", "table_files"]

#: Commits lost to other writers of the table before giving up (the next pass tries again).
COMMIT_ATTEMPTS: Final = 20
#: Files of a ledger that neither the table nor the log holds are deleted only this long after
#: they were written: an offloader may still be about to commit them.
ORPHAN_GRACE_S: Final = 600.0


def ledger_files(table: Table, ledger_id: int) -> tuple[str, ...]:
    """The committed data files of one ledger, in log order (their part numbers)."""
    if table.current_snapshot() is None:
        return ()
    tasks = table.scan(row_filter=f"ledger_id = {int(ledger_id)}").plan_files()
    return tuple(
        sorted(t.file.file_path for t in tasks if ledger_id_of_file(t.file.file_path) == ledger_id)
    )


def table_files(table: Table) -> dict[int, set[str]]:
    """Every committed data file walkit named, by ledger id."""
    found: dict[int, set[str]] = {}
    if table.current_snapshot() is None:
        return found
    for task in table.scan().plan_files():
        path = task.file.file_path
        ledger_id = ledger_id_of_file(path)
        if ledger_id is not None:
            found.setdefault(ledger_id, set()).add(path)
    return found


def commit_ledger(lake: Lake, ledger_id: int, files: tuple[str, ...]) -> tuple[str, ...]:
    """Commit ``files`` as ledger ``ledger_id``'s unless the table holds that ledger already;
    returns the files the table holds for it (``files``, or another offloader's)."""
    for _attempt in range(COMMIT_ATTEMPTS):
        table = lake.table()
        assert table is not None
        present = ledger_files(table, ledger_id)
        if present:
            return present
        if not files:
            return ()
        try:
            table.add_files(
                list(files),
                snapshot_properties={"walkit.ledger-id": str(ledger_id)},
                check_duplicate_files=False,
            )
        except CommitFailedException:
            continue
        return files
    raise CommitFailedException(f"ledger {ledger_id}: {COMMIT_ATTEMPTS} commits lost to others")


def drop_ledgers(lake: Lake, ledger_ids: Collection[int], files: Iterable[str] = ()) -> int:
    """Remove the ledgers' rows from the table, expire every snapshot but the new one, and
    delete their files (those committed and ``files``); returns the files deleted."""
    if not ledger_ids:
        return 0
    table = lake.table(create=False)
    doomed = set(files)
    if table is not None:
        held = table_files(table)
        for ledger_id in ledger_ids:
            doomed |= held.get(ledger_id, set())
        if any(ledger_id in held for ledger_id in ledger_ids):
            for _attempt in range(COMMIT_ATTEMPTS):
                try:
                    table.delete(delete_filter=_in_ledgers(ledger_ids))
                    break
                except CommitFailedException:
                    table = lake.table()
                    assert table is not None
            expire_snapshots(table)
    for path in sorted(doomed):
        _delete(lake.io, path)
    return len(doomed)


def expire_snapshots(table: Table) -> None:
    """Expire every snapshot but the current one (so that no snapshot names deleted files)."""
    table = table.refresh()
    current = table.current_snapshot()
    if current is None:
        return
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1)
    older = [s.snapshot_id for s in table.snapshots() if s.snapshot_id != current.snapshot_id]
    if older:
        try:
            table.maintenance.expire_snapshots().older_than(later).commit()
        except CommitFailedException:
            pass  # another writer changed the table: its next pass expires them


def sweep(lake: Lake, listed: Collection[int], now_s: float) -> tuple[list[int], int]:
    """Clean up after crashed or raced offloads: drop from the table the ledgers the log no
    longer lists (truncated before their offload was recorded), and delete data files no
    snapshot holds whose ledger is in the table (a lost race or a crash before the commit
    recorded another copy), or in neither table nor log and older than ORPHAN_GRACE_S.
    Returns the ledgers dropped and the files deleted."""
    table = lake.table(create=False)
    if table is None:
        return [], 0
    held = table_files(table)
    stale = [ledger_id for ledger_id in held if ledger_id not in listed]
    deleted = drop_ledgers(lake, stale) if stale else 0
    committed = {
        path for ledger_id, paths in held.items() if ledger_id not in stale for path in paths
    }
    filesystem, base = _fs(lake)
    selector = pafs.FileSelector(base, allow_not_found=True)
    for info in filesystem.get_file_info(selector):
        ledger_id = ledger_id_of_file(info.path)
        if ledger_id is None or info.type != pafs.FileType.File:
            continue
        uri = f"{lake.data_dir}/{info.path.rsplit('/', 1)[-1]}"
        if uri in committed:
            continue
        in_table = ledger_id in held and ledger_id not in stale
        mtime = info.mtime.timestamp() if info.mtime is not None else now_s
        if in_table or (ledger_id not in listed and now_s - mtime >= ORPHAN_GRACE_S):
            _delete(lake.io, uri)
            deleted += 1
    return stale, deleted


def _in_ledgers(ledger_ids: Collection[int]) -> str:
    return f"ledger_id in ({', '.join(str(int(i)) for i in sorted(ledger_ids))})"


def _fs(lake: Lake) -> tuple[pafs.FileSystem, str]:
    io = lake.io
    if not isinstance(io, PyArrowFileIO):
        raise ConfigurationError("the lake's FileIO must be pyiceberg's PyArrowFileIO")
    scheme, netloc, path = PyArrowFileIO.parse_location(lake.data_dir)
    return io.fs_by_scheme(scheme, netloc), path


def _delete(io: object, uri: str) -> None:
    assert isinstance(io, PyArrowFileIO)
    try:
        io.delete(uri)
        log.info("lake_file_deleted", uri=uri)
    except FileNotFoundError:
        pass


def drop_table(lake: Lake, files: Iterable[str]) -> None:
    """Drop the log's table and delete its data files (``files``, and any walkit named in its
    data directory)."""
    for uri in files:
        _delete(lake.io, uri)
    filesystem, base = _fs(lake)
    for info in filesystem.get_file_info(pafs.FileSelector(base, allow_not_found=True)):
        if info.type == pafs.FileType.File and ledger_id_of_file(info.path) is not None:
            _delete(lake.io, f"{lake.data_dir}/{info.path.rsplit('/', 1)[-1]}")
    try:
        lake.catalog.purge_table(lake.identifier)
    except NoSuchTableError:
        pass
