"""Writing a DataFrame into a walkit log: ``df.write.format("walkit")`` (batch) and
``df.writeStream.format("walkit")`` (streaming, exactly once per micro-batch).

A log has one writer, so the tasks of a write do not append through it (see
:mod:`walkit.log._link`):

- each task *stages* a ledger of its own for its partition (the log's settings and password,
  tagged with the job id and the partition id, and as a record-set ledger), packs the
  partition's payloads in order into record sets of up to the log's ``batch_bytes`` (64 KiB by
  default), appends those, closes the ledger, and sends (partition, ledger id, last entry id,
  records) to the driver;
- the driver's ``commit`` links the tasks' ledgers into the log, in partition order, with one
  compare-and-set: it fences the log's current writer first, as ``log.writer()`` does. Nothing
  a job wrote is visible before that CAS; then all of it is;
- ``abort`` (a task failed) deletes every ledger the job staged, including those of tasks that
  died before they could report.

A streaming write does the same per micro-batch and records ``(sink id, batch id)`` with the
log in the same CAS; a batch id that is committed already (a query restarted from a checkpoint
replays its last batch) links nothing, and its new ledgers are deleted.

Spark pickles the writers to its Python workers: everything here is plain data until a task
runs, and each task, commit or abort is one ``trio.run`` with a client of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import attrs
import trio
from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage

from walkit._core.record_set import encode_record_set, envelope_overhead
from walkit._groups import collapse
from walkit._logging import get_logger
from walkit.client import Client
from walkit.errors import ConfigurationError, InvalidArgumentError
from walkit.log import Log
from walkit.log._link import MAX_JOB_LENGTH, discard_jobs
from walkit.spark._connect import Connection, SessionOptions, connect, connection
from walkit.spark._options import COMMON_OPTIONS, check_options, log_name

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
    "STREAM_WRITE_OPTIONS",
    "WRITE_OPTIONS",
    "LogBatchWriter",
    "LogStreamWriter",
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
#: read from one log can be written into another as it is.
IGNORED_COLUMNS: Final = ("log", "position", "ledger_seq", "ledger_id", "entry_id", "slot")
#: Records a task gathers before packing them into entries.
APPEND_CHUNK: Final = 1000
#: Entries (record sets) appended (pipelined) at once by a task.
APPEND_ENTRIES: Final = 64
#: Spark's task-local properties that name a streaming query and its micro-batch.
_QUERY_ID_PROPERTY: Final = "sql.streaming.queryId"
_BATCH_ID_PROPERTY: Final = "streaming.sql.batchId"

T = TypeVar("T")


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
    #: The streaming sink's id: the ``sinkId`` option, or None (the Spark query's id).
    sink_id: str | None = None
    #: The query's checkpoint directory (the ``checkpointLocation`` option), if given.
    checkpoint: str | None = None


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
        sink_id=sink_id,
        checkpoint=options.get("checkpointLocation"),
    )


def _payload_is_string(schema: StructType) -> bool:
    """Check the columns: a binary or string ``payload``, and only the ignored ones besides."""
    from pyspark.sql.types import BinaryType, StringType

    names = [field.name for field in schema.fields]
    if "payload" not in names:
        raise ConfigurationError(
            f"walkit: the DataFrame to write has no column 'payload' (its columns: "
            f"{', '.join(names) or 'none'}); name the records' bytes payload, as in "
            'df.selectExpr("CAST(value AS BINARY) AS payload")'
        )
    extra = [n for n in names if n != "payload" and n not in IGNORED_COLUMNS]
    if extra:
        raise ConfigurationError(
            f"walkit: a log record is one payload, but the DataFrame to write also has the "
            f'column(s) {", ".join(extra)}: select the payload only (df.select("payload")) '
            "or pack the columns into it (e.g. to_json(struct(*)) AS payload)"
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


# --- entry points (from WalkitDataSource) ---------------------------------------------------


def batch_writer(
    options: dict[str, str], schema: StructType, overwrite: bool, session: SessionOptions
) -> LogBatchWriter:
    """The writer of ``df.write.format("walkit").mode("append").save(LOG)``."""
    _refuse_overwrite(overwrite)
    opts = write_options(options, schema, streaming=False, session=session)
    _run(_ensure_log, opts)
    return LogBatchWriter(opts, f"spark-{uuid.uuid4().hex}")


def stream_writer(
    options: dict[str, str], schema: StructType, overwrite: bool, session: SessionOptions
) -> LogStreamWriter:
    """The writer of ``df.writeStream.format("walkit").start(LOG)``."""
    _refuse_overwrite(overwrite)
    opts = write_options(options, schema, streaming=True, session=session)
    _run(_ensure_log, opts)
    return LogStreamWriter(opts, uuid.uuid4().hex[:12])


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
        return _run(_write_part, self.options, self.job, part, iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        _run(_commit, self.options, self.job, messages, None)

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        _run(_abort, self.options, self.job)


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
        return _run(
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
        _run(_commit, self.options, _stream_prefix(sink, batchId), messages, (sink, batchId))

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        sink = self._sink_id(messages)
        if sink is not None:
            jobs = [m.job for m in messages if isinstance(m, PartWritten)]
            _run(_abort_stream, self.options, _stream_prefix(sink, batchId), jobs)

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


# --- what runs in trio ----------------------------------------------------------------------


def _run(fn: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``trio.run`` that lets one error out, never a group."""
    try:
        return trio.run(fn, *args)
    except BaseExceptionGroup as group:
        raise collapse(group) from None


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


def _payloads(item: Any, opts: WriteOptions, part: int, done: int) -> list[bytes]:
    """The payloads of one Arrow record batch (or one Row, on pyspark 4.0 streams)."""
    import pyarrow as pa

    if isinstance(item, pa.RecordBatch):
        column = item.column(item.schema.get_field_index("payload"))
        if column.null_count:
            first = column.is_null().to_pylist().index(True)
            raise _null_payload(part, done + first)
        if opts.payload_is_string:
            column = column.cast(pa.binary())
        values: list[bytes] = column.to_pylist()
        return values
    value = item["payload"]
    if value is None:
        raise _null_payload(part, done)
    return [value.encode() if isinstance(value, str) else bytes(value)]


def _null_payload(part: int, row: int) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"walkit: row {row} of partition {part} has a null payload; a record needs bytes "
        '(filter them out: df.where("payload IS NOT NULL"))'
    )


def pack_records(payloads: list[bytes], limit: int, *, final: bool) -> tuple[list[bytes], int]:
    """Record-set entries of ``payloads``, in order, each at most ``limit`` bytes (a record
    bigger than that gets an entry of its own), and how many payloads they hold: unless
    ``final``, the last, partly filled entry is left for the next call to fill."""
    entries: list[bytes] = []
    start = 0
    size = envelope_overhead(0)
    per_record = envelope_overhead(1) - envelope_overhead(0)
    for n, payload in enumerate(payloads):
        grown = size + len(payload) + per_record
        if grown > limit and n > start:
            entries.append(encode_record_set(payloads[start:n]))
            start = n
            grown = envelope_overhead(0) + len(payload) + per_record
        size = grown
    if final and start < len(payloads):
        entries.append(encode_record_set(payloads[start:]))
        start = len(payloads)
    return entries, start


async def _write_part(opts: WriteOptions, job: str, part: int, rows: Iterator[Any]) -> PartWritten:
    """One task: stage a record-set ledger (at the first record), append the partition in
    order, packed into entries of up to the log's ``batch_bytes``, close."""
    records = 0
    pending: list[bytes] = []
    async with _connect(opts) as client:
        owner = await _open_log(client, opts, create=False)
        limit = owner.options.batch_bytes
        lw = None
        try:
            while True:
                # Spark's iterator reads from a socket: pull in a thread, so that the bookies'
                # acknowledgements are handled meanwhile.
                item = await trio.to_thread.run_sync(next, rows, None)
                if item is not None:
                    pending.extend(_payloads(item, opts, part, records + len(pending)))
                if len(pending) >= APPEND_CHUNK or (item is None and pending):
                    entries, packed = pack_records(pending, limit, final=item is None)
                    if entries and lw is None:
                        lw = await owner.stage_ledger(job, part, record_sets=True)
                    for start in range(0, len(entries), APPEND_ENTRIES):
                        assert lw is not None
                        await lw.append_batch(entries[start : start + APPEND_ENTRIES])
                    records += packed
                    del pending[:packed]
                if item is None:
                    break
            if lw is not None:
                await lw.close()
        except BaseException:
            if lw is not None:
                await owner._discard_ledger(lw)  # the job's abort would find it too
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
