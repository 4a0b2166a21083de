"""A closed ledger's records as Parquet data files (one per day of timestamps, rows in log
order, zstd, row groups sized for scans).

A typed log's files also have ``value``: each record decoded with the log's latest schema
(by field name: fields its own version did not write take their defaults: msgspec decodes
into the schema's Struct, :func:`walkit._core.schema_types.struct_of`), null for records
written without a schema. A record that does not decode gets a null value and a warning with
its position: the offload goes on, and its ``payload`` keeps the bytes.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any, Final

import attrs
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from walkit._core.lake import data_file_name
from walkit._core.log_position import LogPosition
from walkit._core.record_set import entry_records
from walkit._core.types import Entry
from walkit._logging import get_logger
from walkit.lake._table import ARROW_SCHEMA, Lake

log = get_logger(__name__)

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
    #: The schema version the ledger's records were written with (0: none).
    schema_version: int = 0
    entry_id: list[int] = attrs.Factory(list)
    slot: list[int] = attrs.Factory(list)
    timestamp: list[int | None] = attrs.Factory(list)
    key: list[bytes | None] = attrs.Factory(list)
    headers: list[list[dict[str, object]] | None] = attrs.Factory(list)
    payload: list[bytes] = attrs.Factory(list)
    producer: list[dict[str, object] | None] = attrs.Factory(list)

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
            if rs.producers is None:
                self.producer.extend([None] * n)
            else:
                self.producer.extend(
                    None if p is None else {"producer_id": p.producer_id, "sequence": p.sequence}
                    for p in rs.producers
                )
            if rs.headers is None:
                self.headers.extend([None] * n)
            else:
                self.headers.extend(
                    None if h is None else [{"key": k, "value": v} for k, v in h]
                    for h in rs.headers
                )

    def table(
        self,
        schema: pa.Schema = ARROW_SCHEMA,
        decode: Callable[[bytes], Any] | None = None,
    ) -> pa.Table:
        """The columns as an Arrow table of ``schema`` (ARROW_SCHEMA, and a typed log's
        ``value`` decoded with ``decode``)."""
        n = len(self.payload)
        ts = pa.array(
            [None if t is None else t * _MS_TO_US for t in self.timestamp],
            pa.int64(),
        ).cast(pa.timestamp("us", tz="UTC"))
        arrays = [
            pa.array([self.ledger_seq] * n, pa.int64()),
            pa.array([self.ledger_id] * n, pa.int64()),
            pa.array(self.entry_id, pa.int64()),
            pa.array(self.slot, pa.int64()),
            ts,
            pa.array(self.key, pa.binary()),
            pa.array(self.headers, ARROW_SCHEMA.field("headers").type),
            pa.array(self.payload, pa.binary()),
            pa.array(self.producer, ARROW_SCHEMA.field("producer").type),
        ]
        if len(schema) > len(ARROW_SCHEMA):
            arrays.append(self._values(schema.field(len(ARROW_SCHEMA)).type, decode))
        return pa.Table.from_arrays(arrays, schema=schema)

    def _values(self, type_: pa.DataType, decode: Callable[[bytes], Any] | None) -> pa.Array:
        if not self.schema_version or decode is None:
            return pa.nulls(len(self.payload), type_)
        values: list[Any] = []
        for i, payload in enumerate(self.payload):
            try:
                values.append(decode(payload))
            except (ValueError, TypeError) as exc:  # (msgspec's errors are ValueErrors)
                position = LogPosition(self.ledger_seq, self.entry_id[i], self.slot[i])
                log.warning(
                    "lake_value_not_decoded",
                    ledger_id=self.ledger_id,
                    position=str(position),
                    schema_version=self.schema_version,
                    error=str(exc),
                )
                values.append(None)
        return struct_column(values, type_)


def struct_column(values: list[Any], type_: pa.StructType) -> pa.Array:
    """Decoded values (msgspec Structs, None for none) as a struct array of ``type_`` (the
    table's ``value``: fields the Structs lack are null). Built field by field: a column of
    plain values converts several times faster than one of dicts."""
    import msgspec

    arrays = []
    for field in type_:
        column = [None if v is None else getattr(v, field.name, None) for v in values]
        if not _flat(field.type):  # (records, lists, maps: as builtins, converted at once)
            column = msgspec.to_builtins(column, builtin_types=(bytes,))
        arrays.append(pa.array(column, field.type))
    mask = pa.array([v is None for v in values], pa.bool_())
    return pa.StructArray.from_arrays(arrays, fields=list(type_), mask=mask)


def _flat(type_: pa.DataType) -> bool:
    t = pa.types
    return bool(
        t.is_boolean(type_)
        or t.is_integer(type_)
        or t.is_floating(type_)
        or t.is_string(type_)
        or t.is_large_string(type_)
        or t.is_binary(type_)
        or t.is_large_binary(type_)
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


def write_files(
    lake: Lake,
    columns: Columns,
    schema: pa.Schema = ARROW_SCHEMA,
    decode: Callable[[bytes], Any] | None = None,
) -> WrittenFiles:
    """Write the ledger's records as data files of ``schema`` (the table's:
    :func:`walkit.lake._columns.table_columns`; ``decode`` gives a typed log's values) under
    the table's ``data/`` (blocking: run in a worker thread). Names carry the ledger id and a
    fresh random token."""
    table = columns.table(schema, decode)
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
