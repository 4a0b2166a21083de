"""Compare embedded KV stores for the bookie's entry index, on this machine.

The workload is the bookie's: at each checkpoint a batch of (ledger, entry) -> (log, offset,
length) puts is committed durably in one transaction; reads are point gets of single keys.
Keys are 16 bytes (big-endian ledger, entry), values 20 bytes.

    python bench/index_store.py [--entries 200000] [--batch 20000] [--dir DIR]

Prints puts/s (committed, synced) and gets/s per store, median of ``--runs`` runs.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import statistics
import struct
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

KEY = struct.Struct(">QQ")
VALUE = struct.Struct(">QQI")


def _items(entries: int) -> list[tuple[bytes, bytes]]:
    # A few ledgers written interleaved, as a bookie sees them.
    return [
        (KEY.pack(i % 8, i // 8), VALUE.pack(i // 100_000, i * 1100, 1100)) for i in range(entries)
    ]


class Store:
    name = ""

    def put_batch(self, items: list[tuple[bytes, bytes]]) -> None:
        raise NotImplementedError

    def get(self, key: bytes) -> bytes | None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


class Lmdb(Store):
    name = "lmdb"

    def __init__(self, path: Path) -> None:
        import lmdb

        self.env = lmdb.open(str(path), map_size=1 << 32, max_dbs=2, sync=True)
        self.db = self.env.open_db(b"index")

    def put_batch(self, items: list[tuple[bytes, bytes]]) -> None:
        with self.env.begin(write=True, db=self.db) as txn:
            txn.cursor().putmulti(items)

    def get(self, key: bytes) -> bytes | None:
        with self.env.begin(db=self.db, buffers=False) as txn:
            value: bytes | None = txn.get(key)
            return value

    def close(self) -> None:
        self.env.close()


class LmdbReuse(Lmdb):
    """Gets through one long-lived read transaction (renewed at each checkpoint)."""

    name = "lmdb (reused read txn)"

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.rtxn = self.env.begin(db=self.db)

    def put_batch(self, items: list[tuple[bytes, bytes]]) -> None:
        super().put_batch(items)
        self.rtxn.abort()
        self.rtxn = self.env.begin(db=self.db)

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self.rtxn.get(key)
        return value

    def close(self) -> None:
        self.rtxn.abort()
        super().close()


class Sqlite(Store):
    name = "sqlite3 (WAL, synchronous=FULL)"

    def __init__(self, path: Path) -> None:
        path.mkdir()
        self.db = sqlite3.connect(path / "index.db", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE idx (k BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")

    def put_batch(self, items: list[tuple[bytes, bytes]]) -> None:
        self.db.execute("BEGIN")
        self.db.executemany("INSERT OR REPLACE INTO idx VALUES (?, ?)", items)
        self.db.execute("COMMIT")

    def get(self, key: bytes) -> bytes | None:
        row = self.db.execute("SELECT v FROM idx WHERE k = ?", (key,)).fetchone()
        return None if row is None else bytes(row[0])

    def close(self) -> None:
        self.db.close()


class Rocks(Store):
    name = "rocksdict (RocksDB, sync write)"

    def __init__(self, path: Path) -> None:
        import rocksdict

        self.mod = rocksdict
        self.db = rocksdict.Rdict(str(path), options=rocksdict.Options(raw_mode=True))
        self.wopt = rocksdict.WriteOptions()
        self.wopt.sync = True
        self.db.set_write_options(self.wopt)

    def put_batch(self, items: list[tuple[bytes, bytes]]) -> None:
        batch = self.mod.WriteBatch(raw_mode=True)
        for key, value in items:
            batch.put(key, value)
        self.db.write(batch)

    def get(self, key: bytes) -> bytes | None:
        value: bytes | None = self.db.get(key)
        return value

    def close(self) -> None:
        self.db.close()


def bench_one(
    factory: Callable[[Path], Store], root: Path, entries: int, batch: int
) -> tuple[float, float]:
    path = root / "store"
    store = factory(path)
    items = _items(entries)
    try:
        start = time.perf_counter()
        for i in range(0, entries, batch):
            store.put_batch(items[i : i + batch])
        put_rate = entries / (time.perf_counter() - start)
        rng = random.Random(7)
        keys = [items[rng.randrange(entries)][0] for _ in range(min(entries, 100_000))]
        start = time.perf_counter()
        for key in keys:
            if store.get(key) is None:
                raise AssertionError("lost a key")
        get_rate = len(keys) / (time.perf_counter() - start)
    finally:
        store.close()
        shutil.rmtree(path)
    return put_rate, get_rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--entries", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    print(f"{args.entries} puts in batches of {args.batch} (one synced commit each), 100k gets")
    print(f"{'store':34} {'puts/s':>12} {'gets/s':>12}")
    for factory in (Lmdb, LmdbReuse, Sqlite, Rocks):
        puts: list[float] = []
        gets: list[float] = []
        for _ in range(args.runs):
            with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
                p, g = bench_one(factory, Path(tmp), args.entries, args.batch)
            puts.append(p)
            gets.append(g)
        print(
            f"{factory.name:34} {statistics.median(puts):12,.0f} {statistics.median(gets):12,.0f}"
        )


if __name__ == "__main__":
    main()
