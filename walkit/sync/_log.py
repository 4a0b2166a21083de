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
from typing import Any, Protocol, final

import anyio
import anyio.abc
import attrs

import walkit
from walkit._core.log_position import LogPosition
from walkit._core.record import Record
from walkit.errors import ClientClosedError, InvalidArgumentError, WalkitError
from walkit.log import ConsumerInfo, LogMetadata, LogRecord
from walkit.sync._client import Client
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

    __slots__ = ("done", "error", "positions", "records")

    def __init__(self, records: list[bytes | Record]) -> None:
        self.records = records
        self.positions: list[LogPosition] = []
        self.error: BaseException | None = None
        # Held until the outcome is known: the thread waits by acquiring it again (a lock is
        # the cheapest thing one thread can release for another).
        self.done = threading.Lock()
        self.done.acquire()


@final
class _AppendQueue:
    """Appends from many threads, handed to the loop in groups (see the module docs)."""

    def __init__(self, thread: LoopThread, writer: walkit.LogWriter) -> None:
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
        call.done.acquire()
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

    @staticmethod
    def _settle(
        group: list[_Append], positions: list[LogPosition] | None, error: BaseException | None
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
class LogWriter:
    """:class:`walkit.LogWriter`, blocking; ``append`` and ``append_batch`` may be called from
    many threads at once (see the module docs). A context manager: leaving it closes the
    writer."""

    def __init__(
        self,
        thread: LoopThread,
        writer: walkit.LogWriter,
        exit_stack: AbstractContextManager[walkit.LogWriter] | None = None,
    ) -> None:
        self._thread = thread
        self._writer = writer
        self._exit = exit_stack
        self._queue = _AppendQueue(thread, writer)
        self._queue.start()
        self._trace = writer._input.trace

    def __repr__(self) -> str:
        return f"walkit.sync.{self._writer!r}"

    @property
    def async_writer(self) -> walkit.LogWriter:
        return self._writer

    @property
    def end_position(self) -> LogPosition:
        return self._writer.end_position

    @property
    def is_closed(self) -> bool:
        return self._writer.is_closed

    def append(
        self,
        payload: bytes,
        *,
        key: bytes | None = None,
        headers: Any = None,
        timestamp: int | None = None,
    ) -> LogPosition:
        """Append one record (with its ``key``, ``headers``, ``timestamp``, as
        :meth:`walkit.LogWriter.append`); its position once it is durable."""
        item: bytes | Record
        if key is None and headers is None and timestamp is None:
            item = _record(payload)
        else:
            item = Record(payload, key=key, headers=headers, timestamp=timestamp)
        if self._trace:
            item = _traced(item)
        return self._queue.append([item])[0]

    def append_batch(
        self,
        payloads: Sequence[bytes | Record],
        *,
        producer_id: str | None = None,
        sequence: int | None = None,
    ) -> list[LogPosition]:
        """Append several records (bytes, or :class:`walkit.Record`), in order; their
        positions once all are durable. With ``producer_id`` and ``sequence``, idempotent as
        :meth:`walkit.LogWriter.append_batch`."""
        if isinstance(payloads, bytes | bytearray | memoryview | str):
            raise InvalidArgumentError("append_batch takes a sequence of payloads")
        records = [_record(p) for p in payloads]
        if self._trace:
            records = [_traced(r) for r in records]
        if producer_id is None and sequence is None:
            return self._queue.append(records) if records else []

        async def tagged() -> list[LogPosition]:
            return await self._writer._append_batch(records, producer_id, sequence, trace=False)

        return self._thread.call(tagged)

    def truncate(self, pos: LogPosition | str) -> None:
        self._thread.call(self._writer.truncate, pos)

    def close(self) -> None:
        """Wait for the appends in flight and close the writer (idempotent)."""
        self.__exit__(None, None, None)

    def __enter__(self) -> LogWriter:
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

    async def next(self, *, timeout: float | None = None) -> LogRecord | None: ...

    def _buffered(self) -> LogRecord | None: ...


class _Records:
    """A plain iterator over the records of an async reader or consumer. Records come from
    the loop a chunk at a time, so catching up costs one call into the loop per chunk, not per
    record; ``timeout`` bounds each wait (iteration stops when nothing comes within it, and may
    start again later from where it stopped)."""

    def __init__(self, thread: LoopThread, source: _RecordSource, timeout: float | None) -> None:
        self._thread = thread
        self._source = source
        self._timeout = timeout
        self._buffer: collections.deque[LogRecord] = collections.deque()

    def __iter__(self) -> Iterator[LogRecord]:
        return self

    def __next__(self) -> LogRecord:
        record = self.next(timeout=self._timeout)
        if record is None:
            raise StopIteration
        return record

    def next(self, *, timeout: float | None = None) -> LogRecord | None:
        """The next record; None at ``end``, when not following and nothing more is readable
        now, or after ``timeout`` seconds without a record."""
        if not self._buffer:
            self._buffer.extend(self._thread.call(self._fill, timeout))
            if not self._buffer:
                return None
        return self._buffer.popleft()

    async def _fill(self, timeout: float | None) -> list[LogRecord]:
        first = await self._source.next(timeout=timeout)
        if first is None:
            return []
        records = [first]
        take = self._source._buffered
        while len(records) < _READ_CHUNK and (record := take()) is not None:
            records.append(record)
        return records


@final
class LogReader(_Records):
    """A plain iterator over a log's records (from :meth:`Log.reader`).

    With ``follow`` it waits for new records at the end of the log; ``timeout`` bounds each
    wait: when no record comes within it, iteration stops (a ``for`` loop ends), and the
    reader can be iterated again later from where it stopped. :meth:`next` is the one-record
    form. Records come from the loop a chunk at a time, so a reader catching up costs one
    call into the loop per chunk, not per record.
    """

    def __init__(self, thread: LoopThread, reader: walkit.LogReader, timeout: float | None) -> None:
        super().__init__(thread, reader, timeout)
        self._reader = reader

    def __repr__(self) -> str:
        return f"walkit.sync.{self._reader!r}"

    @property
    def position(self) -> LogPosition:
        """Where the next record will be looked for."""
        return self._buffer[0].position if self._buffer else self._reader.position


@final
class LogConsumer(_Records):
    """:class:`walkit.LogConsumer`, blocking: a plain iterator of the records after the
    consumer's committed position (from :meth:`Log.consumer`), with :meth:`commit`.
    ``timeout`` bounds each wait as for :class:`LogReader`; records come from the loop a chunk
    at a time. ``next()`` raises ConsumerBackloggedError as the async one."""

    def __init__(
        self, thread: LoopThread, consumer: walkit.LogConsumer, timeout: float | None
    ) -> None:
        super().__init__(thread, consumer, timeout)
        self._consumer = consumer
        self.name = consumer.name

    def __repr__(self) -> str:
        return f"walkit.sync.{self._consumer!r}"

    @property
    def async_consumer(self) -> walkit.LogConsumer:
        return self._consumer

    @property
    def committed(self) -> LogPosition | None:
        """Where the consumer resumes, as last stored or read (None before registration)."""
        return self._consumer.committed

    @property
    def position(self) -> LogPosition | None:
        """Where the next record will be looked for."""
        return self._buffer[0].position if self._buffer else self._consumer.position

    def register(self) -> LogPosition:
        """Create the consumer unless it exists; where it resumes."""
        return self._thread.call(self._consumer.register)

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
        self.position = snapshot.position
        self.ledger_id = snapshot.ledger_id
        self.size = snapshot.size
        self.crc32c = snapshot.crc32c
        self.time_ms = snapshot.time_ms

    def __repr__(self) -> str:
        return f"walkit.sync.{self._snapshot!r}"

    def read(self) -> bytes:
        """The snapshot's bytes (checked against the size and CRC32C saved with it)."""
        return self._thread.call(self._snapshot.read)


async def _from_thread(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    """A caller's iterable of chunks, pulled in a worker thread (it may read a file)."""
    iterator = iter(chunks)
    while True:
        chunk = await anyio.to_thread.run_sync(next, iterator, None)
        if chunk is None:
            return
        yield chunk


@final
class Log:
    """:class:`walkit.Log`, blocking: ``with walkit.sync.Log.open(client, "orders") as log``."""

    def __init__(
        self,
        client: Client,
        log: walkit.Log,
        exit_stack: AbstractContextManager[walkit.Log] | None = None,
    ) -> None:
        self._client = client
        self._thread = client.thread
        self._log = log
        self._exit = exit_stack
        self.name = log.name

    def __repr__(self) -> str:
        return f"walkit.sync.{self._log!r}"

    @staticmethod
    def open(client: Client, name: str, **options: Any) -> Log:
        """Open log ``name`` (created if missing) with :meth:`walkit.Log.open`'s options."""
        cm = client.thread.context(walkit.Log.open(client.async_client, name, **options))
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

    @property
    def async_log(self) -> walkit.Log:
        return self._log

    @property
    def options(self) -> walkit.LogOptions:
        return self._log.options

    def writer(self) -> LogWriter:
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
    ) -> LogReader:
        """Records from ``start`` as a plain iterator (see :class:`LogReader` for
        ``timeout``); the other arguments are :meth:`walkit.Log.reader`'s."""

        def make() -> walkit.LogReader:
            return self._log.reader(start, end=end, follow=follow, skip_truncated=skip_truncated)

        return LogReader(self._thread, self._thread.run_sync(make), timeout)

    def consumer(
        self,
        name: str,
        *,
        start: LogPosition | str = LogPosition.EARLIEST,
        follow: bool = True,
        timeout: float | None = None,
    ) -> LogConsumer:
        """The durable consumer ``name`` as a plain iterator with ``commit()`` (see
        :class:`LogReader` for ``timeout``); the other arguments are
        :meth:`walkit.Log.consumer`'s."""

        def make() -> walkit.LogConsumer:
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

    def apply_retention(self, **limits: Any) -> Any:
        """:meth:`walkit.Log.apply_retention`, blocking."""

        async def apply() -> Any:
            return await self._log.apply_retention(**limits)

        return self._thread.call(apply)

    def offload(self) -> int:
        """:meth:`walkit.Log.offload`, blocking."""
        return self._thread.call(self._log.offload)

    def close(self) -> None:
        cm, self._exit = self._exit, None
        if cm is not None:
            cm.__exit__(None, None, None)
        else:
            self._thread.call(self._log.aclose)

    def __enter__(self) -> Log:
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
