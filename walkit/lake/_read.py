"""Reading an offloaded ledger back as the log reader's records.

A ledger's data files are read a row group at a time, in worker threads, one row group
ahead of the one being handed out (a bounded cache: at most two row groups of a reader in
memory). A ledger whose records span several days has one file per day; those are read whole
and merged back into log order (rare: a ledger rolls long before a day passes on a busy log).

Files of every lake format read: a column a file lacks (``producer`` before format 2) is
null for its rows. A typed log's ``value`` column is not read: a record's value is decoded
from its payload, as for records read from the bookies.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import TYPE_CHECKING, Any, Final

import anyio
import attrs
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.io import FileIO, load_file_io

from walkit._core.lake import LakeLedger
from walkit._core.log_position import LogPosition
from walkit._core.record_set import ProducerTag
from walkit.errors import ConfigurationError

if TYPE_CHECKING:
    from walkit.lake._table import Lake

__all__ = ["LakeCursor", "io_for", "lake_io_of", "read_ledger_table"]


def check_installed() -> None:
    from walkit.lake import check_available

    check_available()


def lake_io_of(lake: Lake | None, uri: str) -> FileIO:
    """The FileIO to read ``uri`` with: the handle's lake's (its catalog properties: an S3
    endpoint, credentials), else pyarrow's defaults (local files, the AWS credential chain)."""
    return io_for({} if lake is None else lake.properties, uri)


def io_for(properties: Mapping[str, str], uri: str) -> FileIO:
    """The FileIO to read ``uri`` with, given catalog properties (an S3 endpoint,
    credentials; none: pyarrow's defaults). One per properties and scheme in a process."""
    return _io(tuple(sorted(properties.items())), uri.split("://", 1)[0])


@functools.lru_cache(maxsize=32)
def _io(props: tuple[tuple[str, str], ...], scheme: str) -> FileIO:
    return load_file_io(dict(props), f"{scheme}://")


#: The columns a log reader reads (a file may lack the later ones).
RECORD_COLUMNS: Final = (
    "entry_id",
    "slot",
    "timestamp",
    "key",
    "headers",
    "payload",
    "producer",
)


def _open(io: FileIO, uri: str) -> pq.ParquetFile:
    return pq.ParquetFile(io.new_input(uri).open(seekable=True))


def _present(file: pq.ParquetFile, columns: Sequence[str]) -> list[str]:
    names = set(file.schema_arrow.names)
    return [c for c in columns if c in names]


def read_ledger_table(
    io: FileIO, lake: LakeLedger, columns: Sequence[str] = RECORD_COLUMNS
) -> pa.Table:
    """The ``columns`` of every row of an offloaded ledger that its files have, in log order
    (blocking)."""
    files = [_open(io, uri) for uri in lake.files]
    tables = [f.read(columns=_present(f, columns)) for f in files]
    if len(tables) > 1:  # (files of one ledger written by one offloader: the same columns)
        tables = [t.select(tables[0].column_names) for t in tables]
    table = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    if len(tables) > 1:
        table = table.sort_by([("entry_id", "ascending"), ("slot", "ascending")])
    return table


class LakeCursor:
    """The records of one offloaded ledger from a position, batch by batch (a row group)."""

    def __init__(
        self,
        io: FileIO | None,
        lake: LakeLedger,
        seq: int,
        start: LogPosition,
        start_soon: Callable[[Callable[[], Coroutine[Any, Any, None]]], object],
        observe: Callable[[float, int], None] | None = None,
    ) -> None:
        #: ``observe(seconds, bytes)`` of each row group the reader waited for (metrics).
        self._observe = observe
        self._start_soon = start_soon
        self._merged_read = False
        self._io = io
        self._lake = lake
        self._seq = seq
        self._from = (start.entry_id, start.slot) if start.ledger_seq == seq else (0, 0)
        self._file: pq.ParquetFile | None = None
        self._groups: list[int] = []
        self._next: Any = None  # the row group read ahead: (event, result holder)
        self._merged = len(lake.files) > 1
        self._done = not lake.files

    async def next_batch(self, tail: object = None) -> Batch | None:
        """The next records as LogRecord fields (seq, entry, slot, payload, producer, key,
        headers, timestamp, ``tail``), made lazily; None when the ledger is done."""
        while not self._done:
            table = await self._next_table()
            if table is None:
                self._done = True
                return None
            batch = self._rows(table, tail)
            if batch is not None:
                return batch
        return None

    async def _next_table(self) -> pa.Table | None:
        if self._merged:
            if self._merged_read:
                return None
            self._merged_read = True
            assert self._io is not None  # (files to read: an io for them)
            return await anyio.to_thread.run_sync(read_ledger_table, self._io, self._lake)
        if self._file is None:
            assert self._io is not None
            opened = await anyio.to_thread.run_sync(_open, self._io, self._lake.files[0])
            self._file = opened
            self._groups = list(range(opened.num_row_groups))
            self._start_ahead()
        if self._next is None:
            return None
        done, holder = self._next
        waited = anyio.current_time()
        await done.wait()
        if self._observe is not None and isinstance(holder[0], pa.Table):
            self._observe(anyio.current_time() - waited, holder[0].nbytes)
        self._next = None
        self._start_ahead()
        if isinstance(holder[0], BaseException):
            raise holder[0]
        table: pa.Table = holder[0]
        return table

    def _start_ahead(self) -> None:
        if not self._groups or self._file is None:
            return
        group = self._groups.pop(0)
        done = anyio.Event()
        holder: list[Any] = [None]
        file = self._file

        async def read() -> None:
            try:
                holder[0] = await anyio.to_thread.run_sync(
                    functools.partial(
                        file.read_row_group, group, columns=_present(file, RECORD_COLUMNS)
                    )
                )
            except Exception as exc:  # handed to the reader, which raises it
                holder[0] = exc
            finally:
                done.set()

        self._start_soon(read)
        self._next = (done, holder)

    def _rows(self, table: pa.Table, tail: object) -> Batch | None:
        entry_first, slot_first = self._from
        if entry_first or slot_first:
            entries = table.column("entry_id")
            slots = table.column("slot")
            keep = pc.or_(
                pc.greater(entries, entry_first),
                pc.and_(pc.equal(entries, entry_first), pc.greater_equal(slots, slot_first)),
            )
            table = table.filter(keep)
        n = table.num_rows
        if n == 0:
            return None
        ts = table.column("timestamp").cast(pa.int64())
        ms = pc.divide(ts, 1000).to_pylist()
        column = table.column("headers")
        # Made in C (zip, repeat), as the bookie reader makes its records: no Python per
        # record unless a record has headers.
        headers: Iterable[Any] = (
            repeat(None, n)
            if column.null_count == n
            else [
                None if h is None else tuple((x["key"], x["value"]) for x in h)
                for h in column.to_pylist()
            ]
        )
        entry_ids = _pylist(table.column("entry_id"))
        slots = _pylist(table.column("slot"))
        rows = zip(
            repeat(self._seq, n),
            entry_ids,
            slots,
            _pylist(table.column("payload")),
            _producers(table),
            _pylist(table.column("key")),
            headers,
            ms,
            repeat(tail, n),
            strict=True,
        )
        return Batch(rows, entry_ids[-1], slots[-1])


def _pylist(column: pa.ChunkedArray) -> list[Any]:
    """A column without nulls, or of binary values, as Python objects (through numpy: a
    third faster than ``to_pylist``; a binary null stays None)."""
    out: list[Any] = column.to_numpy(zero_copy_only=False).tolist()
    return out


@attrs.frozen
class Batch:
    """Records of an offloaded ledger, and where the last one is."""

    rows: Iterator[tuple[Any, ...]]
    last_entry_id: int
    last_slot: int


def _producers(table: pa.Table) -> list[ProducerTag | None]:
    """The rows' producer tags (null, or no column: none)."""
    if "producer" not in table.column_names:
        return [None] * table.num_rows
    column = table.column("producer")
    if column.null_count == len(column):
        return [None] * table.num_rows
    return [
        None if p is None else ProducerTag(p["producer_id"], p["sequence"])
        for p in column.to_pylist()
    ]


def unavailable(what: str) -> ConfigurationError:
    return ConfigurationError(f"{what} needs the lake extra: pip install 'walkit[lake]'")


def first_at(
    log_name: str,
    offload_to: str | None,
    catalog: Mapping[str, str] | None,
    lake: LakeLedger,
    at: int,
) -> tuple[int, int] | None:
    """(entry id, slot) of an offloaded ledger's first record whose timestamp is ``at`` ms or
    later (None: none is); blocking."""
    from walkit.lake._table import lake_of

    if not lake.files:
        return None
    io = lake_io_of(lake_of(log_name, offload_to, catalog), lake.files[0])
    table = read_ledger_table(io, lake, ["entry_id", "slot", "timestamp"])
    stamps = table.column("timestamp").cast(pa.int64())
    hits = pc.indices_nonzero(pc.fill_null(pc.greater_equal(stamps, at * 1000), False))
    if len(hits) == 0:
        return None
    i = hits[0].as_py()
    return table.column("entry_id")[i].as_py(), table.column("slot")[i].as_py()
