"""``sqlite:///abs/path.db``: the embedded store; processes on one host share the file.

The file is in WAL mode with ``synchronous=FULL`` (this is the durability of the metadata) and
a busy timeout, so many processes can use it at once. Every write is one ``BEGIN IMMEDIATE``
transaction, which makes compare-and-set atomic across processes.

Sessions: each store inserts a row in ``sessions`` and a background task pushes its expiry
forward every third of the session timeout. Ephemeral nodes name their session. Whoever notices
a session past its expiry (any read, write, heartbeat or watch poll, in any process) deletes it
and its ephemerals, so a killed process's nodes vanish about one session timeout after it died.
Sessions span processes, so this is the one place that uses the wall clock (injected).

Watches: every change appends a row to ``changes``; a background task per store looks for new
rows (one indexed read on the event loop's thread, which never waits) and, when there are some, reads
them in the worker thread and turns them into events. It looks when the file was written (Linux
inotify, any process: ``_file_changes.py``; at most every ``_BUSY_GAP`` or ``poll_interval``
seconds, the shorter, and for about a second after, at doubling gaps), when the first session is
due to expire (to reap it), and at the latest every ``_QUIET_MAX`` seconds (what a lost inotify
event can cost). Without inotify it looks every ``poll_interval`` seconds.
"""

from __future__ import annotations

import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, final

import anyio

from walkit._logging import get_logger
from walkit._loop import current_loop
from walkit.errors import (
    ClientClosedError,
    InvalidArgumentError,
    MetadataStoreError,
    SessionExpiredError,
)
from walkit.metadata._file_changes import FileChanges, subscribe
from walkit.metadata._paths import (
    ROOT,
    check_id_value,
    check_name,
    check_path,
    check_value,
    check_version,
)
from walkit.metadata._sqlite_connection import SqliteConnection
from walkit.metadata._store import (
    MetadataStore,
    StoredNode,
    Versioned,
    WatchEvent,
    WatchEventKind,
)
from walkit.metadata._watch import WatchStream, catch_up_event, event_for

logger = get_logger(__name__)

T = TypeVar("T")

#: The longest a watch poller sleeps with inotify and nothing written: what a lost inotify
#: event can cost.
_QUIET_MAX = 1.0
#: With inotify, the least time between two looks (a file written all the time).
_BUSY_GAP = 0.02
#: After a subscription or a wake-up by a write, looks go on at gaps doubling from _BUSY_GAP
#: up to this one (``_watch_changes``): 6 looks over about 1.3 s.
_RECHECK_GAP_MAX = 0.64


@final
class SqliteMetadataStore(MetadataStore):
    """A session on a sqlite metadata file. Open with ``open_metadata_store``."""

    def __init__(
        self,
        url: str,
        path: str,
        *,
        session_timeout: float,
        clock: Callable[[], float],
        busy_timeout: float,
        poll_interval: float,
    ) -> None:
        self.url = url
        self.path = path
        self.session_timeout = session_timeout
        self._busy_timeout = busy_timeout
        self._poll_interval = poll_interval
        self._db = SqliteConnection(
            url, path, session_timeout=session_timeout, clock=clock, busy_timeout=busy_timeout
        )
        self._loop = current_loop()
        self._what = f"metadata store {url}"
        # One connection, used by one thread at a time: the limiter queues the calls, the lock
        # holds a call whose caller stopped waiting (asyncio's cancellation cannot be shielded).
        self._limiter = anyio.CapacityLimiter(1)
        self._connection = threading.Lock()
        # Where the change log ended when each watch began: older changes are not its.
        self._starts: weakref.WeakKeyDictionary[WatchStream, int] = weakref.WeakKeyDictionary()
        self._streams: weakref.WeakSet[WatchStream] = weakref.WeakSet()
        self._scopes: list[anyio.CancelScope] = []
        self._poller_started = False
        self._closed = False
        self._expired = False

    @classmethod
    async def open(
        cls,
        url: str,
        path: str,
        *,
        session_timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
        busy_timeout: float = 10.0,
        poll_interval: float = 0.05,
    ) -> SqliteMetadataStore:
        store = cls(
            url,
            path,
            session_timeout=session_timeout,
            clock=clock,
            busy_timeout=busy_timeout,
            poll_interval=poll_interval,
        )
        await store._call(store._db.open)
        store._loop.spawn_system_task(store._heartbeat_loop, f"walkit-sqlite-heartbeat {path}")
        logger.debug("metadata_store_opened", url=url, session=store.session_id)
        return store

    @property
    def session_id(self) -> int:
        return self._db.session_id

    # --- the MetadataStore calls ----------------------------------------------------------

    async def get(self, path: str) -> Versioned:
        path = check_path(path)
        return await self._public(self._db.get, path)

    async def get_node(self, path: str) -> StoredNode:
        path = check_path(path)
        return await self._public(self._db.get_node, path)

    async def children(self, path: str) -> list[str]:
        path = check_path(path)
        return await self._public(self._db.children, path)

    async def exists(self, path: str) -> int | None:
        path = check_path(path)
        return await self._public(self._db.exists, path)

    async def create(
        self, path: str, value: bytes, *, ephemeral: bool = False, make_parents: bool = True
    ) -> int:
        path = check_path(path)
        data = check_value(value)
        return await self._public(self._db.create, path, data, bool(ephemeral), make_parents)

    async def set(self, path: str, value: bytes, version: int) -> int:
        path = check_path(path)
        data = check_value(value)
        check_version(version)
        return await self._public(self._db.set, path, data, version)

    async def delete(self, path: str, version: int | None = None) -> None:
        path = check_path(path)
        check_version(version, allow_none=True)
        if path == ROOT:
            raise InvalidArgumentError("cannot delete the root node")
        await self._public(self._db.delete, path, version)

    async def next_id(self, name: str = "ledger") -> int:
        check_name(name, what="id counter")
        return await self._public(self._db.next_id, name)

    async def id_counters(self) -> dict[str, int]:
        return await self._public(self._db.id_counters)

    async def advance_id_counter(self, name: str, value: int) -> None:
        check_name(name, what="id counter")
        check_id_value(value)
        await self._public(self._db.advance_id_counter, name, value)

    def watch(self, path: str, *, children: bool = False) -> WatchStream:
        return self.watch_many([(path, children)])

    def watch_many(self, targets: Iterable[tuple[str, bool]]) -> WatchStream:
        self._loop.check(self._what)
        checked = [(check_path(path), bool(children)) for path, children in targets]
        stream = WatchStream(checked, on_close=self._streams.discard)
        if self._expired:
            stream.finish(WatchEvent(WatchEventKind.SESSION_EXPIRED, ROOT))
            return stream
        if self._closed:
            stream.finish()
            return stream
        self._streams.add(stream)
        self._starts[stream] = self._db.peek_last_seq()
        if not self._poller_started:
            self._poller_started = True
            self._loop.spawn_system_task(self._poll_loop, f"walkit-sqlite-watch {self.path}")
        return stream

    async def expire_session(self) -> None:
        """Delete this session and its ephemerals now, as if it had timed out."""
        self._loop.check(self._what)
        if self._closed or self._expired:
            await self._loop.checkpoint()
            return
        await self._call(self._db.end_session)
        self._on_expired()

    async def aclose(self) -> None:
        self._loop.check(self._what)
        if self._closed:
            await self._loop.checkpoint()
            return
        self._closed = True
        for scope in self._scopes:
            scope.cancel()
        try:
            # Shielded: closing from a cancelled task should still free the session's
            # ephemerals.
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._busy_timeout + 1):
                if not self._expired:
                    try:
                        await self._call(self._db.end_session)
                    except MetadataStoreError as exc:
                        logger.warning("metadata_session_end_failed", url=self.url, error=str(exc))
                await self._call(self._db.close)
        finally:
            for stream in list(self._streams):
                stream.finish()

    # --- event loop side helpers ----------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await anyio.to_thread.run_sync(self._locked, fn, args, limiter=self._limiter)
        except sqlite3.Error as exc:
            raise MetadataStoreError(f"sqlite metadata store {self.path}: {exc}") from exc

    def _locked(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:  # in a worker thread
        with self._connection:
            return fn(*args)

    async def _public(self, fn: Callable[..., T], *args: Any) -> T:
        self._loop.check(self._what)
        if self._closed:
            await self._loop.checkpoint()
            raise ClientClosedError(f"metadata store {self.url} is closed")
        if self._expired:
            await self._loop.checkpoint()
            raise SessionExpiredError(f"metadata session {self.session_id} on {self.url} expired")
        try:
            return await self._call(fn, *args)
        except SessionExpiredError:
            self._on_expired()
            raise

    def _on_expired(self) -> None:
        if self._expired or self._closed:
            return
        self._expired = True
        for scope in self._scopes:
            scope.cancel()
        logger.warning("metadata_session_expired", url=self.url, session=self.session_id)
        for stream in list(self._streams):
            stream.finish(WatchEvent(WatchEventKind.SESSION_EXPIRED, ROOT))

    async def _heartbeat_loop(self) -> None:
        scope = anyio.CancelScope()
        self._scopes.append(scope)
        if self._closed or self._expired:
            return
        with scope:
            while True:
                await anyio.sleep(self.session_timeout / 3)
                try:
                    alive = await self._call(self._db.heartbeat)
                except Exception as exc:  # a system task must not raise; try again next time
                    logger.warning("metadata_heartbeat_failed", url=self.url, error=repr(exc))
                    continue
                if not alive:
                    self._on_expired()
                    return

    async def _poll_loop(self) -> None:
        scope = anyio.CancelScope()
        self._scopes.append(scope)
        if self._closed or self._expired:
            return
        changes = subscribe(self.path)
        try:
            with scope:
                await self._watch_changes(changes)
        finally:
            if changes is not None:
                changes.close()

    async def _watch_changes(self, changes: FileChanges | None) -> None:
        db = self._db
        # A write is visible to a look only once its writer has published it in the WAL
        # index, shared memory that inotify does not see, after the -wal file's write that
        # inotify reports (and a write made before the subscription reports nothing). So
        # after the subscription, and after each wake-up, look again a while before sleeping
        # on the file, at gaps doubling from the least one (a cheap peek each). Every
        # process's session heartbeat writes the file and wakes every watcher: at a fixed
        # gap, an idle bookie looked 50 times a second.
        floor = min(self._poll_interval, _BUSY_GAP)
        gap = floor  # until the next look; doubles while looks find nothing
        while True:
            usable = changes is not None and not changes.broken
            if changes is not None and gap <= _RECHECK_GAP_MAX:
                changes.seen()  # (a later look covers what was written until this one)
            if db.poll_due():
                try:
                    rows, missed = await self._call(db.poll)
                except Exception as exc:  # a system task must not raise; try again next time
                    logger.warning("metadata_watch_poll_failed", url=self.url, error=repr(exc))
                else:
                    self._dispatch(rows, missed)
                gap = floor  # the file is being written: more may come
            elif changes is not None and not changes.broken and gap > _RECHECK_GAP_MAX:
                # Nothing new for a while: sleep until the file is written, or the first
                # session may expire (to reap it), or at the latest _QUIET_MAX.
                quiet = db.until_first_expiry()
                limit = _QUIET_MAX if quiet is None else min(quiet, _QUIET_MAX)
                with anyio.move_on_after(limit) as slept:
                    await changes.wait()
                if not slept.cancelled_caught:
                    gap = floor
                continue
            if not usable:  # without inotify, poll_interval is the polling period
                await anyio.sleep(self._poll_interval)
                continue
            await anyio.sleep(gap)
            gap *= 2

    def _dispatch(self, rows: list[tuple[int, str, str]], missed: int) -> None:
        for stream in list(self._streams):
            start = self._starts.get(stream, 0)
            for target, children in stream.targets:
                if missed > start:  # pruned before we read them: the reader must re-read
                    stream.push(catch_up_event(target, children))
                for seq, path, kind in rows:
                    if seq <= start:
                        continue
                    event = event_for(target, children, path, kind)  # type: ignore[arg-type]
                    if event is not None:
                        stream.push(event)
