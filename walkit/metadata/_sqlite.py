"""``sqlite:///abs/path.db``: the embedded store; processes on one host share the file.

The file is in WAL mode with ``synchronous=FULL`` (this is the durability of the metadata) and
a busy timeout, so many processes can use it at once. Every write is one ``BEGIN IMMEDIATE``
transaction, which makes compare-and-set atomic across processes.

Sessions: each store inserts a row in ``sessions`` and a background task pushes its expiry
forward every third of the session timeout. Ephemeral nodes name their session. Whoever notices
a session past its expiry (any read, write, heartbeat or watch poll, in any process) deletes it
and its ephemerals, so a killed process's nodes vanish about one session timeout after it died.
Sessions span processes, so this is the one place that uses the wall clock (injected).

Watches: every change appends a row to ``changes``; a background task per store polls for new
rows every ``poll_interval`` seconds (one indexed query) and turns them into events.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sqlite3
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar, final

import structlog
import trio

from walkit.errors import (
    ClientClosedError,
    ConfigurationError,
    InvalidArgumentError,
    MetadataStoreError,
    MetadataVersionError,
    NodeExistsError,
    NodeNotEmptyError,
    NoSuchNodeError,
    SessionExpiredError,
)
from walkit.metadata._paths import (
    ROOT,
    check_name,
    check_path,
    check_value,
    check_version,
    join,
    parent_of,
)
from walkit.metadata._store import MetadataStore, Versioned, WatchEvent, WatchEventKind
from walkit.metadata._watch import ChangeKind, WatchStream, catch_up_event, event_for

logger = structlog.get_logger()

T = TypeVar("T")

SCHEMA_VERSION = 1
_MAX_ID = 2**63 - 1
#: Keep about this many change rows; a watcher further behind gets catch-up events instead.
_CHANGES_KEPT = 4096

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS nodes (
        path TEXT PRIMARY KEY, parent TEXT NOT NULL, value BLOB NOT NULL,
        version INTEGER NOT NULL, owner INTEGER) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS nodes_by_parent ON nodes (parent)",
    "CREATE INDEX IF NOT EXISTS nodes_by_owner ON nodes (owner) WHERE owner IS NOT NULL",
    """CREATE TABLE IF NOT EXISTS sessions (
        id INTEGER PRIMARY KEY AUTOINCREMENT, expires REAL NOT NULL, timeout REAL NOT NULL,
        pid INTEGER NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS sessions_by_expiry ON sessions (expires)",
    """CREATE TABLE IF NOT EXISTS counters (
        name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS changes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT, path TEXT NOT NULL, kind TEXT NOT NULL)""",
    "INSERT OR IGNORE INTO nodes VALUES ('/', '', x'', 0, NULL)",
)


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
        self._clock = clock
        self._busy_timeout = busy_timeout
        self._poll_interval = poll_interval
        self._limiter = trio.CapacityLimiter(1)  # one connection, used by one thread at a time
        self._conn: sqlite3.Connection | None = None
        # A second connection, only for the one quick read a new watch makes on the trio thread.
        self._peek: sqlite3.Connection | None = None
        self._starts: weakref.WeakKeyDictionary[WatchStream, int] = weakref.WeakKeyDictionary()
        self.session_id = 0
        self._last_seq = 0
        self._streams: weakref.WeakSet[WatchStream] = weakref.WeakSet()
        self._scopes: list[trio.CancelScope] = []
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
        await store._call(store._op_open)
        trio.lowlevel.spawn_system_task(
            store._heartbeat_loop, name=f"walkit-sqlite-heartbeat {path}"
        )
        logger.debug("metadata_store_opened", url=url, session=store.session_id)
        return store

    # --- the MetadataStore calls ----------------------------------------------------------

    async def get(self, path: str) -> Versioned:
        path = check_path(path)
        return await self._public(self._op_get, path)

    async def children(self, path: str) -> list[str]:
        path = check_path(path)
        return await self._public(self._op_children, path)

    async def exists(self, path: str) -> int | None:
        path = check_path(path)
        return await self._public(self._op_exists, path)

    async def create(
        self, path: str, value: bytes, *, ephemeral: bool = False, make_parents: bool = True
    ) -> int:
        path = check_path(path)
        data = check_value(value)
        return await self._public(self._op_create, path, data, bool(ephemeral), make_parents)

    async def set(self, path: str, value: bytes, version: int) -> int:
        path = check_path(path)
        data = check_value(value)
        check_version(version)
        return await self._public(self._op_set, path, data, version)

    async def delete(self, path: str, version: int | None = None) -> None:
        path = check_path(path)
        check_version(version, allow_none=True)
        if path == ROOT:
            raise InvalidArgumentError("cannot delete the root node")
        await self._public(self._op_delete, path, version)

    async def next_id(self, name: str = "ledger") -> int:
        check_name(name, what="id counter")
        return await self._public(self._op_next_id, name)

    def watch(self, path: str, *, children: bool = False) -> WatchStream:
        return self.watch_many([(path, children)])

    def watch_many(self, targets: Iterable[tuple[str, bool]]) -> WatchStream:
        checked = [(check_path(path), bool(children)) for path, children in targets]
        stream = WatchStream(checked, on_close=self._streams.discard)
        if self._expired:
            stream.finish(WatchEvent(WatchEventKind.SESSION_EXPIRED, ROOT))
            return stream
        if self._closed:
            stream.finish()
            return stream
        self._streams.add(stream)
        # Changes up to now are not this watch's: note where the change log ends (in WAL mode
        # this read never waits for writers).
        try:
            assert self._peek is not None
            (start,) = self._peek.execute("SELECT coalesce(max(seq), 0) FROM changes").fetchone()
        except sqlite3.Error:
            start = self._last_seq  # at worst, a few extra events
        self._starts[stream] = int(start)
        if not self._poller_started:
            self._poller_started = True
            trio.lowlevel.spawn_system_task(
                self._poll_loop, name=f"walkit-sqlite-watch {self.path}"
            )
        return stream

    async def expire_session(self) -> None:
        """Delete this session and its ephemerals now, as if it had timed out."""
        if self._closed or self._expired:
            await trio.lowlevel.checkpoint()
            return
        await self._call(self._op_end_session)
        self._on_expired()

    async def aclose(self) -> None:
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        for scope in self._scopes:
            scope.cancel()
        # Shielded: closing from a cancelled task should still free the session's ephemerals.
        with trio.CancelScope(shield=True), trio.move_on_after(self._busy_timeout + 1):
            if not self._expired:
                try:
                    await self._call(self._op_end_session)
                except MetadataStoreError as exc:
                    logger.warning("metadata_session_end_failed", url=self.url, error=str(exc))
            await self._call(self._op_close)
        for stream in list(self._streams):
            stream.finish()

    # --- trio side helpers ----------------------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        try:
            return await trio.to_thread.run_sync(
                functools.partial(fn, *args), limiter=self._limiter
            )
        except sqlite3.Error as exc:
            raise MetadataStoreError(f"sqlite metadata store {self.path}: {exc}") from exc

    async def _public(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            await trio.lowlevel.checkpoint()
            raise ClientClosedError(f"metadata store {self.url} is closed")
        if self._expired:
            await trio.lowlevel.checkpoint()
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
        scope = trio.CancelScope()
        self._scopes.append(scope)
        if self._closed or self._expired:
            return
        with scope:
            while True:
                await trio.sleep(self.session_timeout / 3)
                try:
                    alive = await self._call(self._op_heartbeat)
                except (MetadataStoreError, OSError) as exc:
                    logger.warning("metadata_heartbeat_failed", url=self.url, error=str(exc))
                    continue
                if not alive:
                    self._on_expired()
                    return

    async def _poll_loop(self) -> None:
        scope = trio.CancelScope()
        self._scopes.append(scope)
        if self._closed or self._expired:
            return
        with scope:
            while True:
                await trio.sleep(self._poll_interval)
                try:
                    rows, missed = await self._call(self._op_poll)
                except (MetadataStoreError, OSError) as exc:
                    logger.warning("metadata_watch_poll_failed", url=self.url, error=str(exc))
                    continue
                self._dispatch(rows, missed)

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

    # --- worker thread side (only ever one at a time, under the limiter) --------------------

    @property
    def _db(self) -> sqlite3.Connection:
        assert self._conn is not None
        return self._conn

    def _op_open(self) -> None:
        directory = os.path.dirname(self.path)
        if not os.path.isdir(directory):
            raise MetadataStoreError(
                f"cannot open sqlite metadata store {self.path}: directory {directory} does not exist"
            )
        conn = sqlite3.connect(
            self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )
        self._conn = conn
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
            mode = self._enable_wal(conn)
            if str(mode).lower() != "wal":
                raise MetadataStoreError(f"sqlite metadata store {self.path}: cannot use WAL mode")
            conn.execute("PRAGMA synchronous = FULL")
            with self._write(reap=False, check_session=False) as db:
                (version,) = db.execute("PRAGMA user_version").fetchone()
                if version > SCHEMA_VERSION:
                    raise ConfigurationError(
                        f"sqlite metadata store {self.path} has schema {version}, newer than "
                        f"this walkit ({SCHEMA_VERSION})"
                    )
                for statement in _SCHEMA:
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            with self._write(check_session=False) as db:
                cursor = db.execute(
                    "INSERT INTO sessions (expires, timeout, pid) VALUES (?, ?, ?)",
                    (self._clock() + self.session_timeout, self.session_timeout, os.getpid()),
                )
                assert cursor.lastrowid is not None
                self.session_id = cursor.lastrowid
                (last,) = db.execute("SELECT coalesce(max(seq), 0) FROM changes").fetchone()
                self._last_seq = last
            self._peek = sqlite3.connect(
                self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
            )
        except BaseException:
            conn.close()
            self._conn = None
            raise

    def _enable_wal(self, conn: sqlite3.Connection) -> str:
        # Switching a fresh file to WAL needs an exclusive lock, and sqlite does not wait for
        # it (deadlock avoidance) while another opener holds a write lock: retry for a while.
        attempts = max(1, int(self._busy_timeout / 0.02))
        for attempt in range(attempts):
            try:
                (mode,) = conn.execute("PRAGMA journal_mode = WAL").fetchone()
                return str(mode)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or attempt == attempts - 1:
                    raise
                time.sleep(0.02)  # a worker thread: blocking here is fine
        raise AssertionError("unreachable")

    def _op_close(self) -> None:
        for conn in (self._conn, self._peek):
            if conn is not None:
                conn.close()
        self._conn = self._peek = None

    @contextlib.contextmanager
    def _write(
        self, *, reap: bool = True, check_session: bool = True
    ) -> Iterator[sqlite3.Connection]:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            if reap:
                self._reap(db)
            if (
                check_session
                and not db.execute(
                    "SELECT 1 FROM sessions WHERE id = ?", (self.session_id,)
                ).fetchone()
            ):
                db.execute("COMMIT")  # keep what the reap did
                raise SessionExpiredError(
                    f"metadata session {self.session_id} on {self.url} expired"
                )
            yield db
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        else:
            db.execute("COMMIT")

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        db = self._db
        first_expiry, alive = db.execute(
            "SELECT min(expires), (SELECT 1 FROM sessions WHERE id = ?) FROM sessions",
            (self.session_id,),
        ).fetchone()
        if not alive or (first_expiry is not None and first_expiry < self._clock()):
            with self._write():
                pass  # the reap and our own session check (which raises if it is gone)
        db.execute("BEGIN")
        try:
            yield db
        finally:
            db.execute("COMMIT")

    def _reap(self, db: sqlite3.Connection) -> None:
        now = self._clock()
        for (session,) in db.execute(
            "SELECT id FROM sessions WHERE expires < ?", (now,)
        ).fetchall():
            owned = db.execute("SELECT path FROM nodes WHERE owner = ?", (session,)).fetchall()
            for (path,) in owned:
                self._remove(db, path)
            db.execute("DELETE FROM sessions WHERE id = ?", (session,))
            logger.info("metadata_session_reaped", url=self.url, session=session, nodes=len(owned))

    def _log(self, db: sqlite3.Connection, path: str, kind: ChangeKind) -> None:
        seq = db.execute("INSERT INTO changes (path, kind) VALUES (?, ?)", (path, kind)).lastrowid
        if seq is not None and seq % 256 == 0:
            db.execute("DELETE FROM changes WHERE seq <= ?", (seq - _CHANGES_KEPT,))

    def _insert(self, db: sqlite3.Connection, path: str, value: bytes, owner: int | None) -> None:
        parent = parent_of(path)
        db.execute("INSERT INTO nodes VALUES (?, ?, ?, 0, ?)", (path, parent, value, owner))
        self._log(db, path, "created")
        self._log(db, parent, "children")

    def _remove(self, db: sqlite3.Connection, path: str) -> None:
        db.execute("DELETE FROM nodes WHERE path = ?", (path,))
        self._log(db, path, "deleted")
        self._log(db, parent_of(path), "children")

    @staticmethod
    def _row(db: sqlite3.Connection, path: str) -> tuple[bytes, int, int | None] | None:
        row = db.execute(
            "SELECT value, version, owner FROM nodes WHERE path = ?", (path,)
        ).fetchone()
        return None if row is None else (bytes(row[0]), row[1], row[2])

    def _op_get(self, path: str) -> Versioned:
        with self._read() as db:
            row = self._row(db, path)
        if row is None:
            raise NoSuchNodeError(f"metadata node {path} does not exist")
        return Versioned(row[0], row[1])

    def _op_exists(self, path: str) -> int | None:
        with self._read() as db:
            row = db.execute("SELECT version FROM nodes WHERE path = ?", (path,)).fetchone()
        return None if row is None else int(row[0])

    def _op_children(self, path: str) -> list[str]:
        with self._read() as db:
            if not db.execute("SELECT 1 FROM nodes WHERE path = ?", (path,)).fetchone():
                raise NoSuchNodeError(f"metadata node {path} does not exist")
            rows = db.execute("SELECT path FROM nodes WHERE parent = ?", (path,)).fetchall()
        prefix = len(join(path, "x")) - 1
        return sorted(child[prefix:] for (child,) in rows)

    def _op_create(self, path: str, value: bytes, ephemeral: bool, make_parents: bool) -> int:
        with self._write() as db:
            if self._row(db, path) is not None:
                raise NodeExistsError(f"metadata node {path} already exists")
            missing: list[str] = []
            anchor = parent_of(path)
            while (row := self._row(db, anchor)) is None:
                missing.append(anchor)
                anchor = parent_of(anchor)
            if missing and not make_parents:
                raise NoSuchNodeError(f"parent of {path} does not exist")
            if row[2] is not None:
                raise InvalidArgumentError(
                    f"cannot create {path}: ephemeral {anchor} cannot have children"
                )
            for ancestor in reversed(missing):
                self._insert(db, ancestor, b"", None)
            self._insert(db, path, value, self.session_id if ephemeral else None)
        return 0

    def _op_set(self, path: str, value: bytes, version: int) -> int:
        with self._write() as db:
            row = self._row(db, path)
            if row is None:
                raise NoSuchNodeError(f"metadata node {path} does not exist")
            if row[1] != version:
                raise MetadataVersionError(
                    f"metadata node {path} is at version {row[1]}, not {version}"
                )
            db.execute(
                "UPDATE nodes SET value = ?, version = ? WHERE path = ?", (value, version + 1, path)
            )
            self._log(db, path, "changed")
        return version + 1

    def _op_delete(self, path: str, version: int | None) -> None:
        with self._write() as db:
            row = self._row(db, path)
            if row is None:
                raise NoSuchNodeError(f"metadata node {path} does not exist")
            if version is not None and row[1] != version:
                raise MetadataVersionError(
                    f"metadata node {path} is at version {row[1]}, not {version}"
                )
            if db.execute("SELECT 1 FROM nodes WHERE parent = ? LIMIT 1", (path,)).fetchone():
                raise NodeNotEmptyError(f"metadata node {path} has children")
            self._remove(db, path)

    def _op_next_id(self, name: str) -> int:
        with self._write() as db:
            (value,) = db.execute(
                "INSERT INTO counters (name, value) VALUES (?, 1) "
                "ON CONFLICT (name) DO UPDATE SET value = value + 1 RETURNING value",
                (name,),
            ).fetchone()
            if value > _MAX_ID:
                raise MetadataStoreError(f"id counter {name!r} is exhausted")
        return int(value)

    def _op_heartbeat(self) -> bool:
        with self._write(check_session=False) as db:
            cursor = db.execute(
                "UPDATE sessions SET expires = ? WHERE id = ?",
                (self._clock() + self.session_timeout, self.session_id),
            )
            return cursor.rowcount == 1

    def _op_end_session(self) -> None:
        with self._write(reap=False, check_session=False) as db:
            owned = db.execute("SELECT path FROM nodes WHERE owner = ?", (self.session_id,))
            for (path,) in owned.fetchall():
                self._remove(db, path)
            db.execute("DELETE FROM sessions WHERE id = ?", (self.session_id,))

    def _op_poll(self) -> tuple[list[tuple[int, str, str]], int]:
        """New change rows, and the highest seq whose row was pruned before we read it."""
        db = self._db
        last_seq, first_expiry = db.execute(
            "SELECT (SELECT coalesce(max(seq), 0) FROM changes), (SELECT min(expires) FROM sessions)"
        ).fetchone()
        if first_expiry is not None and first_expiry < self._clock():
            with self._write(check_session=False):
                pass  # the reap; its changes are picked up right below
            (last_seq,) = db.execute("SELECT coalesce(max(seq), 0) FROM changes").fetchone()
        if last_seq <= self._last_seq:
            return [], 0
        if last_seq - self._last_seq > _CHANGES_KEPT:
            self._last_seq = last_seq
            return [], last_seq
        rows = db.execute(
            "SELECT seq, path, kind FROM changes WHERE seq > ? ORDER BY seq", (self._last_seq,)
        ).fetchall()
        missed = 0
        if not rows:
            missed = last_seq
        elif rows[0][0] != self._last_seq + 1:
            missed = rows[0][0] - 1
        self._last_seq = max(last_seq, rows[-1][0] if rows else 0)
        return rows, missed
