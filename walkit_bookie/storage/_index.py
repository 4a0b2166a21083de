"""The entry index, per-ledger state and entry-log usage, in LMDB.

LMDB was chosen by measurement (``bench/index_store.py``; numbers in ``docs/bookie.md``): on
this workload (batched synced puts at checkpoints, point gets) it beat RocksDB (rocksdict) and
SQLite. One checkpoint is one LMDB write transaction holding the new index entries, the dirty
ledger states, the LastLogMark and the usage of the entry logs, so they become durable
together. Runs in worker threads.

Usage: for each entry log, how many of its bytes (records with their headers) the index still
points at, per ledger (``(log, ledger) -> bytes``). Every transaction that changes the index
changes the usage in the same transaction, so the two always agree; compaction and garbage
collection of entry logs read it.
"""

from __future__ import annotations

import errno
import struct
import threading
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, final

import lmdb

from walkit.errors import BookieIOError
from walkit.shared import get_logger
from walkit_bookie.storage._journal import LogMark
from walkit_bookie.storage._ledger import LedgerInfo

log = get_logger(__name__)

INDEX_DIR = "index"
#: The format of the index (its keys and values, ledger states, the LastLogMark) this bookie
#: writes, recorded under ``format`` in its ``meta`` table (see docs/formats.md).
INDEX_FORMAT = 1
#: The formats it reads: an index without the record is format 1.
INDEX_FORMATS = frozenset({1})
_FORMAT_KEY = b"format"
_KEY = struct.Struct(">QQ")
_LEDGER = struct.Struct(">Q")
_COUNT = struct.Struct(">Q")
_USAGE_KEY = struct.Struct(">QQ")  # log id, ledger id
_MARK_KEY = b"last_log_mark"
#: Present once the usage table covers every index entry (absent: rebuild it at open).
_USAGE_FORMAT_KEY = b"usage_format"
_USAGE_FORMAT = b"1"
_ENTRY_ID_MASK = 2**64 - 1

#: An index value: log id, offset of the packet in the log, packet length.
LOCATION = struct.Struct(">QQI")
#: Bytes of an entry-log record before its packet: u32 length, u64 ledger, i64 entry.
RECORD_HEADER = 20

#: Usage changes: log id -> ledger id -> bytes (+ or -).
UsageDelta = dict[int, dict[int, int]]


def entry_key(ledger_id: int, entry_id: int) -> bytes:
    return _KEY.pack(ledger_id, entry_id & _ENTRY_ID_MASK)


def entry_of_key(key: bytes) -> tuple[int, int]:
    """(ledger id, entry id) of an :func:`entry_key` (entry ids below 0 come back)."""
    ledger_id, entry_id = _KEY.unpack(key)
    if entry_id >= 1 << 63:
        entry_id -= 1 << 64
    return int(ledger_id), int(entry_id)


def key_ledger(key: bytes) -> int:
    return int(_LEDGER.unpack_from(key, 0)[0])


def location_log(location: bytes) -> int:
    return int(_LEDGER.unpack_from(location, 0)[0])


def location_bytes(location: bytes) -> int:
    """The bytes a record takes in its entry log (header and packet)."""
    return RECORD_HEADER + int(LOCATION.unpack(location)[2])


def _io_error(exc: Exception) -> OSError:
    code = errno.ENOSPC if isinstance(exc, lmdb.DiskError) else errno.EIO
    return OSError(code, f"index store: {exc}")


def _add(delta: UsageDelta, log_id: int, ledger_id: int, amount: int) -> None:
    per_log = delta.setdefault(log_id, {})
    per_log[ledger_id] = per_log.get(ledger_id, 0) + amount


@final
class Index:
    """LMDB errors come out as OSError (ENOSPC or EIO), like the other storage files'.

    ``usage`` (log id -> ledger id -> live bytes) mirrors the usage table; it is changed only
    after the transaction that changed the table committed. Writers are serialized by the
    caller (the storage's checkpoint lock).
    """

    def __init__(self, path: Path, *, map_size: int = 1 << 36) -> None:
        self._lock = threading.Lock()  # readers (worker threads) vs. growing the map
        self._path = path
        self.usage: dict[int, dict[int, int]] = {}
        try:
            path.mkdir(mode=0o700, exist_ok=True)  # lmdb would make it 0600 (no x bit)
            self._env: Any = lmdb.open(
                str(path),
                map_size=map_size,
                max_dbs=5,
                sync=True,
                metasync=True,
                readahead=False,
                mode=0o600,
            )
            self._entries = self._env.open_db(b"entries")
            self._ledgers = self._env.open_db(b"ledgers")
            self._meta = self._env.open_db(b"meta")
            self._usage = self._env.open_db(b"usage")
        except lmdb.Error as exc:
            raise _io_error(exc) from exc

    def load(self) -> tuple[dict[int, LedgerInfo], LogMark | None]:
        try:
            return self._load()
        except lmdb.Error as exc:
            raise _io_error(exc) from exc

    def _load(self) -> tuple[dict[int, LedgerInfo], LogMark | None]:
        ledgers: dict[int, LedgerInfo] = {}
        self._check_format()
        with self._env.begin() as txn:
            for key, value in txn.cursor(db=self._ledgers):
                ledgers[_LEDGER.unpack(key)[0]] = LedgerInfo.from_bytes(value)
            raw = txn.get(_MARK_KEY, db=self._meta)
            has_usage = txn.get(_USAGE_FORMAT_KEY, db=self._meta) == _USAGE_FORMAT
        if not has_usage:
            self._rebuild_usage()
        self.usage = {}
        with self._env.begin(db=self._usage) as txn:
            for key, value in txn.cursor():
                log_id, ledger_id = _USAGE_KEY.unpack(key)
                self.usage.setdefault(log_id, {})[ledger_id] = _COUNT.unpack(value)[0]
        return ledgers, None if raw is None else LogMark.from_bytes(raw)

    def _check_format(self) -> None:
        with self._env.begin() as txn:
            raw = txn.get(_FORMAT_KEY, db=self._meta)
        if raw is None:
            # Brand new, or written before the record existed, which is format 1: record that
            # (a later format that converts an index records its own once it has).
            with self._env.begin(write=True) as txn:
                txn.put(_FORMAT_KEY, b"1", db=self._meta)
            return
        try:
            version = int(bytes(raw).decode("ascii"))
        except ValueError:
            version = -1
        if version not in INDEX_FORMATS:
            raise BookieIOError(
                f"the index in {self._path} is format {bytes(raw)[:20]!r}; this bookie reads "
                f"{sorted(INDEX_FORMATS)} (a newer walkit wrote it: run that version)"
            )

    def _rebuild_usage(self) -> None:
        # An index written before usage was tracked: count it once from the index itself.
        totals: UsageDelta = {}
        entries = 0
        with self._env.begin(db=self._entries) as txn:
            for key, value in txn.cursor():
                _add(totals, location_log(value), key_ledger(key), location_bytes(value))
                entries += 1
        with self._env.begin(write=True) as txn:
            txn.drop(self._usage, delete=False)
            for log_id, per_ledger in totals.items():
                for ledger_id, amount in per_ledger.items():
                    txn.put(_USAGE_KEY.pack(log_id, ledger_id), _COUNT.pack(amount), db=self._usage)
            txn.put(_USAGE_FORMAT_KEY, _USAGE_FORMAT, db=self._meta)
        log.info("index_usage_rebuilt", entries=entries, entry_logs=len(totals))

    def _apply_usage(self, txn: Any, delta: UsageDelta) -> None:
        """Write a usage change in ``txn`` (the in-memory copy follows after the commit)."""
        for log_id, per_ledger in delta.items():
            known = self.usage.get(log_id, {})
            for ledger_id, amount in per_ledger.items():
                if not amount:
                    continue
                key = _USAGE_KEY.pack(log_id, ledger_id)
                total = known.get(ledger_id, 0) + amount
                if total > 0:
                    txn.put(key, _COUNT.pack(total), db=self._usage)
                else:
                    txn.delete(key, db=self._usage)

    def _remember_usage(self, delta: UsageDelta) -> None:
        for log_id, per_ledger in delta.items():
            known = self.usage.setdefault(log_id, {})
            for ledger_id, amount in per_ledger.items():
                total = known.get(ledger_id, 0) + amount
                if total > 0:
                    known[ledger_id] = total
                else:
                    known.pop(ledger_id, None)
            if not known:
                del self.usage[log_id]

    def _write(self, work: Any) -> Any:
        """Run ``work(txn)`` in a write transaction; grow the map once if it is full."""
        for attempt in range(2):
            try:
                with self._env.begin(write=True) as txn:
                    return work(txn)
            except lmdb.MapFullError as exc:
                if attempt:
                    raise _io_error(exc) from exc
                # The map is a size limit, not an allocation: raise it and try again (LMDB
                # wants no other transaction open meanwhile, hence the lock).
                with self._lock:
                    self._env.set_mapsize(self._env.info()["map_size"] * 2)
            except lmdb.Error as exc:
                raise _io_error(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def commit(
        self,
        locations: Sequence[tuple[bytes, bytes]],
        ledgers: Iterable[tuple[int, LedgerInfo]],
        mark: LogMark | None,
        usage: Mapping[int, Mapping[int, int]] | None = None,
    ) -> None:
        """A checkpoint: new index entries, ledger states, the LastLogMark and the usage the
        new entries add (``usage``: log id -> ledger id -> bytes), in one transaction.
        ``mark`` None keeps the LastLogMark (entries that never were in the journal)."""
        ledgers = list(ledgers)

        def work(txn: Any) -> UsageDelta:
            delta: UsageDelta = {
                log_id: dict(per_ledger) for log_id, per_ledger in (usage or {}).items()
            }
            if locations:
                consumed, added = txn.cursor(db=self._entries).putmulti(locations, overwrite=False)
                if added < consumed:
                    self._overwrite(txn, locations, delta)
            for ledger_id, info in ledgers:
                txn.put(_LEDGER.pack(ledger_id), info.to_bytes(), db=self._ledgers)
            if mark is not None:
                txn.put(_MARK_KEY, mark.to_bytes(), db=self._meta)
            self._apply_usage(txn, delta)
            return delta

        self._remember_usage(self._write(work))

    def _overwrite(
        self, txn: Any, locations: Sequence[tuple[bytes, bytes]], delta: UsageDelta
    ) -> None:
        # Entries stored again (recovery adds of entries already here): the new copy wins and
        # the old one's bytes stop counting. Rare, hence the slow path.
        for key, value in locations:
            old = txn.get(key, db=self._entries)
            if old is not None and old != value:
                txn.put(key, value, db=self._entries)
                _add(delta, location_log(old), key_ledger(key), -location_bytes(old))

    def get_many(self, keys: Sequence[bytes]) -> list[bytes | None]:
        try:
            with self._lock, self._env.begin(db=self._entries) as txn:
                return [txn.get(k) for k in keys]
        except lmdb.Error as exc:
            raise _io_error(exc) from exc

    def delete_ledger(self, ledger_id: int) -> int:
        """Remove a ledger's index entries, state and usage; return how many entries went."""
        return self.delete_ledgers([ledger_id])

    def delete_ledgers(self, ledger_ids: Iterable[int]) -> int:
        """Remove ledgers' index entries, state and usage in one transaction (one sync, where
        one per ledger made deleting 100,000 ledgers take minutes); return how many entries
        went."""
        ids = set(ledger_ids)
        delta: UsageDelta = {}
        for log_id, per_ledger in self.usage.items():
            found = (
                ids.intersection(per_ledger)
                if len(ids) < len(per_ledger)
                else [lid for lid in per_ledger if lid in ids]
            )
            if found:
                delta[log_id] = {lid: -per_ledger[lid] for lid in found}

        def work(txn: Any) -> int:
            removed = 0
            cursor = txn.cursor(db=self._entries)
            for ledger_id in sorted(ids):
                prefix = _LEDGER.pack(ledger_id)
                if cursor.set_range(prefix):
                    while cursor.key()[:8] == prefix:
                        if not cursor.delete():
                            break
                        removed += 1
                txn.delete(prefix, db=self._ledgers)
            self._apply_usage(txn, delta)
            return removed

        removed: int = self._write(work)
        self._remember_usage(delta)
        return removed

    def entries_in_logs(
        self, log_ids: Iterable[int], ledger_ids: Iterable[int]
    ) -> dict[int, list[tuple[bytes, bytes]]]:
        """The index entries (key, location) of ``ledger_ids`` that point into ``log_ids``,
        by log, in key order. Scans each ledger's range of the index once."""
        wanted = set(log_ids)
        found: dict[int, list[tuple[bytes, bytes]]] = {log_id: [] for log_id in wanted}
        try:
            with self._lock, self._env.begin(db=self._entries) as txn:
                cursor = txn.cursor()
                for ledger_id in sorted(set(ledger_ids)):
                    prefix = _LEDGER.pack(ledger_id)
                    if not cursor.set_range(prefix):
                        continue
                    for key, value in cursor:
                        if key[:8] != prefix:
                            break
                        log_id = location_log(value)
                        if log_id in wanted:
                            found[log_id].append((bytes(key), bytes(value)))
        except lmdb.Error as exc:
            raise _io_error(exc) from exc
        return found

    def move(self, moves: Sequence[tuple[bytes, bytes, bytes]]) -> tuple[int, int]:
        """Point entries at their new copies: each ``(key, old location, new location)`` is
        applied only if the index still holds the old location (an entry deleted or stored
        again meanwhile keeps what it has). One synced transaction. Returns (entries moved,
        bytes moved)."""

        def work(txn: Any) -> tuple[UsageDelta, int, int]:
            delta: UsageDelta = {}
            count = size = 0
            for key, old, new in moves:
                if txn.get(key, db=self._entries) != old:
                    continue
                txn.put(key, new, db=self._entries)
                ledger_id = key_ledger(key)
                amount = location_bytes(old)
                _add(delta, location_log(old), ledger_id, -amount)
                _add(delta, location_log(new), ledger_id, amount)
                count += 1
                size += amount
            self._apply_usage(txn, delta)
            return delta, count, size

        delta, count, size = self._write(work)
        self._remember_usage(delta)
        return count, size

    def close(self) -> None:
        self._env.close()
