"""The entry index and per-ledger state, in LMDB.

LMDB was chosen by measurement (``bench/index_store.py``; numbers in ``docs/bookie.md``): on
this workload (batched synced puts at checkpoints, point gets) it beat RocksDB (rocksdict) and
SQLite. One checkpoint is one LMDB write transaction holding the new index entries, the dirty
ledger states and the LastLogMark, so they become durable together. Runs in worker threads.
"""

from __future__ import annotations

import errno
import struct
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, final

import lmdb

from walkit_bookie._journal import LogMark
from walkit_bookie._ledger import LedgerInfo

INDEX_DIR = "index"
_KEY = struct.Struct(">QQ")
_LEDGER = struct.Struct(">Q")
_MARK_KEY = b"last_log_mark"
_ENTRY_ID_MASK = 2**64 - 1


def entry_key(ledger_id: int, entry_id: int) -> bytes:
    return _KEY.pack(ledger_id, entry_id & _ENTRY_ID_MASK)


def _io_error(exc: Exception) -> OSError:
    code = errno.ENOSPC if isinstance(exc, lmdb.DiskError) else errno.EIO
    return OSError(code, f"index store: {exc}")


@final
class Index:
    """LMDB errors come out as OSError (ENOSPC or EIO), like the other storage files'."""

    def __init__(self, path: Path, *, map_size: int = 1 << 36) -> None:
        self._lock = threading.Lock()  # readers (worker threads) vs. growing the map
        try:
            self._env: Any = lmdb.open(
                str(path), map_size=map_size, max_dbs=4, sync=True, metasync=True, readahead=False
            )
            self._entries = self._env.open_db(b"entries")
            self._ledgers = self._env.open_db(b"ledgers")
            self._meta = self._env.open_db(b"meta")
        except lmdb.Error as exc:
            raise _io_error(exc) from exc

    def load(self) -> tuple[dict[int, LedgerInfo], LogMark | None]:
        try:
            return self._load()
        except lmdb.Error as exc:
            raise _io_error(exc) from exc

    def _load(self) -> tuple[dict[int, LedgerInfo], LogMark | None]:
        ledgers: dict[int, LedgerInfo] = {}
        with self._env.begin() as txn:
            for key, value in txn.cursor(db=self._ledgers):
                ledgers[_LEDGER.unpack(key)[0]] = LedgerInfo.from_bytes(value)
            raw = txn.get(_MARK_KEY, db=self._meta)
        return ledgers, None if raw is None else LogMark.from_bytes(raw)

    def commit(
        self,
        locations: Sequence[tuple[bytes, bytes]],
        ledgers: Iterable[tuple[int, LedgerInfo]],
        mark: LogMark,
    ) -> None:
        for attempt in range(2):
            try:
                self._commit(locations, ledgers, mark)
                return
            except lmdb.MapFullError as exc:
                if attempt:
                    raise _io_error(exc) from exc
                # The map is a size limit, not an allocation: raise it and try again (LMDB
                # wants no other transaction open meanwhile, hence the lock).
                with self._lock:
                    self._env.set_mapsize(self._env.info()["map_size"] * 2)
            except lmdb.Error as exc:
                raise _io_error(exc) from exc

    def _commit(
        self,
        locations: Sequence[tuple[bytes, bytes]],
        ledgers: Iterable[tuple[int, LedgerInfo]],
        mark: LogMark,
    ) -> None:
        with self._env.begin(write=True) as txn:
            if locations:
                txn.cursor(db=self._entries).putmulti(locations)
            for ledger_id, info in ledgers:
                txn.put(_LEDGER.pack(ledger_id), info.to_bytes(), db=self._ledgers)
            txn.put(_MARK_KEY, mark.to_bytes(), db=self._meta)

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        try:
            with self._lock, self._env.begin(db=self._entries) as txn:
                return [txn.get(k) for k in keys]
        except lmdb.Error as exc:
            raise _io_error(exc) from exc

    def delete_ledger(self, ledger_id: int) -> int:
        """Remove a ledger's index entries and state; return how many entries were removed."""
        try:
            return self._delete_ledger(ledger_id)
        except lmdb.Error as exc:
            raise _io_error(exc) from exc

    def _delete_ledger(self, ledger_id: int) -> int:
        prefix = _LEDGER.pack(ledger_id)
        removed = 0
        with self._env.begin(write=True) as txn:
            cursor = txn.cursor(db=self._entries)
            if cursor.set_range(prefix):
                while cursor.key()[:8] == prefix:
                    if not cursor.delete():
                        break
                    removed += 1
            txn.delete(prefix, db=self._ledgers)
        return removed

    def close(self) -> None:
        self._env.close()
