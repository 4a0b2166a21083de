"""``walkit.sync.Log``, its writer, reader and snapshots: the async ones, driven from threads.

A writer's appends from many threads go to the event loop in groups (:class:`_AppendQueue`):
a thread queues its records and wakes the loop only when no group is already on its way, the
loop appends the whole group with one ``append_batch``, and the threads are released one by
one as their records are durable. Released threads come back one at a time, each once it
holds the GIL: the loop waits for them up to a millisecond (Kafka's ``linger.ms``) before it
sends the next group, so that 64 threads fill entries as 64 tasks do (about 32 records an
entry without the wait, 55-60 with it; a lone thread never waits). So records of concurrent threads share entries exactly as
those of concurrent tasks do, each thread's records keep their order (a thread waits for its
append; a batch is one contiguous run), and a busy writer costs one wake-up of the loop per
group, not per record.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Generic, Protocol, Unpack, final

import anyio
import anyio.abc
import attrs

import walkit
from walkit._core.digest import DigestType
from walkit._core.log_position import LogPosition
from walkit._core.record import Record
from walkit.errors import ClientClosedError, InvalidArgumentError, WalkitError
from walkit.log import (
    ConsumerInfo,
    LinkResult,
    LogMetadata,
    LogOptions,
    LogOptionsDict,
    LogRecord,
    Orphan,
    RetentionResult,
    StagedLedger,
)
from walkit.log._values import V
from walkit.sync._client import Client, LedgerWriter
from walkit.sync._thread import LoopThread

__all__ = ["Log", "LogConsumer", "LogReader", "LogWriter", "Snapshot"]

#: How long the pump waits for the threads an acknowledgement released (Kafka's linger.ms).
_LINGER = 0.001
#: Records one reader call hands from the loop to its thread at most.
_READ_CHUNK = 1024


def _copy(error: BaseException) -> BaseException:
    """The same error as a new object: one exception object must not be raised in two
    threads (their tracebacks would mix)."""
    if isinstance(error, WalkitError):
        new = type(error)(*error.args)
        new.__dict__.update(error.__dict__)  # (what some carry: a position, ...)
        new.__cause__ = error.__cause__
        return new
    return error


@final
class _Append:
    """One thread's append waiting in the queue: its records and, once known, the outcome."""

    __slots__ = ("abandoned", "done", "error", "positions", "records")

    def __init__(self, records: list[bytes | Record]) -> None:
        self.records = records
        self.positions: list[LogPosition] = []
        self.error: BaseException | None = None
        #: The thread stopped waiting (interrupted): a failure is the writer's to report.
        self.abandoned = False
        # Held until the outcome is known: the thread waits by acquiring it again (a lock is
        # the cheapest thing one thread can release for another).
        self.done = threading.Lock()
        self.done.acquire()


@final
class _AppendQueue:
    """Appends from many threads, handed to the loop in groups (see the module docs)."""

    def __init__(self, thread: LoopThread, writer: walkit.LogWriter[Any]) -> None:
        self._thread = thread
        self._writer = writer
        self._lock = threading.Lock()
        self._waiting: list[_Append] = []
        self._scheduled = False
        #: Threads released by the last groups and not yet back with their next append: the
        #: pump waits up to _LINGER for them, so that their records share one entry.
        self._expected = 0
        #: Set (in the loop) when a group is waiting; the pump takes it.
        self._wake: anyio.Event | None = None
        self._scope: anyio.CancelScope | None = None

    def start(self) -> None:
        """Start the pump, the loop's task that starts each group's append."""

        async def start() -> None:
            await self._thread.tasks.start(self._pump)

        self._thread.call(start)

    def stop(self) -> None:
        """Stop the pump; appends queued after that fail with ClientClosedError."""
        scope = self._scope
        if scope is not None:
            self._thread.run_sync(scope.cancel)

    def append(self, records: list[bytes | Record]) -> list[LogPosition]:
        self._thread.check()
        call = _Append(records)
        with self._lock:
            self._waiting.append(call)
            wake = not self._scheduled or len(self._waiting) == self._expected
            self._scheduled = True
        if wake and not self._thread.loop.run_sync_soon(self._set_wake):
            raise ClientClosedError("the client is closed")
        try:
            call.done.acquire()
        except BaseException:  # (KeyboardInterrupt) the records were handed over
            call.abandoned = True
            if call.done.acquire(blocking=False) and isinstance(call.error, WalkitError):
                # Settled meanwhile: note the failure in the loop (close reports it).
                self._thread.loop.run_sync_soon(self._writer._state.lost, call.error)
            raise
        if call.error is not None:
            raise call.error
        return call.positions

    def _set_wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _pump(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        try:
            with anyio.CancelScope() as self._scope:
                self._wake = wake = anyio.Event()
                task_status.started()
                while True:
                    await wake.wait()
                    self._wake = wake = anyio.Event()
                    lingered = False
                    if 0 < len(self._waiting) < self._expected:
                        with anyio.move_on_after(_LINGER) as linger:
                            await wake.wait()
                            self._wake = wake = anyio.Event()
                        lingered = linger.cancelled_caught
                    with self._lock:
                        group, self._waiting = self._waiting, []
                        self._scheduled = False
                        self._expected = 0 if lingered else max(0, self._expected - len(group))
                    if group:
                        self._thread.tasks.start_soon(self._append, group)
        finally:
            self._wake = None
            with self._lock:
                group, self._waiting = self._waiting, []
            self._settle(group, None, ClientClosedError("the writer is closed"))

    async def _append(self, group: list[_Append]) -> None:
        records = group[0].records if len(group) == 1 else [r for c in group for r in c.records]
        try:
            # (Trace context, if the log carries it, was added in the callers' threads.)
            positions = await self._writer._append_batch(records, None, None, trace=False)
        except BaseException as exc:
            self._settle(group, None, exc)
            if not isinstance(exc, Exception):
                raise
        else:
            with self._lock:
                self._expected += len(group)
            self._settle(group, positions, None)

    def _settle(
        self,
        group: list[_Append],
        positions: list[LogPosition] | None,
        error: BaseException | None,
    ) -> None:
        start = 0
        for call in group:
            if positions is not None:
                end = start + len(call.records)
                call.positions = positions[start:end]
                start = end
            else:
                call.error = (
                    _copy(error)
                    if isinstance(error, Exception)
                    else ClientClosedError("the client was closed during the append")
                )
                if call.abandoned and isinstance(error, WalkitError):
                    self._writer._state.lost(error)  # no thread will raise it
            call.done.release()


def _record(payload: object) -> bytes | Record:
    if isinstance(payload, bytes | Record):
        return payload
    if isinstance(payload, bytearray | memoryview):
        return bytes(payload)
    raise InvalidArgumentError(f"a record must be bytes, not {type(payload).__name__}")


def _traced(item: bytes | Record) -> Record:
    """``item`` with the calling thread's trace context in its headers (walkit.otel)."""
    from walkit.otel import current_headers, merge

    record = item if isinstance(item, Record) else Record(item)
    context = current_headers()
    if context is None:
        return record
    return attrs.evolve(record, headers=merge(record.headers, context))


@final
class LogWriter(Generic[V]):
    """:class:`walkit.LogWriter`, blocking; ``append`` and ``append_batch`` may be called from
    many threads at once (see the module docs). A context manager: leaving it closes the
    writer. A typed log's values are encoded (and checked) in the calling thread."""

    def __init__(
        self,
        thread: LoopThread,
        writer: walkit.LogWriter[V],
        exit_stack: AbstractContextManager[walkit.LogWriter[V]] | None = None,
    ) -> None:
        self._thread = thread
        self._writer = writer
        self._exit = exit_stack
        self._queue = _AppendQueue(thread, writer)
        self._queue.start()
        self._trace = writer._input.trace
        self._typed = writer._typed

    def __repr__(self) -> str:
        return f"walkit.sync.{self._writer!r}"

    @property
    def async_writer(self) -> walkit.LogWriter[V]:
        return self._writer

    @property
    def ledger_seq(self) -> int:
        """The sequence number of the ledger new records go to."""
        return self._writer.ledger_seq

    @property
    def ledger_id(self) -> int:
        return self._writer.ledger_id

    @property
    def end_position(self) -> LogPosition:
        return self._writer.end_position

    @property
    def is_closed(self) -> bool:
        return self._writer.is_closed

    def append(
        self,
        payload: V,
        *,
        key: bytes | None = None,
        headers: Any = None,
        timestamp: int | None = None,
        producer_id: str | None = None,
        sequence: int | None = None,
    ) -> LogPosition:
        """Append one record (with its ``key``, ``headers``, ``timestamp``, as
        :meth:`walkit.LogWriter.append`); its position once it is durable. With
        ``producer_id`` and ``sequence``, idempotent as :meth:`walkit.LogWriter.append`."""
        if producer_id is not None or sequence is not None:

            async def tagged() -> LogPosition:
                return await self._writer.append(
                    payload,
                    key=key,
                    headers=headers,
                    timestamp=timestamp,
                    producer_id=producer_id,
                    sequence=sequence,
                )

            return self._thread.call(tagged)
        typed = self._typed
        data: object = payload if typed is None else typed.encode(payload)
        item: bytes | Record
        if key is None and headers is None and timestamp is None:
            item = _record(data)
        else:
            item = Record(data, key=key, headers=headers, timestamp=timestamp)
        if self._trace:
            item = _traced(item)
        return self._queue.append([item])[0]

    def append_batch(
        self,
        payloads: Sequence[V | Record],
        *,
        producer_id: str | None = None,
        sequence: int | None = None,
        flush: bool = False,
    ) -> list[LogPosition]:
        """Append several records (bytes, or :class:`walkit.Record`), in order; their
        positions once all are durable. With ``producer_id`` and ``sequence``, idempotent as
        :meth:`walkit.LogWriter.append_batch`; ``flush`` as there too (the batch goes
        straight to the writer instead of joining other threads' records)."""
        if isinstance(payloads, bytes | bytearray | memoryview | str):
            raise InvalidArgumentError("append_batch takes a sequence of payloads")
        typed = self._typed
        items: Sequence[object] = payloads if typed is None else typed.encode_batch(payloads)
        records = [_record(p) for p in items]
        if self._trace:
            records = [_traced(r) for r in records]
        if producer_id is None and sequence is None and not flush:
            return self._queue.append(records) if records else []

        async def tagged() -> list[LogPosition]:
            return await self._writer._append_batch(
                records, producer_id, sequence, trace=False, flush=flush
            )

        return self._thread.call(tagged)

    def truncate(self, pos: LogPosition | str) -> None:
        self._thread.call(self._writer.truncate, pos)

    def close(self) -> None:
        """Wait for the appends in flight and close the writer (idempotent)."""
        self.__exit__(None, None, None)

    def __enter__(self) -> LogWriter[V]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        cm, self._exit = self._exit, None
        try:
            if cm is not None:
                cm.__exit__(exc_type, exc, tb)
            else:
                self._thread.call(self._writer.__aexit__, exc_type, exc, tb)
        finally:
            self._queue.stop()


class _RecordSource(Protocol):
    """What :class:`_Records` reads: an async LogReader or LogConsumer."""

    async def next(self, *, timeout: float | None = None) -> LogRecord[Any] | None: ...

    def _buffered(self) -> LogRecord[Any] | None: ...


class _Records(Generic[V]):
    """A plain iterator over the records of an async reader or consumer. Records come from
    the loop a chunk at a time, so catching up costs one call into the loop per chunk, not per
    record; ``timeout`` bounds each wait (iteration stops when nothing comes within it, and may
    start again later from where it stopped)."""

    def __init__(self, thread: LoopThread, source: _RecordSource, timeout: float | None) -> None:
        self._thread = thread
        self._source = source
        self._timeout = timeout
        self._buffer: collections.deque[LogRecord[V]] = collections.deque()

    def __iter__(self) -> Iterator[LogRecord[V]]:
        return self

    def __next__(self) -> LogRecord[V]:
        record = self.next(timeout=self._timeout)
        if record is None:
            raise StopIteration
        return record

    def next(self, *, timeout: float | None = None) -> LogRecord[V] | None:
        """The next record; None at ``end``, when not following and nothing more is readable
        now, or after ``timeout`` seconds without a record."""
        if not self._buffer:
            self._buffer.extend(self._thread.call(self._fill, timeout))
            if not self._buffer:
                return None
        return self._buffer.popleft()

    async def _fill(self, timeout: float | None) -> list[LogRecord[V]]:
        first = await self._source.next(timeout=timeout)
        if first is None:
            return []
        records = [first]
        take = self._source._buffered
        while len(records) < _READ_CHUNK and (record := take()) is not None:
            records.append(record)
        return records


@final
class LogReader(_Records[V]):
    """A plain iterator over a log's records (from :meth:`Log.reader`).

    With ``follow`` it waits for new records at the end of the log; ``timeout`` bounds each
    wait: when no record comes within it, iteration stops (a ``for`` loop ends), and the
    reader can be iterated again later from where it stopped. :meth:`next` is the one-record
    form. Records come from the loop a chunk at a time, so a reader catching up costs one
    call into the loop per chunk, not per record.
    """

    def __init__(
        self, thread: LoopThread, reader: walkit.LogReader[V], timeout: float | None
    ) -> None:
        super().__init__(thread, reader, timeout)
        self._reader = reader

    def __repr__(self) -> str:
        return f"walkit.sync.{self._reader!r}"

    @property
    def position(self) -> LogPosition:
        """Where the next record will be looked for."""
        return self._buffer[0].position if self._buffer else self._reader.position

    def close(self) -> None:
        """Stop reading (:meth:`walkit.LogReader.aclose`); iteration then ends. Idempotent."""
        self._buffer.clear()
        self._thread.call(self._reader.aclose)

    def __enter__(self) -> LogReader[V]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def lag_records(self) -> int:
        """:meth:`walkit.LogReader.lag_records`, with the records this iterator holds."""
        return len(self._buffer) + self._thread.run_sync(self._reader.lag_records)


@final
class LogConsumer(_Records[V]):
    """:class:`walkit.LogConsumer`, blocking: a plain iterator of the records after the
    consumer's committed position (from :meth:`Log.consumer`), with :meth:`commit`.
    ``timeout`` bounds each wait as for :class:`LogReader`; records come from the loop a chunk
    at a time. ``next()`` raises ConsumerBackloggedError as the async one."""

    def __init__(
        self, thread: LoopThread, consumer: walkit.LogConsumer[V], timeout: float | None
    ) -> None:
        super().__init__(thread, consumer, timeout)
        self._consumer = consumer
        self.name = consumer.name

    def __repr__(self) -> str:
        return f"walkit.sync.{self._consumer!r}"

    @property
    def async_consumer(self) -> walkit.LogConsumer[V]:
        return self._consumer

    @property
    def committed(self) -> LogPosition | None:
        """Where the consumer resumes, as last stored or read (None before registration)."""
        return self._consumer.committed

    @property
    def position(self) -> LogPosition | None:
        """Where the next record will be looked for."""
        return self._buffer[0].position if self._buffer else self._consumer.position

    @property
    def commit_lag(self) -> int:
        """Records handed out by this consumer and not committed yet (0 without metrics)."""
        return self._consumer.commit_lag

    def reader_lag(self) -> int:
        """:meth:`walkit.LogConsumer.reader_lag`, with the records this iterator holds."""
        return len(self._buffer) + self._thread.run_sync(self._consumer.reader_lag)

    def register(self) -> LogPosition:
        """Create the consumer unless it exists; where it resumes."""
        return self._thread.call(self._consumer.register)

    def __enter__(self) -> LogConsumer[V]:
        """``with log.consumer(name) as consumer:`` registers it first."""
        self.register()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._buffer.clear()
        self._thread.call(self._consumer.__aexit__, exc_type, exc, tb)

    def commit(self, pos: LogPosition | str) -> None:
        """Commit every record up to ``pos`` (inclusive), as :meth:`walkit.LogConsumer.commit`."""
        self._thread.call(self._consumer.commit, pos)

    def skip_lost(self) -> LogPosition:
        """After ConsumerBackloggedError: go on at the log's truncation point."""
        self._buffer.clear()
        return self._thread.call(self._consumer.skip_lost)


@final
class Snapshot:
    """:class:`walkit.Snapshot`, blocking."""

    def __init__(self, thread: LoopThread, snapshot: walkit.Snapshot) -> None:
        self._thread = thread
        self._snapshot = snapshot

    def __repr__(self) -> str:
        return f"walkit.sync.{self._snapshot!r}"

    @property
    def position(self) -> LogPosition:
        """The position of the last record the snapshot's state includes."""
        return self._snapshot.position

    @property
    def ledger_id(self) -> int:
        return self._snapshot.ledger_id

    @property
    def size(self) -> int:
        return self._snapshot.size

    @property
    def crc32c(self) -> int:
        return self._snapshot.crc32c

    @property
    def time_ms(self) -> int:
        return self._snapshot.time_ms

    def read(self) -> bytes:
        """The snapshot's bytes (checked against the size and CRC32C saved with it)."""
        return self._thread.call(self._snapshot.read)

    def chunks(self) -> Iterator[bytes]:
        """The snapshot's bytes, chunk by chunk, as saved (one call into the loop a chunk)."""
        chunks = self._snapshot.chunks()

        async def next_chunk() -> bytes | None:
            return await anext(chunks, None)

        try:
            while (chunk := self._thread.call(next_chunk)) is not None:
                yield chunk
        finally:
            aclose = getattr(chunks, "aclose", None)
            if aclose is not None:
                self._thread.call(aclose)

    def __iter__(self) -> Iterator[bytes]:
        return self.chunks()


async def _from_thread(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    """A caller's iterable of chunks, pulled in a worker thread (it may read a file)."""
    iterator = iter(chunks)
    while True:
        chunk = await anyio.to_thread.run_sync(next, iterator, None)
        if chunk is None:
            return
        yield chunk


@final
class Log(Generic[V]):
    """:class:`walkit.Log`, blocking: ``with walkit.sync.Log.open(client, "orders") as log``."""

    def __init__(
        self,
        client: Client,
        log: walkit.Log[V],
        exit_stack: AbstractContextManager[walkit.Log[V]] | None = None,
    ) -> None:
        self._client = client
        self._thread = client.thread
        self._log = log
        self._exit = exit_stack
        self.name = log.name

    def __repr__(self) -> str:
        return f"walkit.sync.{self._log!r}"

    @staticmethod
    def open(
        client: Client,
        name: str,
        *,
        create: bool = True,
        ensemble_size: int | None = None,
        write_quorum: int | None = None,
        ack_quorum: int | None = None,
        digest: str | DigestType | None = None,
        store_password: bool | None = None,
        options: LogOptions | None = None,
        schema: type[V] | None = None,
        **kwargs: Unpack[LogOptionsDict],
    ) -> Log[V]:
        """Open log ``name`` (created if missing, unless ``create=False``); the arguments are
        :meth:`walkit.Log.open`'s (``schema=T``: a typed log)."""
        opener = walkit.Log.open(
            client.async_client,
            name,
            create=create,
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            digest=digest,
            store_password=store_password,
            options=options,
            schema=schema,
            **kwargs,
        )
        cm = client.thread.context(opener)
        return Log(client, cm.__enter__(), cm)

    @staticmethod
    def delete(
        client: Client,
        name: str,
        *,
        password: bytes | None = None,
        offload_catalog: dict[str, str] | None = None,
    ) -> list[int]:
        """:meth:`walkit.Log.delete`, blocking."""

        async def delete() -> list[int]:
            return await walkit.Log.delete(
                client.async_client, name, password=password, offload_catalog=offload_catalog
            )

        return client.thread.call(delete)

    @staticmethod
    def collect_orphans(
        client: Client,
        name: str | None = None,
        *,
        grace: float = 3600.0,
        dry_run: bool = False,
        password: bytes | None = None,
    ) -> list[Orphan]:
        """:meth:`walkit.Log.collect_orphans`, blocking."""

        async def collect() -> list[Orphan]:
            return await walkit.Log.collect_orphans(
                client.async_client, name, grace=grace, dry_run=dry_run, password=password
            )

        return client.thread.call(collect)

    @property
    def async_log(self) -> walkit.Log[V]:
        return self._log

    @property
    def schema(self) -> type[V] | None:
        """The type of the handle's values (``schema=`` of :meth:`open`; None: bytes)."""
        return self._log.schema

    @property
    def client(self) -> Client:
        return self._client

    @property
    def options(self) -> walkit.LogOptions:
        return self._log.options

    def writer(self) -> LogWriter[V]:
        """Take the log over for writing (fences the previous writer); a context manager."""
        cm = self._thread.context(self._log.writer())
        return LogWriter(self._thread, cm.__enter__(), cm)

    def reader(
        self,
        start: LogPosition | str = LogPosition.EARLIEST,
        *,
        end: LogPosition | str | None = None,
        follow: bool = True,
        skip_truncated: bool = True,
        timeout: float | None = None,
    ) -> LogReader[V]:
        """Records from ``start`` as a plain iterator (see :class:`LogReader` for
        ``timeout``); the other arguments are :meth:`walkit.Log.reader`'s."""

        def make() -> walkit.LogReader[V]:
            return self._log.reader(start, end=end, follow=follow, skip_truncated=skip_truncated)

        return LogReader(self._thread, self._thread.run_sync(make), timeout)

    def consumer(
        self,
        name: str,
        *,
        start: LogPosition | str = LogPosition.EARLIEST,
        follow: bool = True,
        timeout: float | None = None,
    ) -> LogConsumer[V]:
        """The durable consumer ``name`` as a plain iterator with ``commit()`` (see
        :class:`LogReader` for ``timeout``); the other arguments are
        :meth:`walkit.Log.consumer`'s."""

        def make() -> walkit.LogConsumer[V]:
            return self._log.consumer(name, start=start, follow=follow)

        return LogConsumer(self._thread, self._thread.run_sync(make), timeout)

    def consumers(self) -> list[ConsumerInfo]:
        """:meth:`walkit.Log.consumers`, blocking."""
        return self._thread.call(self._log.consumers)

    def delete_consumer(self, name: str) -> None:
        """:meth:`walkit.Log.delete_consumer`, blocking."""
        self._thread.call(self._log.delete_consumer, name)

    def metadata(self) -> LogMetadata:
        return self._thread.call(self._log.metadata)

    def position_at(self, timestamp: int) -> LogPosition:
        """:meth:`walkit.Log.position_at`, blocking."""

        async def find() -> LogPosition:
            return await self._log.position_at(timestamp)

        return self._thread.call(find)

    def save_snapshot(self, pos: LogPosition | str, data: bytes | Iterable[bytes]) -> Snapshot:
        """Store a snapshot of the state after every record up to ``pos``; ``data`` is bytes
        or an iterable of chunks (read in a worker thread of the loop)."""

        async def save() -> walkit.Snapshot:
            if isinstance(data, bytes | bytearray | memoryview):
                return await self._log.save_snapshot(pos, bytes(data))
            return await self._log.save_snapshot(pos, _from_thread(data))

        return Snapshot(self._thread, self._thread.call(save))

    def latest_snapshot(self) -> Snapshot | None:
        found = self._thread.call(self._log.latest_snapshot)
        return None if found is None else Snapshot(self._thread, found)

    def snapshots(self) -> list[Snapshot]:
        return [Snapshot(self._thread, s) for s in self._thread.call(self._log.snapshots)]

    def apply_retention(
        self,
        *,
        retain_records: int | None = None,
        retain_bytes: int | None = None,
        retain_age: float | None = None,
        dry_run: bool = False,
    ) -> RetentionResult:
        """:meth:`walkit.Log.apply_retention`, blocking."""

        async def apply() -> RetentionResult:
            return await self._log.apply_retention(
                retain_records=retain_records,
                retain_bytes=retain_bytes,
                retain_age=retain_age,
                dry_run=dry_run,
            )

        return self._thread.call(apply)

    # --- staged ledgers: bulk writes linked into the log (docs/log.md) ----------------------

    def stage_ledger(self, job: str, part: int, *, record_sets: bool = False) -> LedgerWriter:
        """:meth:`walkit.Log.stage_ledger`, blocking."""

        async def stage() -> walkit.LedgerWriter:
            return await self._log.stage_ledger(job, part, record_sets=record_sets)

        return LedgerWriter(self._thread, self._thread.call(stage))

    def link_ledgers(
        self,
        ledger_ids: Sequence[int],
        *,
        job: str | None = None,
        sink: tuple[str, int] | None = None,
        expected_last_entries: Sequence[int] | None = None,
        record_counts: Sequence[int] | None = None,
        schema_version: int | None = None,
    ) -> LinkResult:
        """:meth:`walkit.Log.link_ledgers`, blocking."""

        async def link() -> LinkResult:
            return await self._log.link_ledgers(
                ledger_ids,
                job=job,
                sink=sink,
                expected_last_entries=expected_last_entries,
                record_counts=record_counts,
                schema_version=schema_version,
            )

        return self._thread.call(link)

    def staged_ledgers(self, job: str | None = None) -> list[StagedLedger]:
        """:meth:`walkit.Log.staged_ledgers`, blocking."""
        return self._thread.call(self._log.staged_ledgers, job)

    def discard_staged(
        self, job: str | None = None, *, created_before_ms: int | None = None
    ) -> list[int]:
        """:meth:`walkit.Log.discard_staged`, blocking."""

        async def discard() -> list[int]:
            return await self._log.discard_staged(job, created_before_ms=created_before_ms)

        return self._thread.call(discard)

    def offload(self) -> int:
        """:meth:`walkit.Log.offload`, blocking."""
        return self._thread.call(self._log.offload)

    def close(self) -> None:
        cm, self._exit = self._exit, None
        if cm is not None:
            cm.__exit__(None, None, None)
        else:
            self._thread.call(self._log.aclose)

    def __enter__(self) -> Log[V]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        cm, self._exit = self._exit, None
        if cm is not None:
            cm.__exit__(exc_type, exc, tb)
