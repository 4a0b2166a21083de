"""Batch read of a log: ``spark.read.format("walkit").option("metadata", URL).load("orders")``.

The driver plans (``partitions``): it reads the log's metadata and each ledger's state and cuts
the entries to read into ranges of at most ``splitEntries`` entries. Each Spark task reads its
ranges straight from the bookies and yields Arrow record batches (``read``). Nothing is fenced:
an open ledger is read up to its LAC, so the log's writer goes on appending.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any, final

import attrs
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from walkit._core.log_position import MAX_COMPONENT, LogPosition
from walkit._logging import get_logger
from walkit.errors import InvalidArgumentError, LogTruncatedError
from walkit.spark._options import ReadOptions
from walkit.spark._read_arrow import log_batch
from walkit.spark._read_io import LogState, log_state, position_at, read_chunks
from walkit.spark._read_lake import RowFilter, file_io, lake_batches, micros
from walkit.spark._read_plan import Range, pack, plan_log, resolve_latest
from walkit.spark._run import run
from walkit.spark._values import ValueColumn

log = get_logger(__name__)

__all__ = [
    "FilteringLogReader",
    "LogPartition",
    "LogReader",
    "log_batch",
    "read_log_ranges",
    "starting_position",
]


class LogPartition(InputPartition):
    """One Spark task's share of a log read: ranges of entries, in log order."""

    def __init__(self, log: str, ranges: tuple[Range, ...]) -> None:
        super().__init__(ranges)
        self.log = log
        self.ranges = ranges


def read_log_ranges(
    options: ReadOptions,
    name: str,
    ranges: Sequence[Range],
    values: ValueColumn | None = None,
    rows: RowFilter | None = None,
) -> Iterator[Any]:
    """The rows of ``ranges`` as Arrow batches (what a task of a log read yields): ranges of
    offloaded ledgers from the lake's files, the others from the bookies; with ``values``, a
    typed log's ``value`` column too; only the rows ``rows`` keeps."""

    def missing(rng: Range) -> None:
        where = "its data files were removed" if rng.lake is not None else "it was deleted"
        message = (
            f"walkit: ledger {rng.ledger_id} (sequence {rng.seq}) of log {name!r}: {where} "
            "after the query was planned (the log was truncated)"
        )
        if options.fail_on_data_loss:
            raise LogTruncatedError(
                f"{message}; set the option failOnDataLoss to false to skip what is gone"
            )
        log.warning("spark_read_skipped_deleted_ledger", log=name, ledger_id=rng.ledger_id)

    if rows is None:
        rows = RowFilter()
    index = 0
    while index < len(ranges):
        rng = ranges[index]
        if rng.lake is not None:
            io = (
                file_io(dict(options.lake_properties), rng.lake.files[0])
                if rng.lake.files
                else None
            )
            try:
                for batch in lake_batches(name, rng, io, rows, values):
                    yield batch
            except FileNotFoundError:
                missing(rng)
            index += 1
            continue
        run_end = index
        while run_end < len(ranges) and ranges[run_end].lake is None:
            run_end += 1
        for chunk in read_chunks(options.connection, ranges[index:run_end], on_missing=missing):
            if chunk.entries:
                batch = log_batch(name, chunk, values)
                yield rows.apply(batch) if rows.active else batch
        index = run_end


def start_position(
    options: ReadOptions, name: str, state: LogState, asked: LogPosition
) -> LogPosition:
    """Where a read asked to start at ``asked`` starts: LATEST resolved, and never before the
    truncation point (LogTruncatedError for an explicit position before it, unless
    failOnDataLoss is false)."""
    md = state.metadata
    if asked == LogPosition.LATEST:
        return resolve_latest(state.ledgers, md.next_seq)
    if asked < md.truncated:
        if asked != LogPosition.EARLIEST and options.fail_on_data_loss:
            raise LogTruncatedError(
                f"walkit: log {name!r} is truncated at {md.truncated}: the records from "
                f"{asked} up to it are gone (set the option failOnDataLoss to false to start "
                "at the truncation point)"
            )
        if asked != LogPosition.EARLIEST:
            log.warning(
                "spark_read_truncated_start", log=name, asked=str(asked), start=str(md.truncated)
            )
        return md.truncated
    return asked


def starting_position(options: ReadOptions, name: str) -> LogPosition:
    """Where the read starts as asked: ``startingPosition``, or the first record at or after
    ``startingTimestamp`` (found now, on the driver)."""
    if options.starting_timestamp is None:
        return options.starting
    found = run(position_at, options.connection, name, options.starting_timestamp)
    log.info(
        "spark_read_starting_timestamp",
        log=name,
        timestamp=options.starting_timestamp,
        position=str(found),
    )
    return found


@attrs.define
class _Bounds:
    """What pushed-down filters allow (all bounds inclusive)."""

    seq_low: int = 0
    seq_high: int = MAX_COMPONENT
    seqs: frozenset[int] | None = None
    positions: frozenset[LogPosition] | None = None
    #: ``timestamp`` bounds and ``key`` values: applied to every row on the executors, and
    #: to whole offloaded ledgers on the driver (by the time range their offload recorded).
    rows: RowFilter = attrs.field(factory=RowFilter)

    def keep(self, rng: Range) -> Iterable[Range]:
        if not self.seq_low <= rng.seq <= self.seq_high:
            return ()
        if self.seqs is not None and rng.seq not in self.seqs:
            return ()
        lake = rng.lake
        if lake is not None and self.rows.outside(
            None if lake.min_ts is None else lake.min_ts * 1000,
            None if lake.max_ts is None else lake.max_ts * 1000 + 999,
        ):
            return ()
        if self.positions is None:
            return (rng,)
        kept = []
        for pos in sorted(self.positions):
            if pos.ledger_seq != rng.seq or not rng.first <= pos.entry_id <= rng.last:
                continue
            # The record at pos only (if the entry holds that slot: the executor cuts the
            # entry after decoding it), and only if the range's own slot cuts keep it.
            low = rng.first_slot if pos.entry_id == rng.first else 0
            high = rng.end_slot if pos.entry_id == rng.last else None
            if pos.slot < low or (high is not None and pos.slot >= high):
                continue
            one = rng.part(pos.entry_id, pos.entry_id)
            kept.append(attrs.evolve(one, first_slot=pos.slot, end_slot=pos.slot + 1))
        return tuple(kept)


class LogReader(DataSourceReader):
    """The batch reader of one log."""

    def __init__(self, options: ReadOptions, values: ValueColumn | None = None) -> None:
        assert options.log is not None
        self.options = options
        self.name: str = options.log
        self.bounds = _Bounds()
        #: A typed log's ``value`` column (None: the log has no schema).
        self.values = values

    def partitions(self) -> Sequence[InputPartition]:
        options = self.options
        asked = starting_position(options, self.name)
        state = run(log_state, options.connection, self.name, asked.ledger_seq)
        start = start_position(options, self.name, state, asked)
        plan = plan_log(state.ledgers, start, options.ending)
        ranges = [kept for rng in plan.ranges for kept in self.bounds.keep(rng)]
        log.info(
            "spark_read_planned",
            log=self.name,
            start=str(start),
            end=str(plan.end),
            entries=sum(r.count for r in ranges),
        )
        parts = [
            LogPartition(self.name, group)
            for group in pack(ranges, options.split_entries, options.split_record_sets)
        ]
        return parts or [LogPartition(self.name, ())]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, LogPartition)
        return read_log_ranges(
            self.options, partition.log, partition.ranges, self.values, self.bounds.rows
        )


def _int_value(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _canonical_position(value: Any) -> LogPosition | None:
    """The position a string equal to a ``position`` value names (None: no row can hold it)."""
    if not isinstance(value, str):
        return None
    try:
        pos = LogPosition.parse(value)
    except InvalidArgumentError:
        return None
    return pos if not pos.is_sentinel and str(pos) == value else None


@final
class FilteringLogReader(LogReader):
    """A log reader that takes filters on ``ledger_seq`` (comparisons, ``=``, ``IN``), on
    ``position`` (``=``, ``IN``: a position string compares as text, so ranges of it stay
    with Spark), on ``timestamp`` (comparisons, ``=``) and on ``key`` (``=``, ``IN``), and
    reads only the ledgers and records they allow: offloaded ledgers outside the timestamp
    bounds are not read at all, and row groups of the lake's files outside them are skipped. A position value must be a
    row's exact string (``SEQ:ENTRY:SLOT``): the older ``SEQ:ENTRY`` form matches no row."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        for flt in filters:
            if not self._push(flt):
                yield flt

    def _push(self, flt: Filter) -> bool:
        column = getattr(flt, "attribute", ())
        bounds = self.bounds
        if column == ("ledger_seq",):
            if isinstance(flt, In):
                values = {_int_value(v) for v in flt.value}
                if None in values:
                    return False
                seqs = frozenset(v for v in values if v is not None)
                bounds.seqs = seqs if bounds.seqs is None else bounds.seqs & seqs
                return True
            value = _int_value(getattr(flt, "value", None))
            if value is None:
                return False
            if isinstance(flt, EqualTo):
                bounds.seq_low = max(bounds.seq_low, value)
                bounds.seq_high = min(bounds.seq_high, value)
            elif isinstance(flt, GreaterThan):
                bounds.seq_low = max(bounds.seq_low, value + 1)
            elif isinstance(flt, GreaterThanOrEqual):
                bounds.seq_low = max(bounds.seq_low, value)
            elif isinstance(flt, LessThan):
                bounds.seq_high = min(bounds.seq_high, value - 1)
            elif isinstance(flt, LessThanOrEqual):
                bounds.seq_high = min(bounds.seq_high, value)
            else:
                return False
            return True
        if column == ("timestamp",):
            return self._push_timestamp(flt)
        if column == ("key",):
            return self._push_key(flt)
        if column == ("position",):
            if isinstance(flt, EqualTo):
                texts: tuple[Any, ...] = (flt.value,)
            elif isinstance(flt, In):
                texts = tuple(flt.value)
            else:
                return False
            found = {_canonical_position(text) for text in texts}
            positions = frozenset(p for p in found if p is not None)
            bounds.positions = (
                positions if bounds.positions is None else bounds.positions & positions
            )
            return True
        return False

    def _push_timestamp(self, flt: Filter) -> bool:
        value = micros(getattr(flt, "value", None))
        if value is None:
            return False
        rows = self.bounds.rows
        low, high = rows.ts_low, rows.ts_high
        if isinstance(flt, EqualTo):
            low, high = value, value
        elif isinstance(flt, GreaterThan):
            low = value + 1
        elif isinstance(flt, GreaterThanOrEqual):
            low = value
        elif isinstance(flt, LessThan):
            high = value - 1
        elif isinstance(flt, LessThanOrEqual):
            high = value
        else:
            return False
        # Several bounds of one side: the tightest holds (the filters are ANDed).
        if rows.ts_low is not None and low is not None:
            low = max(low, rows.ts_low)
        if rows.ts_high is not None and high is not None:
            high = min(high, rows.ts_high)
        self.bounds.rows = attrs.evolve(rows, ts_low=low, ts_high=high)
        return True

    def _push_key(self, flt: Filter) -> bool:
        if isinstance(flt, EqualTo):
            given: tuple[Any, ...] = (flt.value,)
        elif isinstance(flt, In):
            given = tuple(flt.value)
        else:
            return False
        if not all(isinstance(v, bytes | bytearray) for v in given):
            return False
        keys = frozenset(bytes(v) for v in given)
        rows = self.bounds.rows
        if rows.keys is not None:
            keys = keys & rows.keys
        self.bounds.rows = attrs.evolve(rows, keys=keys)
        return True
