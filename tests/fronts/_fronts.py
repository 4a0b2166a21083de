"""The three fronts a scenario runs on: trio, asyncio, and walkit.sync from threads.

A scenario is an async function written against the async API's shapes. Under ``trio`` and
``asyncio`` it gets the async API itself (``anyio.run`` picks the loop). Under ``sync`` it
runs on a trio loop too, but every walkit call goes through :mod:`walkit.sync` from a worker
thread (``anyio.to_thread``): a threaded program's calls, with the blocking API's own client,
event loop thread and queues, seen through thin async views so one scenario serves all three.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final, Protocol

import anyio

import walkit
import walkit.sync
from walkit import LogPosition, LogRecord

FRONTS: Final = ("trio", "asyncio", "sync")


async def _in_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


class Writer(Protocol):
    async def append(self, payload: bytes, **extras: Any) -> LogPosition: ...
    async def append_batch(
        self, payloads: Sequence[bytes | walkit.Record]
    ) -> list[LogPosition]: ...
    async def truncate(self, pos: LogPosition) -> None: ...


class Reader(Protocol):
    async def next(self, *, timeout: float | None = None) -> LogRecord | None: ...


class Log(Protocol):
    def writer(self) -> Any: ...
    def reader(
        self, start: LogPosition | str = ..., *, end: LogPosition | None = ..., follow: bool = ...
    ) -> Any: ...
    async def save_snapshot(self, pos: LogPosition, data: bytes) -> Any: ...
    async def latest_snapshot(self) -> Any: ...
    async def position_at(self, timestamp: int) -> LogPosition: ...


class _SyncWriter:
    def __init__(self, writer: walkit.sync.LogWriter) -> None:
        self.sync = writer

    async def append(self, payload: bytes, **extras: Any) -> LogPosition:
        return await _in_thread(self.sync.append, payload, **extras)  # type: ignore[no-any-return]

    async def append_batch(self, payloads: Sequence[bytes | walkit.Record]) -> list[LogPosition]:
        return await _in_thread(self.sync.append_batch, payloads)  # type: ignore[no-any-return]

    async def truncate(self, pos: LogPosition) -> None:
        await _in_thread(self.sync.truncate, pos)


class _SyncReader:
    def __init__(self, reader: walkit.sync.LogReader) -> None:
        self.sync = reader

    async def next(self, *, timeout: float | None = None) -> LogRecord | None:
        return await _in_thread(self.sync.next, timeout=timeout)  # type: ignore[no-any-return]

    def __aiter__(self) -> _SyncReader:
        return self

    async def __anext__(self) -> LogRecord:
        record = await self.next()
        if record is None:
            raise StopAsyncIteration
        return record


class _SyncConsumer:
    def __init__(self, consumer: walkit.sync.LogConsumer) -> None:
        self.sync = consumer

    async def register(self) -> LogPosition:
        return await _in_thread(self.sync.register)  # type: ignore[no-any-return]

    async def next(self, *, timeout: float | None = None) -> LogRecord | None:
        return await _in_thread(self.sync.next, timeout=timeout)  # type: ignore[no-any-return]

    async def commit(self, pos: LogPosition) -> None:
        await _in_thread(self.sync.commit, pos)

    async def skip_lost(self) -> LogPosition:
        return await _in_thread(self.sync.skip_lost)  # type: ignore[no-any-return]


class _SyncSnapshot:
    def __init__(self, snapshot: walkit.sync.Snapshot) -> None:
        self.sync = snapshot
        self.position = snapshot.position

    async def read(self) -> bytes:
        return await _in_thread(self.sync.read)  # type: ignore[no-any-return]


class _SyncLog:
    def __init__(self, log: walkit.sync.Log) -> None:
        self.sync = log

    @asynccontextmanager
    async def writer(self) -> AsyncIterator[_SyncWriter]:
        writer = await _in_thread(self.sync.writer)
        try:
            yield _SyncWriter(writer)
        finally:
            with anyio.CancelScope(shield=True):
                await _in_thread(writer.close)

    def reader(self, start: LogPosition | str = LogPosition.EARLIEST, **kwargs: Any) -> _SyncReader:
        # (a plain call: it needs the sync client's loop, not this one)
        return _SyncReader(self.sync.reader(start, **kwargs))

    def consumer(self, name: str, **kwargs: Any) -> _SyncConsumer:
        return _SyncConsumer(self.sync.consumer(name, **kwargs))

    async def consumers(self) -> list[walkit.log.ConsumerInfo]:
        return await _in_thread(self.sync.consumers)  # type: ignore[no-any-return]

    async def apply_retention(self, **limits: Any) -> Any:
        return await _in_thread(self.sync.apply_retention, **limits)

    async def save_snapshot(self, pos: LogPosition, data: bytes) -> _SyncSnapshot:
        return _SyncSnapshot(await _in_thread(self.sync.save_snapshot, pos, data))

    async def latest_snapshot(self) -> _SyncSnapshot | None:
        found = await _in_thread(self.sync.latest_snapshot)
        return None if found is None else _SyncSnapshot(found)

    async def position_at(self, timestamp: int) -> LogPosition:
        return await _in_thread(self.sync.position_at, timestamp)  # type: ignore[no-any-return]


class _SyncLedgerWriter:
    def __init__(self, writer: walkit.sync.LedgerWriter) -> None:
        self.sync = writer
        self.id = writer.id

    async def append(self, payload: bytes) -> int:
        return await _in_thread(self.sync.append, payload)  # type: ignore[no-any-return]

    async def close(self) -> None:
        await _in_thread(self.sync.close)


class _SyncLedgerReader:
    def __init__(self, reader: walkit.sync.LedgerReader) -> None:
        self.sync = reader

    @property
    def last_add_confirmed(self) -> int:
        return self.sync.last_add_confirmed

    async def read(self, first: int, last: int) -> list[walkit.Entry]:
        return await _in_thread(self.sync.read, first, last)  # type: ignore[no-any-return]


class _SyncClient:
    def __init__(self, client: walkit.sync.Client) -> None:
        self.sync = client

    async def create_ledger(self, *args: Any, **kwargs: Any) -> _SyncLedgerWriter:
        return _SyncLedgerWriter(await _in_thread(self.sync.create_ledger, *args, **kwargs))

    async def open_ledger(self, *args: Any, **kwargs: Any) -> _SyncLedgerReader:
        return _SyncLedgerReader(await _in_thread(self.sync.open_ledger, *args, **kwargs))


class Front:
    """How a scenario reaches walkit on one front: ``connect`` and ``open_log``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"Front({self.name})"

    @asynccontextmanager
    async def connect(self, url: str, **options: Any) -> AsyncIterator[Any]:
        if self.name != "sync":
            async with walkit.Client.connect(url, **options) as client:
                yield client
            return
        client = await _in_thread(walkit.sync.Client.connect, url, **options)
        try:
            yield _SyncClient(client)
        finally:
            with anyio.CancelScope(shield=True):
                await _in_thread(client.close)

    @asynccontextmanager
    async def open_log(self, client: Any, name: str, **options: Any) -> AsyncIterator[Any]:
        if self.name != "sync":
            async with walkit.Log.open(client, name, **options) as log:
                yield log
            return
        log = await _in_thread(walkit.sync.Log.open, client.sync, name, **options)
        try:
            yield _SyncLog(log)
        finally:
            with anyio.CancelScope(shield=True):
                await _in_thread(log.close)

    @property
    def backend(self) -> str:
        """The loop the scenario itself runs on."""
        return "asyncio" if self.name == "asyncio" else "trio"

    def run(self, scenario: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        return anyio.run(scenario, self, *args, backend=self.backend)
