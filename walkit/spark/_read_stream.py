"""Streaming read of a log: ``spark.readStream.format("walkit").option("metadata", URL)
.load("orders")``.

Offsets are log positions, as JSON ``{"position": "SEQ:ENTRY:SLOT"}``: the position of the
next record to read (offsets of older checkpoints, ``"SEQ:ENTRY"``, read as slot 0). A micro-batch reads ``[start, end)``; Spark records ``end`` in the query's
checkpoint before the batch runs and starts the next batch there, so a query restarted from its
checkpoint resumes right after the last committed position.

``latestOffset`` plans like a batch read (closed ledgers to their end, the first open ledger up
to its LAC, then stop), bounded by ``maxRecordsPerTrigger`` (Spark's admission control: the
limit Spark passes wins, e.g. ``ReadAllAvailable`` for ``trigger(availableNow=True)``). The
limit counts records, as Kafka's ``maxOffsetsPerTrigger`` does: the planner sees entries, and an
entry of a record-set ledger holds up to the writer's ``batch_bytes`` of records, so with a limit
the driver reads the record counts of the planned record-set entries (their envelope headers,
:func:`walkit.spark._read_io.entry_record_counts`) and ends the micro-batch at the exact record
(a position with a slot: the next micro-batch starts inside that entry).
``reportLatestOffset`` gives Spark's progress the log's end as that same ``latestOffset`` call saw
it (everything readable now), with ``entriesBehind``: the entries between the micro-batch's end
and it, so a query's progress shows how far behind the log it is (no extra metadata read).
With the ``consumer`` option (``walkit.spark._consumer``) the query's progress is also a durable
consumer's position: a query without a checkpoint starts there, and the consumer moves to the
end of each micro-batch once it is processed.
``partitions`` plans ``[start, end)`` again from the metadata of now: the ledgers before
``end``'s were closed when ``end`` was chosen, and the end ledger is read up to ``end`` only, so
the same records come out however often a batch is replayed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import attrs
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from walkit._core.log_position import LogPosition
from walkit._logging import get_logger
from walkit.errors import InvalidArgumentError, LogTruncatedError
from walkit.spark._consumer import commit_progress, register
from walkit.spark._options import ReadOptions
from walkit.spark._read_io import LogState, log_state, record_counts
from walkit.spark._read_log import LogPartition, read_log_ranges, starting_position
from walkit.spark._read_plan import cut_at_records, pack, plan_log, resolve_latest
from walkit.spark._run import run
from walkit.spark._values import ValueColumn

log = get_logger(__name__)

__all__ = ["LogStreamReader", "lag_offset", "offset", "offset_position"]


def offset(pos: LogPosition) -> dict[str, Any]:
    """The JSON offset of a position."""
    return {"position": str(pos)}


def lag_offset(state: LogState, begin: LogPosition, end: LogPosition) -> dict[str, Any]:
    """The log's end (where a read from ``begin`` with no limit would end: everything readable
    now) as an offset, and ``entriesBehind``: the entries from ``end`` up to it (entries, not
    records: an entry of a record-set ledger holds several; one cut at a slot counts whole)."""
    latest = plan_log(state.ledgers, begin).end
    return {**offset(latest), "entriesBehind": plan_log(state.ledgers, end).count}


def offset_position(value: Any) -> LogPosition:
    """The position of a JSON offset (InvalidArgumentError for anything else)."""
    if not isinstance(value, dict) or not isinstance(value.get("position"), str):
        raise InvalidArgumentError(f'walkit: bad offset {value!r}: expected {{"position": ...}}')
    return LogPosition.parse(value["position"])


class LogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The streaming reader of one log."""

    def __init__(self, options: ReadOptions, values: ValueColumn | None = None) -> None:
        assert options.log is not None
        self.options = options
        self.name: str = options.log
        #: A typed log's ``value`` column (None: the log has no schema).
        self.values = values
        #: With ``trigger(availableNow=True)``: where the query stops.
        self.target: LogPosition | None = None
        #: What :meth:`reportLatestOffset` reports (None before the first ``latestOffset``).
        self.latest: dict[str, Any] | None = None
        #: The position last committed to the ``consumer`` (None: none yet).
        self.committed: LogPosition | None = None

    # --- offsets ---------------------------------------------------------------------------

    def _state(self, from_seq: int) -> LogState:
        return run(log_state, self.options.connection, self.name, from_seq)

    def _check_truncation(self, state: LogState, start: LogPosition) -> LogPosition:
        """``start``, or the truncation point if records from ``start`` on were truncated away
        (LogTruncatedError unless failOnDataLoss is false)."""
        truncated = state.metadata.truncated
        if start >= truncated:
            return start
        message = (
            f"walkit: log {self.name!r} is truncated at {truncated}: the records from {start} "
            "up to it are gone before the stream read them"
        )
        if self.options.fail_on_data_loss:
            raise LogTruncatedError(
                f"{message} (set the option failOnDataLoss to false to skip them)"
            )
        log.warning(
            "spark_stream_skipped_truncated", log=self.name, start=str(start), to=str(truncated)
        )
        return truncated

    def initialOffset(self) -> dict[str, Any]:
        asked = starting_position(self.options, self.name)
        if self.options.consumer is not None:
            # The consumer's position (a new one is created at startingPosition or
            # startingTimestamp).
            asked = run(register, self.options.connection, self.name, self.options.consumer, asked)
        state = self._state(asked.ledger_seq)
        if asked == LogPosition.LATEST:
            start = resolve_latest(state.ledgers, state.metadata.next_seq)
        elif asked == LogPosition.EARLIEST:
            # The first record's position (or where the first ledger will be): a concrete
            # offset in the checkpoint.
            md = state.metadata
            first_seq = md.ledgers[0].seq if md.ledgers else md.next_seq
            start = max(LogPosition(first_seq, 0), md.truncated)
        else:
            start = self._check_truncation(state, asked)
        log.info("spark_stream_start", log=self.name, start=str(start))
        return offset(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        limit = self.options.max_records_per_trigger
        return ReadAllAvailable() if limit is None else ReadMaxRows(limit)

    def prepareForTriggerAvailableNow(self) -> None:
        state = self._state(0)
        start = max(LogPosition.EARLIEST, state.metadata.truncated)
        self.target = plan_log(state.ledgers, start).end
        log.info("spark_stream_available_now", log=self.name, target=str(self.target))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = offset_position(start)
        # Spark plans a micro-batch once the one ending at ``start`` is processed (its
        # commit() comes only when the next batch is planned, and never for the last batch
        # of a run): the consumer moves here.
        self._commit_progress(begin)
        state = self._state(begin.ledger_seq)
        begin = self._check_truncation(state, begin)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if self.target is not None and self.target <= begin:
            end = begin
        else:
            # Every entry holds at least one record: max_rows entries hold enough records.
            plan = plan_log(state.ledgers, begin, self.target, max_rows)
            if max_rows is None:
                end = plan.end
            else:
                counts = run(
                    record_counts,
                    self.options.connection,
                    plan.ranges,
                    max_rows,
                    self.options.lake_properties,
                )
                end = cut_at_records(plan, counts, max_rows)
        self.latest = lag_offset(state, begin, end)
        return offset(end)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The log's end as the last :meth:`latestOffset` saw it (Spark asks right after it,
        for the query's progress), with the entries between the micro-batch's end and it."""
        return self.latest

    # --- batches ---------------------------------------------------------------------------

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, finish = offset_position(start), offset_position(end)
        if begin >= finish:
            return []
        state = self._state(begin.ledger_seq)
        begin = self._check_truncation(state, begin)
        # The end ledger's entries before ``finish`` were confirmed when ``finish`` was chosen:
        # read them even if the LAC seen now is lower (another bookie answered this time).
        end_entry = finish.entry_id if finish.slot > 0 else finish.entry_id - 1
        views = [
            attrs.evolve(v, last=max(v.last, end_entry)) if v.seq == finish.ledger_seq else v
            for v in state.ledgers
        ]
        plan = plan_log(views, begin, finish)
        return [
            LogPartition(self.name, group)
            for group in pack(
                plan.ranges, self.options.split_entries, self.options.split_record_sets
            )
        ]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, LogPartition)
        return read_log_ranges(self.options, partition.log, partition.ranges, self.values)

    def commit(self, end: dict[str, Any]) -> None:
        """The micro-batch up to ``end`` is processed: with the ``consumer`` option, the
        consumer moves there (``walkit log consumers`` shows the query's lag)."""
        self._commit_progress(offset_position(end))

    def _commit_progress(self, position: LogPosition) -> None:
        consumer = self.options.consumer
        if consumer is None or (self.committed is not None and position <= self.committed):
            return
        created = run(commit_progress, self.options.connection, self.name, consumer, position)
        self.committed = position
        log.info(
            "spark_stream_consumer_created" if created else "spark_stream_consumer_committed",
            log=self.name,
            consumer=consumer,
            position=str(position),
        )
