"""A closed ledger's records as Parquet data files (one per day of timestamps, rows in log
order, zstd, row groups sized for scans)."""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Final

import attrs
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from walkit._core.lake import data_file_name
from walkit._core.record_set import entry_records
from walkit._core.types import Entry
from walkit.lake._table import ARROW_SCHEMA, Lake

__all__ = ["Columns", "WrittenFiles", "write_files"]

#: Uncompressed bytes a row group aims at: big enough for scans to read few of them and for
#: zstd to find repeats, small enough for a log reader to start on the first one soon.
ROW_GROUP_BYTES: Final = 16 * 1024 * 1024
_MS_TO_US: Final = 1000


@attrs.define
class Columns:
    """A ledger's records, column by column, in log order."""

    ledger_seq: int
    ledger_id: int
    entry_id: list[int] = attrs.Factory(list)
    slot: list[int] = attrs.Factory(list)
    timestamp: list[int | None] = attrs.Factory(list)
    key: list[bytes | None] = attrs.Factory(list)
    headers: list[list[dict[str, object]] | None] = attrs.Factory(list)
    payload: list[bytes] = attrs.Factory(list)

    def add(self, entries: Sequence[Entry], record_sets: bool) -> None:
        for entry in entries:
            rs = entry_records(entry.payload, record_sets)
            n = len(rs.records)
            self.entry_id.extend([entry.entry_id] * n)
            self.slot.extend(range(n))
            self.payload.extend(rs.records)
            if rs.timestamps is not None:
                self.timestamp.extend(rs.timestamps)
            else:
                self.timestamp.extend([rs.timestamp] * n)
            self.key.extend(rs.keys if rs.keys is not None else [None] * n)
            if rs.headers is None:
                self.headers.extend([None] * n)
            else:
                self.headers.extend(
                    None if h is None else [{"key": k, "value": v} for k, v in h]
                    for h in rs.headers
                )

    def table(self) -> pa.Table:
        n = len(self.payload)
        ts = pa.array(
            [None if t is None else t * _MS_TO_US for t in self.timestamp],
            pa.int64(),
        ).cast(pa.timestamp("us", tz="UTC"))
        return pa.Table.from_arrays(
            [
                pa.array([self.ledger_seq] * n, pa.int64()),
                pa.array([self.ledger_id] * n, pa.int64()),
                pa.array(self.entry_id, pa.int64()),
                pa.array(self.slot, pa.int64()),
                ts,
                pa.array(self.key, pa.binary()),
                pa.array(self.headers, ARROW_SCHEMA.field("headers").type),
                pa.array(self.payload, pa.binary()),
            ],
            schema=ARROW_SCHEMA,
        )


@attrs.frozen
class WrittenFiles:
    """The files written for one ledger."""

    files: tuple[str, ...]
    lake_bytes: int
    records: int
    min_ts: int | None
    max_ts: int | None


def _by_day(table: pa.Table) -> list[pa.Table]:
    """The rows split by the day of their timestamp (rows without one together), each part in
    log order, parts in the order of their first row: Iceberg's ``day`` partitions."""
    if table.num_rows == 0:
        return []
    days = pc.divide(
        table.column("timestamp").cast(pa.int64()), 86_400_000_000
    ).to_pylist()  # (floor for negatives is not needed: a timestamp is ms since 1970, >= 0)
    if len(set(days)) == 1:
        return [table]
    order: dict[int | None, list[int]] = {}
    for i, day in enumerate(days):
        order.setdefault(day, []).append(i)
    return [table.take(pa.array(rows, pa.int64())) for rows in order.values()]


def write_files(lake: Lake, columns: Columns) -> WrittenFiles:
    """Write the ledger's records as data files under the table's ``data/`` (blocking: run in
    a worker thread). Names carry the ledger id and a fresh random token."""
    table = columns.table()
    token = secrets.token_hex(8)
    files: list[str] = []
    written = 0
    for part, rows in enumerate(_by_day(table)):
        uri = f"{lake.data_dir}/{data_file_name(columns.ledger_id, part, token)}"
        per_row = max(1, rows.nbytes // max(rows.num_rows, 1))
        with lake.io.new_output(uri).create(overwrite=False) as out:
            pq.write_table(
                rows,
                out,
                compression="zstd",
                row_group_size=max(1024, ROW_GROUP_BYTES // per_row),
                write_statistics=True,
            )
        written += len(lake.io.new_input(uri))
        files.append(uri)
    stamps = [t for t in columns.timestamp if t is not None]
    return WrittenFiles(
        tuple(files),
        written,
        table.num_rows,
        min(stamps) if stamps else None,
        max(stamps) if stamps else None,
    )
