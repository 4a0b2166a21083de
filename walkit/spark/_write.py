"""Writing a DataFrame into a walkit log: ``df.write.format("walkit")`` (batch) and
``df.writeStream.format("walkit")`` (streaming, exactly once per micro-batch).

A log has one writer, so the tasks of a write do not append through it (see
:mod:`walkit.log._link`):

- each task *stages* a ledger of its own for its partition (the log's settings and password,
  tagged with the job id and the partition id, and as a record-set ledger), packs the
  partition's payloads in order into record sets of up to the log's ``batch_bytes`` (64 KiB by
  default), appends those, closes the ledger, and sends (partition, ledger id, last entry id,
  records) to the driver. A typed log takes a ``value`` struct column instead of ``payload``,
  checked and encoded with the log's latest schema version (:mod:`walkit.spark._values`). The optional columns ``key``, ``headers`` and ``timestamp`` give
  each record's (a null: none; records without a timestamp get the task's clock when their
  entry is packed, as a log writer's do);
- the driver's ``commit`` links the tasks' ledgers into the log, in partition order, with one
  compare-and-set: it fences the log's current writer first, as ``log.writer()`` does. Nothing
  a job wrote is visible before that CAS; then all of it is;
- ``abort`` (a task failed) deletes every ledger the job staged, including those of tasks that
  died before they could report.

A streaming write does the same per micro-batch and records ``(sink id, batch id)`` with the
log in the same CAS; a batch id that is committed already (a query restarted from a checkpoint
replays its last batch) links nothing, and its new ledgers are deleted.

Spark pickles the writers to its Python workers: everything here is plain data until a task
runs, and each task, commit or abort is one event loop (:func:`walkit.spark._run.run`, AnyIO's
``anyio.run``) with a client of its own.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, final

import anyio
import attrs
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from walkit._core.record import Extras, check_headers, check_key, check_timestamp
from walkit._core.record_set import (
    EXTRAS_PER_RECORD,
    TIMESTAMP_BYTES,
    encode_record_set,
    envelope_overhead,
    extras_size,
)
from walkit._core.schema import RecordType
from walkit._core.time_search import TimeRange, entry_time_range, time_range_tag, widen
from walkit._logging import get_logger
from walkit.client import Client, client_services
from walkit.errors import ConfigurationError, InvalidArgumentError
from walkit.log import Log
from walkit.log._link import MAX_JOB_LENGTH, discard_jobs
from walkit.spark._connect import Connection, SessionOptions, connect, connection
from walkit.spark._options import COMMON_OPTIONS, check_options, log_name
from walkit.spark._run import run
from walkit.spark._values import ValueEncoder

try:  # pyspark >= 4.1: the stream writer takes Arrow batches too
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamWriterBase
except ImportError:  # pragma: no cover - pyspark 4.0: rows
    from pyspark.sql.datasource import (  # type: ignore[assignment]
        DataSourceStreamWriter as _StreamWriterBase,
    )

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

log = get_logger(__name__)

__all__ = [
    "IGNORED_COLUMNS",
    "RECORD_COLUMNS",
    "STREAM_WRITE_OPTIONS",
    "WRITE_OPTIONS",
    "LogBatchWriter",
    "LogStreamWriter",
    "Packed",
    "PartWritten",
    "WriteOptions",
    "batch_writer",
    "stream_writer",
    "write_options",
]

#: Options of a batch write (the settings of a log that the write creates).
WRITE_OPTIONS: Final = (*COMMON_OPTIONS, "ensembleSize", "writeQuorum", "ackQuorum", "digest")
#: Options of a streaming write.
STREAM_WRITE_OPTIONS: Final = (*WRITE_OPTIONS, "checkpointLocation", "sinkId")
#: Columns of what the ``walkit`` reader returns; a write ignores them, so that a DataFrame
#: read from one log can be written into another as it is (its keys, headers and timestamps
#: with it).
IGNORED_COLUMNS: Final = ("log", "position", "ledger_seq", "ledger_id", "entry_id", "slot")
#: Optional columns a write takes besides ``payload``.
RECORD_COLUMNS: Final = ("key", "headers", "timestamp")
#: Records a task gathers before packing them into entries.
APPEND_CHUNK: Final = 1000
#: Entries (record sets) appended (pipelined) at once by a task.
APPEND_ENTRIES: Final = 64
#: Spark's task-local properties that name a streaming query and its micro-batch.
_QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
_BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"


@final
@attrs.frozen
class WriteOptions:
    """A write's options and the payload column's type, checked on the driver."""

    connection: Connection
    log: str
    #: ``Log.open`` settings for a log the write creates (ensemble_size=..., digest=...).
    settings: tuple[tuple[str, Any], ...]
    #: Whether ``payload`` is a string column (written as its UTF-8 bytes).
    payload_is_string: bool
    #: Which of the optional columns ``key``, ``headers``, ``timestamp`` the DataFrame has.
    record_columns: tuple[str, ...] = ()
    #: The streaming sink's id: the ``sinkId`` option, or None (the Spark query's id).
    sink_id: str | None = None
    #: The query's checkpoint directory (the ``checkpointLocation`` option), if given.
    checkpoint: str | None = None
    #: A typed log's write (a ``value`` column): the schema version its values are encoded
    #: with, and that version's schema (None: a ``payload`` write).
    value_version: int | None = None
    value_schema: RecordType | None = None


@final
@attrs.frozen
class PartWritten(WriterCommitMessage):
    """What a task reports: its partition, and the ledger it staged (None: no rows)."""

    job: str
    part: int
    ledger_id: int | None
    last_entry_id: int
    records: int


def write_options(
    raw: dict[str, str],
    schema: StructType,
    *,
    streaming: bool,
    session: SessionOptions | None = None,
) -> WriteOptions:
    """Check a write's options and the DataFrame's columns (ConfigurationError); ``session``:
    the connection options of the session's conf, under the query's."""
    what = "streaming write" if streaming else "write"
    options = check_options(raw, STREAM_WRITE_OPTIONS if streaming else WRITE_OPTIONS, what)
    if session is not None:
        options = session.merged(options)
    conn = connection(options)
    name = log_name(options)
    if name is None:
        verb = 'start("events")' if streaming else 'save("events")'
        raise ConfigurationError(f"walkit: name the log to write, as in .{verb}")
    settings: list[tuple[str, Any]] = []
    for option, key in (
        ("ensembleSize", "ensemble_size"),
        ("writeQuorum", "write_quorum"),
        ("ackQuorum", "ack_quorum"),
    ):
        text = options.get(option)
        if text is not None:
            if not text.strip().isdigit() or int(text) < 1:
                raise ConfigurationError(
                    f"walkit: option {option!r} is {text!r}: expected an integer >= 1"
                )
            settings.append((key, int(text)))
    if "digest" in options:
        digest = options["digest"].strip().lower()
        if digest not in ("crc32c", "mac", "none"):
            raise ConfigurationError(
                f"walkit: option 'digest' is {options['digest']!r}: expected crc32c, mac or none"
            )
        settings.append(("digest", digest))
    sink_id = options.get("sinkId")
    if sink_id is not None and (
        not sink_id or len(sink_id) > MAX_JOB_LENGTH - 40 or not sink_id.isprintable()
    ):
        raise ConfigurationError(
            f"walkit: option 'sinkId' is {sink_id!r}: expected 1-{MAX_JOB_LENGTH - 40} "
            "printable characters"
        )
    return WriteOptions(
        connection=conn,
        log=name,
        settings=tuple(settings),
        payload_is_string=_payload_is_string(schema),
        record_columns=_record_columns(schema),
        sink_id=sink_id,
        checkpoint=options.get("checkpointLocation"),
    )


def _payload_is_string(schema: StructType) -> bool:
    """Check the columns: a binary or string ``payload``, and only the ignored ones besides."""
    from pyspark.sql.types import BinaryType, StringType

    names = [field.name for field in schema.fields]
    if "value" in names and "payload" in names:
        raise ConfigurationError(
            "walkit: the DataFrame to write has both 'payload' and 'value': a typed log's "
            "records are values (a struct column 'value'), a plain log's are payloads"
        )
    if "value" in names:  # a typed log's values: checked against its schema by the driver
        extra = [n for n in names if n not in ("value", *IGNORED_COLUMNS, *RECORD_COLUMNS)]
        if extra:
            raise ConfigurationError(
                f"walkit: a typed log's record is a value (with an optional key, headers and "
                f"timestamp), but the DataFrame to write also has the column(s) "
                f"{', '.join(extra)}: put them into the 'value' struct"
            )
        return False
    if "payload" not in names:
        raise ConfigurationError(
            f"walkit: the DataFrame to write has no column 'payload' (its columns: "
            f"{', '.join(names) or 'none'}); name the records' bytes payload, as in "
            'df.selectExpr("CAST(value AS BINARY) AS payload")'
        )
    known = ("payload", *IGNORED_COLUMNS, *RECORD_COLUMNS)
    extra = [n for n in names if n not in known]
    if extra:
        raise ConfigurationError(
            f"walkit: a log record is a payload (with an optional key, headers and timestamp), "
            f"but the DataFrame to write also has the column(s) {', '.join(extra)}: select "
            'the payload only (df.select("payload")) or pack the columns into it (e.g. '
            "to_json(struct(*)) AS payload)"
        )
    field = schema.fields[names.index("payload")]
    if isinstance(field.dataType, BinaryType):
        return False
    if isinstance(field.dataType, StringType):
        return True
    raise ConfigurationError(
        f"walkit: column 'payload' is {field.dataType.simpleString()}, but walkit writes binary "
        "or string payloads: cast it, e.g. CAST(payload AS STRING) or to_json(payload)"
    )


def _record_columns(schema: StructType) -> tuple[str, ...]:
    """The optional columns present, their types checked (ConfigurationError)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    fields = {field.name: field.dataType for field in schema.fields}
    text_or_bytes = (BinaryType, StringType)
    wanted = {
        "key": "binary or string",
        "headers": "array<struct<key: string, value: binary or string>>",
        "timestamp": "timestamp, or long milliseconds since the epoch",
    }
    present = []
    for name in RECORD_COLUMNS:
        kind = fields.get(name)
        if kind is None:
            continue
        if name == "key":
            good = isinstance(kind, text_or_bytes)
        elif name == "headers":
            element = kind.elementType if isinstance(kind, ArrayType) else None
            good = (
                isinstance(element, StructType)
                and [f.name for f in element.fields] == ["key", "value"]
                and isinstance(element.fields[0].dataType, StringType)
                and isinstance(element.fields[1].dataType, text_or_bytes)
            )
        else:
            good = isinstance(kind, TimestampType | TimestampNTZType | LongType | IntegerType)
        if not good:
            raise ConfigurationError(
                f"walkit: column {name!r} is {kind.simpleString()}; a write takes it as "
                f"{wanted[name]} (or leave it out)"
            )
        present.append(name)
    return tuple(present)


# --- entry points (from WalkitDataSource) ---------------------------------------------------


def batch_writer(
    options: dict[str, str], schema: StructType, overwrite: bool, session: SessionOptions
) -> LogBatchWriter:
    """The writer of ``df.write.format("walkit").mode("append").save(LOG)``."""
    _refuse_overwrite(overwrite)
    opts = _typed(write_options(options, schema, streaming=False, session=session), schema)
    run(_ensure_log, opts)
    return LogBatchWriter(opts, f"spark-{uuid.uuid4().hex}")


def stream_writer(
    options: dict[str, str], schema: StructType, overwrite: bool, session: SessionOptions
) -> LogStreamWriter:
    """The writer of ``df.writeStream.format("walkit").start(LOG)``."""
    _refuse_overwrite(overwrite)
    opts = _typed(write_options(options, schema, streaming=True, session=session), schema)
    run(_ensure_log, opts)
    return LogStreamWriter(opts, uuid.uuid4().hex[:12])


def _typed(opts: WriteOptions, schema: StructType) -> WriteOptions:
    """A write into a typed log takes a ``value`` column matching the log's latest schema
    version, and a plain log a ``payload`` (ConfigurationError otherwise)."""
    from walkit.spark._values import check_value_type, latest, log_versions

    names = [field.name for field in schema.fields]
    found = latest(log_versions(opts.connection, opts.log) or ())
    if "value" not in names:
        if found is not None:
            raise ConfigurationError(
                f"walkit: log {opts.log!r} is typed (schema version {found[0]}, "
                f"{found[1].name}): write a struct column 'value' of its fields, not payloads"
            )
        return opts
    if found is None:
        raise ConfigurationError(
            f"walkit: the DataFrame has a 'value' column, but log {opts.log!r} has no schema "
            "(or does not exist): create it with Log.open(client, name, schema=T) first, or "
            "write payloads"
        )
    check_value_type(schema.fields[names.index("value")].dataType, found[1])
    return attrs.evolve(opts, value_version=found[0], value_schema=found[1])


@functools.lru_cache(maxsize=16)
def _value_encoder(schema: RecordType) -> ValueEncoder:
    return ValueEncoder(schema)


def _refuse_overwrite(overwrite: bool) -> None:
    if overwrite:
        raise ConfigurationError(
            'walkit: a log is append-only: write with .mode("append") (mode "overwrite" would '
            "drop records that readers may not have seen)"
        )


# --- the writers ----------------------------------------------------------------------------


@final
class LogBatchWriter(DataSourceArrowWriter):
    """Batch write: a staged ledger per task, linked by ``commit``, deleted by ``abort``."""

    def __init__(self, options: WriteOptions, job: str) -> None:
        self.options = options
        self.job = job

    def write(self, iterator: Iterator[Any]) -> PartWritten:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        return run(_write_part, self.options, self.job, part, iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        run(_commit, self.options, self.job, messages, None)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        run(_abort, self.options, self.job)


@final
class LogStreamWriter(_StreamWriterBase):
    """Streaming write: the batch write's steps per micro-batch, exactly once per batch id."""

    def __init__(self, options: WriteOptions, attempt: str) -> None:
        self.options = options
        #: Tells this run of the query from earlier ones: a batch replayed after a restart is
        #: another job (a job id is good for one commit or abort).
        self.attempt = attempt

    def write(self, iterator: Iterator[Any]) -> PartWritten:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:  # pragma: no cover - Spark always runs tasks with a context
            raise InvalidArgumentError("walkit: a streaming write task runs without a context")
        sink = self.options.sink_id or ctx.getLocalProperty(_QUERY_ID_PROPERTY)
        batch = ctx.getLocalProperty(_BATCH_ID_PROPERTY)
        if not sink or batch is None:  # pragma: no cover - set by every micro-batch
            raise InvalidArgumentError("walkit: Spark did not name the streaming query or batch")
        return run(
            _write_part,
            self.options,
            _stream_job(sink, int(batch), self.attempt),
            ctx.partitionId(),
            iterator,
        )

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        sink = self._sink_id(messages)
        if sink is None:
            # No task reported and the query's id is unknown: nothing was staged.
            log.warning("spark_stream_commit_without_sink", log=self.options.log, batch=batchId)
            return
        # Spark makes this writer apart from the one its tasks got: the tasks' job ids (sink,
        # batch, their run's token) come from their messages.
        run(_commit, self.options, _stream_prefix(sink, batchId), messages, (sink, batchId))

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        sink = self._sink_id(messages)
        if sink is not None:
            jobs = [m.job for m in messages if isinstance(m, PartWritten)]
            run(_abort_stream, self.options, _stream_prefix(sink, batchId), jobs)

    def _sink_id(self, messages: Sequence[WriterCommitMessage | None]) -> str | None:
        """The sink id: the option, else the Spark query id the tasks saw, else the one in
        the checkpoint's metadata file."""
        if self.options.sink_id is not None:
            return self.options.sink_id
        for message in messages:
            if isinstance(message, PartWritten):
                return message.job.rsplit(".", 2)[0]
        return _checkpoint_query_id(self.options.checkpoint)


def _stream_prefix(sink: str, batch_id: int) -> str:
    return f"{sink}.{batch_id}."


def _stream_job(sink: str, batch_id: int, attempt: str) -> str:
    return f"{_stream_prefix(sink, batch_id)}{attempt}"


def _checkpoint_query_id(checkpoint: str | None) -> str | None:
    """The query id in ``<checkpoint>/metadata`` (local directories only)."""
    if not checkpoint:
        return None
    path = checkpoint.removeprefix("file://").removeprefix("file:")
    try:
        with open(os.path.join(path, "metadata"), encoding="utf-8") as f:
            doc = json.loads(f.readline())
    except (OSError, ValueError):
        return None
    query_id = doc.get("id") if isinstance(doc, dict) else None
    return query_id if isinstance(query_id, str) and query_id else None


# --- what runs in the event loop -------------------------------------------------------------


def _connect(opts: WriteOptions) -> contextlib.AbstractAsyncContextManager[Client]:
    # Spark is the application here: staged ledgers get a wall-clock creation time so that an
    # operator's sweep can tell the orphans of old jobs from the ledgers of running ones.
    return connect(opts.connection, wall_clock=time.time)


async def _open_log(client: Client, opts: WriteOptions, *, create: bool) -> Log:
    settings: dict[str, Any] = dict(opts.settings) if create else {}
    if opts.connection.password is not None:  # else: the log's own (generated) password
        settings["password"] = opts.connection.password
    return await Log.open(client, opts.log, create=create, **settings)


async def _ensure_log(opts: WriteOptions) -> None:
    """Create the log if missing (a ConfigurationError if it exists with other settings)."""
    async with _connect(opts) as client:
        await _open_log(client, opts, create=True)


def _payloads(
    item: Any, opts: WriteOptions, part: int, done: int
) -> tuple[list[bytes], list[Extras | None] | None]:
    """The payloads of one Arrow record batch (or one Row, on pyspark 4.0 streams), and each
    record's key, headers and timestamp (None: the DataFrame has none of those columns)."""
    import pyarrow as pa

    if opts.value_schema is not None:
        return _typed_payloads(item, opts, opts.value_schema, part, done)
    if isinstance(item, pa.RecordBatch):
        column = item.column(item.schema.get_field_index("payload"))
        if column.null_count:
            first = column.is_null().to_pylist().index(True)
            raise _null_payload(part, done + first)
        if opts.payload_is_string:
            column = column.cast(pa.binary())
        values: list[bytes] = column.to_pylist()
        if not opts.record_columns:
            return values, None
        columns = {
            name: _column_values(name, item.column(item.schema.get_field_index(name)))
            for name in opts.record_columns
        }
        return values, _extras_rows(columns, len(values), part, done)
    value = item["payload"]
    if value is None:
        raise _null_payload(part, done)
    payload = value.encode() if isinstance(value, str) else bytes(value)
    if not opts.record_columns:
        return [payload], None
    columns = {name: [_row_value(name, item[name])] for name in opts.record_columns}
    return [payload], _extras_rows(columns, 1, part, done)


def _typed_payloads(
    item: Any, opts: WriteOptions, schema: RecordType, part: int, done: int
) -> tuple[list[bytes], list[Extras | None] | None]:
    """:func:`_payloads` of a typed log: its ``value`` cells encoded (walkit.spark._values)."""
    import pyarrow as pa

    encoder = _value_encoder(schema)
    if isinstance(item, pa.RecordBatch):
        cells = item.column(item.schema.get_field_index("value")).to_pylist()
        values = encoder.payloads(cells, part, done)
        columns = {
            name: _column_values(name, item.column(item.schema.get_field_index(name)))
            for name in opts.record_columns
        }
    else:
        values = encoder.payloads([item["value"]], part, done)
        columns = {name: [_row_value(name, item[name])] for name in opts.record_columns}
    if not opts.record_columns:
        return values, None
    return values, _extras_rows(columns, len(values), part, done)


def _column_values(name: str, column: Any) -> list[Any]:
    """An Arrow column of ``key``, ``headers`` or ``timestamp`` as Python values (timestamps
    as milliseconds since the epoch)."""
    import pyarrow as pa

    if name == "timestamp" and pa.types.is_timestamp(column.type):
        micros = column.cast(pa.timestamp("us", tz=column.type.tz)).cast(pa.int64())
        return [None if v is None else v // 1000 for v in micros.to_pylist()]
    return list(column.to_pylist())


def _row_value(name: str, value: Any) -> Any:
    """A Row's ``key``, ``headers`` or ``timestamp`` as :func:`_column_values` gives it."""
    import datetime

    if name == "timestamp" and isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=datetime.UTC)
        return int(value.timestamp() * 1000)
    if name == "headers" and value is not None:
        return [{"key": h["key"], "value": h["value"]} for h in value]
    return value


def _extras_rows(
    columns: dict[str, list[Any]], count: int, part: int, done: int
) -> list[Extras | None]:
    """Each row's (key, headers, timestamp), checked (InvalidArgumentError naming the row)."""
    keys = columns.get("key", [None] * count)
    headers = columns.get("headers", [None] * count)
    times = columns.get("timestamp", [None] * count)
    out: list[Extras | None] = []
    for n, (key, pairs, ts) in enumerate(zip(keys, headers, times, strict=True)):
        try:
            k = None if key is None else check_key(key.encode() if isinstance(key, str) else key)
            h = None
            if pairs is not None:
                h = check_headers(
                    [
                        (
                            p["key"],
                            p["value"].encode() if isinstance(p["value"], str) else p["value"],
                        )
                        for p in pairs
                    ]
                )
            if ts is not None:
                check_timestamp(ts)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(
                f"walkit: row {done + n} of partition {part}: {exc}"
            ) from None
        out.append(None if k is None and h is None and ts is None else (k, h, ts))
    return out


def _null_payload(part: int, row: int) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"walkit: row {row} of partition {part} has a null payload; a record needs bytes "
        '(filter them out: df.where("payload IS NOT NULL"))'
    )


@attrs.define
class Packed:
    """Entries packed from records: how many records they hold, and their timestamps."""

    entries: list[bytes] = attrs.Factory(list)
    records: int = 0
    time_range: TimeRange | None = None


def pack_records(
    payloads: list[bytes],
    limit: int,
    *,
    final: bool,
    extras: list[Extras | None] | None = None,
    timestamp: int | None = None,
) -> Packed:
    """Record-set entries of ``payloads`` (with ``extras``, one (key, headers, timestamp) or
    None per record, and stamped with ``timestamp``), in order, each at most ``limit`` bytes
    (a record bigger than that gets an entry of its own): unless ``final``, the last, partly
    filled entry is left for the next call to fill."""
    packed = Packed()
    start = 0
    empty = envelope_overhead(0) + (0 if timestamp is None else TIMESTAMP_BYTES)
    size = empty
    per_record = envelope_overhead(1) - envelope_overhead(0)

    def add(end: int) -> None:
        part = None if extras is None else extras[start:end]
        packed.entries.append(
            encode_record_set(payloads[start:end], timestamp=timestamp, extras=part)
        )
        packed.time_range = widen(packed.time_range, entry_time_range(timestamp, part))

    for n, payload in enumerate(payloads):
        more = len(payload) + per_record
        given = None if extras is None else extras[n]
        if given is not None:
            more += extras_size(given) + EXTRAS_PER_RECORD
        grown = size + more
        if grown > limit and n > start:
            add(n)
            start = n
            grown = empty + more
        size = grown
    if final and start < len(payloads):
        add(len(payloads))
        start = len(payloads)
    packed.records = start
    return packed


async def _write_part(opts: WriteOptions, job: str, part: int, rows: Iterator[Any]) -> PartWritten:
    """One task: stage a record-set ledger (at the first record), append the partition in
    order, packed into entries of up to the log's ``batch_bytes``, close."""
    records = 0
    pending: list[bytes] = []
    pending_extras: list[Extras | None] | None = [] if opts.record_columns else None
    time_range: TimeRange | None = None
    async with _connect(opts) as client:
        owner = await _open_log(client, opts, create=False)
        limit = owner.options.batch_bytes
        clock = client_services(client).context.options.wall_clock
        lw = None
        try:
            while True:
                # Spark's iterator reads from a socket: pull in a thread, so that the bookies'
                # acknowledgements are handled meanwhile.
                item = await anyio.to_thread.run_sync(next, rows, None)
                if item is not None:
                    values, extras = _payloads(item, opts, part, records + len(pending))
                    pending.extend(values)
                    if pending_extras is not None:
                        pending_extras.extend(extras or [None] * len(values))
                if len(pending) >= APPEND_CHUNK or (item is None and pending):
                    packed = pack_records(
                        pending,
                        limit,
                        final=item is None,
                        extras=pending_extras,
                        timestamp=None if clock is None else int(clock() * 1000),
                    )
                    entries = packed.entries
                    if entries and lw is None:
                        lw = await owner.stage_ledger(job, part, record_sets=True)
                    for start in range(0, len(entries), APPEND_ENTRIES):
                        assert lw is not None
                        await lw.append_batch(entries[start : start + APPEND_ENTRIES])
                    records += packed.records
                    time_range = widen(time_range, packed.time_range)
                    del pending[: packed.records]
                    if pending_extras is not None:
                        del pending_extras[: packed.records]
                if item is None:
                    break
            if lw is not None:
                await lw.close(custom_metadata=time_range_tag(time_range))
        except BaseException:
            if lw is not None:
                await owner._ledger_cleanup.discard(lw)  # the job's abort would find it too
            raise
    log.info("spark_part_written", log=opts.log, job=job, part=part, records=records)
    return PartWritten(
        job=job,
        part=part,
        ledger_id=None if lw is None else lw.id,
        last_entry_id=-1 if lw is None else lw.last_add_confirmed,
        records=records,
    )


async def _commit(
    opts: WriteOptions,
    job: str,
    messages: Sequence[WriterCommitMessage | None],
    sink: tuple[str, int] | None,
) -> None:
    """Link what the tasks staged. ``job``: the batch job's id, or (with ``sink``) the prefix of
    the micro-batch's job ids."""
    written = sorted(
        (m for m in messages if isinstance(m, PartWritten)), key=lambda m: (m.part, m.job)
    )
    parts = [m.part for m in written]
    if len(set(parts)) != len(parts):
        raise InvalidArgumentError(f"walkit: two tasks reported the same partition: {parts}")
    for message in written:
        if message.job != job and not (sink is not None and message.job.startswith(job)):
            raise InvalidArgumentError(
                f"walkit: a task of job {message.job} reported to the commit of job {job}"
            )
    staged = [m for m in written if m.ledger_id is not None]
    async with _connect(opts) as client:
        owner = await _open_log(client, opts, create=False)
        result = await owner.link_ledgers(
            [m.ledger_id for m in staged if m.ledger_id is not None],
            job=None if sink is not None else job,
            sink=sink,
            expected_last_entries=[m.last_entry_id for m in staged],
            record_counts=[m.records for m in staged],
            schema_version=opts.value_version,
        )
        if sink is not None:  # this batch's other attempts, of this run or earlier ones
            await discard_jobs(owner, job, sorted({m.job for m in written}))
    log.info(
        "spark_write_committed",
        log=opts.log,
        job=job,
        records=result.records,
        ledgers=len(result.ledgers),
        replayed=result.replayed,
        end=None if result.end is None else str(result.end),
    )


async def _abort_stream(opts: WriteOptions, prefix: str, jobs: list[str]) -> None:
    async with _connect(opts) as client:
        owner = await _open_log(client, opts, create=False)
        deleted = await discard_jobs(owner, prefix, jobs)
    log.warning("spark_write_aborted", log=opts.log, job=prefix, deleted=len(deleted))


async def _abort(opts: WriteOptions, job: str) -> None:
    async with _connect(opts) as client:
        owner = await _open_log(client, opts, create=False)
        deleted = await owner.discard_staged(job)
    log.warning("spark_write_aborted", log=opts.log, job=job, deleted=len(deleted))
