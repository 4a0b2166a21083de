"""Offloaded ledgers read by Spark's executors straight from the lake's Parquet files.

A range of an offloaded ledger (:class:`~walkit.spark._read_plan.Range` with ``lake``) is
read from its data files, not from the bookies: a row group at a time, the next one read
ahead in a worker thread (pyarrow decodes without the GIL) while this one becomes rows. Row
groups whose statistics fall outside the range's entries, or outside the pushed-down
``timestamp`` bounds, are not read at all; the rest are cut exactly (entry and slot bounds,
then the pushed-down filters) by Arrow kernels, with no Python per row. The rows have the
log schema of :mod:`walkit.spark._read_schema`, as a read from the bookies gives them.
"""

from __future__ import annotations

import concurrent.futures
import datetime
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import pyarrow as pa
import pyarrow.compute as pc

from walkit.errors import CorruptLakeFileError
from walkit.spark._read_schema import HEADERS_ARROW, TIMESTAMP_ARROW, log_rows

if TYPE_CHECKING:
    import pyarrow.parquet as pq

    from walkit.spark._read_plan import Range
    from walkit.spark._values import ValueColumn

__all__ = ["LAKE_COLUMNS", "RowFilter", "lake_batches", "lake_entry_counts", "micros"]

#: The data files' columns a read needs (the table's others are left unread).
LAKE_COLUMNS: Final = ["entry_id", "slot", "timestamp", "key", "headers", "payload"]
_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


def micros(value: object) -> int | None:
    """A pushed-down timestamp value (Spark hands a ``datetime``) as microseconds since the
    epoch, UTC (None: not a timestamp)."""
    if not isinstance(value, datetime.datetime):
        return None
    if value.tzinfo is None:  # (a timestamp_ntz literal: Spark compares it as UTC)
        value = value.replace(tzinfo=datetime.UTC)
    return (value - _EPOCH) // datetime.timedelta(microseconds=1)


@final
@attrs.frozen
class RowFilter:
    """What the pushed-down filters on ``timestamp`` and ``key`` keep of a row: timestamps
    within ``ts_low..ts_high`` (microseconds, inclusive; a null timestamp is kept by neither
    bound, as SQL says), and keys in ``keys``. Applied to every row a read yields, from the
    lake or from the bookies: Spark does not filter again what a source took."""

    ts_low: int | None = None
    ts_high: int | None = None
    keys: frozenset[bytes] | None = None

    @property
    def active(self) -> bool:
        return (self.ts_low, self.ts_high, self.keys) != (None, None, None)

    def outside(self, low: int | None, high: int | None) -> bool:
        """Whether no row whose timestamps lie in ``low..high`` (µs; None: rows without one)
        can pass the timestamp bounds."""
        if self.ts_low is None and self.ts_high is None:
            return False
        if low is None or high is None:
            return True
        return (self.ts_low is not None and high < self.ts_low) or (
            self.ts_high is not None and low > self.ts_high
        )

    def mask(self, timestamps: pa.Array, keys: pa.Array) -> pa.Array | None:
        """The rows kept (None: all of them)."""
        parts: list[pa.Array] = []
        if self.ts_low is not None or self.ts_high is not None:
            stamps = timestamps.cast(pa.int64())
            if self.ts_low is not None:
                parts.append(pc.greater_equal(stamps, self.ts_low))
            if self.ts_high is not None:
                parts.append(pc.less_equal(stamps, self.ts_high))
        if self.keys is not None:
            parts.append(pc.is_in(keys, pa.array(sorted(self.keys), pa.binary())))
        if not parts:
            return None
        kept = parts[0]
        for part in parts[1:]:
            kept = pc.and_kleene(kept, part)
        return pc.fill_null(kept, False)

    def apply(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        kept = self.mask(batch.column("timestamp"), batch.column("key"))
        return batch if kept is None else batch.filter(kept)


def _open(io: Any, uri: str) -> pq.ParquetFile:
    import pyarrow.parquet as pq

    return pq.ParquetFile(io.new_input(uri).open(seekable=True))


def _stats(file: pq.ParquetFile, group: int, name: str) -> tuple[int | None, int | None]:
    """The raw min and max of an integer-stored column in a row group (None: not known)."""
    meta = file.metadata.row_group(group)
    for index in range(meta.num_columns):
        column = meta.column(index)
        if column.path_in_schema == name:
            stats = column.statistics
            if stats is None or not stats.has_min_max:
                break
            return int(stats.min_raw), int(stats.max_raw)
    return None, None


def _wanted_groups(file: pq.ParquetFile, rng: Range, rows: RowFilter) -> list[int]:
    groups = []
    for group in range(file.num_row_groups):
        low, high = _stats(file, group, "entry_id")
        if low is not None and high is not None and (high < rng.first or low > rng.last):
            continue
        if rows.ts_low is not None or rows.ts_high is not None:
            t_low, t_high = _stats(file, group, "timestamp")
            # (no statistics, or only nulls: read it, and the mask decides)
            if t_low is not None and rows.outside(t_low, t_high):
                continue
        groups.append(group)
    return groups


def _cut(table: pa.Table, rng: Range, rows: RowFilter) -> pa.Table:
    """The rows of ``table`` inside the range (entries, then its slot cuts) and the filter."""
    entries = table.column("entry_id")
    slots = table.column("slot")
    kept = pc.and_(pc.greater_equal(entries, rng.first), pc.less_equal(entries, rng.last))
    if rng.first_slot:
        kept = pc.and_(
            kept,
            pc.or_(pc.not_equal(entries, rng.first), pc.greater_equal(slots, rng.first_slot)),
        )
    if rng.end_slot is not None:
        kept = pc.and_(kept, pc.or_(pc.not_equal(entries, rng.last), pc.less(slots, rng.end_slot)))
    more = rows.mask(table.column("timestamp"), table.column("key"))
    if more is not None:
        kept = pc.and_(kept, more)
    return table.filter(kept)


def _batch(name: str, rng: Range, table: pa.Table, values: ValueColumn | None) -> pa.RecordBatch:
    table = table.combine_chunks()

    def column(label: str) -> pa.Array:
        chunks = table.column(label).chunks
        return chunks[0] if chunks else pa.array([], table.schema.field(label).type)

    extras = [
        column("key"),
        column("headers").cast(HEADERS_ARROW),
        column("timestamp").cast(TIMESTAMP_ARROW),
    ]
    return log_rows(
        name, rng, column("entry_id"), column("slot"), column("payload"), extras, values
    )


def _read_error(rng: Range, uri: str, exc: Exception) -> CorruptLakeFileError:
    return CorruptLakeFileError(
        f"walkit: data file {uri} of offloaded ledger {rng.ledger_id} (sequence {rng.seq}) "
        f"is not the Parquet file the offload wrote: {exc}",
        file=uri,
        ledger_id=rng.ledger_id,
    )


def lake_batches(
    name: str,
    rng: Range,
    io: Any,
    rows: RowFilter,
    values: ValueColumn | None = None,
) -> Iterator[pa.RecordBatch]:
    """The rows of an offloaded ledger's range, in log order, as Arrow batches of the log
    schema (one per row group read). ``io`` is the lake's pyiceberg FileIO. Raises
    FileNotFoundError when a data file is gone (retention dropped the ledger after the
    query was planned) and CorruptLakeFileError when one does not read as Parquet."""
    lake = rng.lake
    assert lake is not None
    if len(lake.files) > 1:
        # One file per day of its records: read whole, merged back into log order (rare).
        tables = []
        for uri in lake.files:
            try:
                file = _open(io, uri)
                tables.append(file.read(columns=LAKE_COLUMNS))
            except (pa.ArrowInvalid, OSError) as exc:
                if isinstance(exc, FileNotFoundError):
                    raise
                raise _read_error(rng, uri, exc) from None
        merged = pa.concat_tables(tables).sort_by(
            [("entry_id", "ascending"), ("slot", "ascending")]
        )
        cut = _cut(merged, rng, rows)
        if cut.num_rows:
            yield _batch(name, rng, cut, values)
        return
    for uri in lake.files:
        yield from _file_batches(name, rng, io, uri, rows, values)


def _file_batches(
    name: str, rng: Range, io: Any, uri: str, rows: RowFilter, values: ValueColumn | None
) -> Iterator[pa.RecordBatch]:
    try:
        file = _open(io, uri)
        groups = _wanted_groups(file, rng, rows)
    except FileNotFoundError:
        raise
    except (pa.ArrowInvalid, OSError) as exc:
        raise _read_error(rng, uri, exc) from None
    if not groups:
        return
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="walkit-lake") as pool:
        ahead = pool.submit(file.read_row_group, groups[0], columns=LAKE_COLUMNS)
        for index in range(len(groups)):
            try:
                table = ahead.result()
            except (pa.ArrowInvalid, OSError) as exc:
                raise _read_error(rng, uri, exc) from None
            if index + 1 < len(groups):
                ahead = pool.submit(file.read_row_group, groups[index + 1], columns=LAKE_COLUMNS)
            cut = _cut(table, rng, rows)
            if cut.num_rows:
                yield _batch(name, rng, cut, values)


def lake_entry_counts(rng: Range, io: Any) -> list[int]:
    """The records of each entry of an offloaded ledger's range (what a micro-batch limited
    to a number of records is cut by), from the files' ``entry_id`` column alone."""
    lake = rng.lake
    assert lake is not None
    counts = [0] * rng.count
    for uri in lake.files:
        try:
            ids = _open(io, uri).read(columns=["entry_id"]).column("entry_id")
        except FileNotFoundError:
            raise
        except (pa.ArrowInvalid, OSError) as exc:
            raise _read_error(rng, uri, exc) from None
        inside = ids.filter(pc.and_(pc.greater_equal(ids, rng.first), pc.less_equal(ids, rng.last)))
        found = pc.value_counts(inside)
        for entry, total in zip(
            found.field("values").to_pylist(), found.field("counts").to_pylist(), strict=True
        ):
            counts[entry - rng.first] += total
    return counts


def file_io(properties: Mapping[str, str], uri: str) -> Any:
    """The FileIO to read the lake's file ``uri`` with (``properties``: the ``offloadCatalog``
    option's, such as an S3 endpoint; none: pyarrow's defaults, the AWS credential chain)."""
    from walkit.lake._read import io_for

    return io_for(properties, uri)
