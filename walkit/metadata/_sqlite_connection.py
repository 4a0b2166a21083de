"""The sqlite side of the sqlite metadata store: plain blocking calls on one connection.

The store (``_sqlite``) runs every method here in its one worker thread, one at a time; nothing
here knows about the event loop. See ``_sqlite`` for the design (sessions, reaping, the change log).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator

from walkit._logging import get_logger
from walkit.errors import (
    ConfigurationError,
    InvalidArgumentError,
    MetadataStoreError,
    MetadataVersionError,
    NodeExistsError,
    NodeNotEmptyError,
    NoSuchNodeError,
    SessionExpiredError,
)
from walkit.metadata._paths import MAX_ID, join, parent_of
from walkit.metadata._store import StoredNode, Versioned
from walkit.metadata._watch import ChangeKind

logger = get_logger(__name__)

SCHEMA_VERSION = 1
#: Keep about this many change rows; a watcher further behind gets catch-up events instead.
CHANGES_KEPT = 4096

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


_POLL_DUE = (
    "SELECT (SELECT coalesce(max(seq), 0) FROM changes), (SELECT min(expires) FROM sessions)"
)


class SqliteConnection:
    """One connection (plus a read-only "peek" connection) and one session row."""

    def __init__(
        self,
        url: str,
        path: str,
        *,
        session_timeout: float,
        clock: Callable[[], float],
        busy_timeout: float,
    ) -> None:
        self.url = url
        self.path = path
        self.session_timeout = session_timeout
        self._clock = clock
        self._busy_timeout = busy_timeout
        self._conn: sqlite3.Connection | None = None
        self._peek: sqlite3.Connection | None = None
        self.session_id = 0
        #: The last change row the poller has handed out.
        self._last_seq = 0
        #: The first session expiry :meth:`poll_due` saw (wall clock; None: no session).
        self._first_expiry: float | None = None

    def peek_last_seq(self) -> int:
        """Where the change log ends now. Called on the trio thread for a new watch: a WAL
        read on its own connection, which never waits for writers."""
        if self._peek is None:
            return self._last_seq
        try:
            (last,) = self._peek.execute("SELECT coalesce(max(seq), 0) FROM changes").fetchone()
            return int(last)
        except sqlite3.Error:
            return self._last_seq  # at worst, a few extra events

    def poll_due(self) -> bool:
        """Whether :meth:`poll` has work: a change row past the last one handed out, or a
        session past its expiry (to reap). Called on the trio thread, on the peek connection:
        a WAL read that never waits, where the poll itself costs a worker-thread round trip
        (most of an idle bookie's CPU when it ran 20 times a second per store). True when it
        cannot tell."""
        peek = self._peek
        if peek is None:
            return True
        try:
            last, first_expiry = peek.execute(_POLL_DUE).fetchone()
        except sqlite3.Error:
            return True
        self._first_expiry = first_expiry
        return bool(
            last > self._last_seq or (first_expiry is not None and first_expiry < self._clock())
        )

    def until_first_expiry(self) -> float | None:
        """Seconds until the first session expiry :meth:`poll_due` last saw (a session to reap
        then, unless its owner heartbeats first); None if it saw none."""
        if self._first_expiry is None:
            return None
        return max(0.0, self._first_expiry - self._clock())

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            raise MetadataStoreError(f"sqlite metadata store {self.path} is closed")
        return self._conn

    def open(self) -> None:
        directory = os.path.dirname(self.path)
        if not os.path.isdir(directory):
            raise MetadataStoreError(
                f"cannot open sqlite metadata store {self.path}: directory {directory} does not exist"
            )
        _create_private(self.path)
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
            # timeout=0: the trio thread must never wait on it (on any hiccup the watch falls
            # back to the poller's position, which costs extra events, not missed ones).
            self._peek = sqlite3.connect(
                self.path, timeout=0, isolation_level=None, check_same_thread=False
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

    def close(self) -> None:
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
            db.execute("DELETE FROM changes WHERE seq <= ?", (seq - CHANGES_KEPT,))

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

    def get(self, path: str) -> Versioned:
        with self._read() as db:
            row = self._row(db, path)
        if row is None:
            raise NoSuchNodeError(f"metadata node {path} does not exist")
        return Versioned(row[0], row[1])

    def get_node(self, path: str) -> StoredNode:
        with self._read() as db:
            row = self._row(db, path)
        if row is None:
            raise NoSuchNodeError(f"metadata node {path} does not exist")
        return StoredNode(row[0], row[1], row[2] is not None)

    def exists(self, path: str) -> int | None:
        with self._read() as db:
            row = db.execute("SELECT version FROM nodes WHERE path = ?", (path,)).fetchone()
        return None if row is None else int(row[0])

    def children(self, path: str) -> list[str]:
        with self._read() as db:
            if not db.execute("SELECT 1 FROM nodes WHERE path = ?", (path,)).fetchone():
                raise NoSuchNodeError(f"metadata node {path} does not exist")
            rows = db.execute("SELECT path FROM nodes WHERE parent = ?", (path,)).fetchall()
        prefix = len(join(path, "x")) - 1
        return sorted(child[prefix:] for (child,) in rows)

    def create(self, path: str, value: bytes, ephemeral: bool, make_parents: bool) -> int:
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

    def set(self, path: str, value: bytes, version: int) -> int:
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

    def delete(self, path: str, version: int | None) -> None:
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

    def next_id(self, name: str) -> int:
        with self._write() as db:
            (value,) = db.execute(
                "INSERT INTO counters (name, value) VALUES (?, 1) "
                "ON CONFLICT (name) DO UPDATE SET value = value + 1 RETURNING value",
                (name,),
            ).fetchone()
            if value > MAX_ID:
                raise MetadataStoreError(f"id counter {name!r} is exhausted")
        return int(value)

    def id_counters(self) -> dict[str, int]:
        with self._read() as db:
            rows = db.execute("SELECT name, value FROM counters").fetchall()
        return {str(name): int(value) for name, value in rows}

    def advance_id_counter(self, name: str, value: int) -> None:
        with self._write() as db:
            db.execute(
                "INSERT INTO counters (name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = max(value, excluded.value)",
                (name, value),
            )

    def heartbeat(self) -> bool:
        with self._write(check_session=False) as db:
            cursor = db.execute(
                "UPDATE sessions SET expires = ? WHERE id = ?",
                (self._clock() + self.session_timeout, self.session_id),
            )
            return cursor.rowcount == 1

    def end_session(self) -> None:
        with self._write(reap=False, check_session=False) as db:
            owned = db.execute("SELECT path FROM nodes WHERE owner = ?", (self.session_id,))
            for (path,) in owned.fetchall():
                self._remove(db, path)
            db.execute("DELETE FROM sessions WHERE id = ?", (self.session_id,))

    def poll(self) -> tuple[list[tuple[int, str, str]], int]:
        """New change rows, and the highest seq whose row was pruned before we read it."""
        db = self._db
        last_seq, first_expiry = db.execute(_POLL_DUE).fetchone()
        if first_expiry is not None and first_expiry < self._clock():
            with self._write(check_session=False):
                pass  # the reap; its changes are picked up right below
            (last_seq,) = db.execute("SELECT coalesce(max(seq), 0) FROM changes").fetchone()
        if last_seq <= self._last_seq:
            return [], 0
        if last_seq - self._last_seq > CHANGES_KEPT:
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


def _create_private(path: str) -> None:
    """Create a new database file readable by its owner only (0600; SQLite gives its WAL and
    shared-memory files the database's permissions). An existing file is left as it is."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise MetadataStoreError(f"cannot create sqlite metadata store {path}: {exc}") from exc
    os.close(fd)
