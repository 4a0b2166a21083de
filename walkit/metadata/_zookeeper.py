"""``zk://host:port[,host:port...]/root``: Apache ZooKeeper through kazoo.

kazoo is blocking and threaded. Calls run in worker threads (``anyio.to_thread``, bounded by a
CapacityLimiter) and wait at most ``operation_timeout``; a call that times out or loses its
connection raises MetadataStoreError and *may* have been applied (ZooKeeper's usual ambiguity:
re-read before retrying a write). Watch callbacks arrive on kazoo's threads and are handed to
the event loop the store was opened in (``EventLoop.run_sync_soon``), whichever thread or loop
they fire on: a store and its watches belong to that loop, and using them from another raises
WrongEventLoopError.

ZooKeeper watches are one-shot and kazoo drops them all when the connection breaks. Each watch
therefore re-arms itself *before* its event is handed to the loop (so a reader that re-reads after
the event cannot miss the next change), and after a reconnect every watch is re-armed and sends
a catch-up event. When the session is lost, the store is done: SESSION_EXPIRED goes to every
watch and every later call raises SessionExpiredError.
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import weakref
from collections.abc import Callable, Iterable
from typing import Any, TypeVar, final

import anyio
from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType, WatchedEvent
from kazoo.retry import KazooRetry

from walkit._logging import get_logger
from walkit._loop import current_loop
from walkit.errors import (
    ClientClosedError,
    InvalidArgumentError,
    InvalidMetadataError,
    MetadataAccessError,
    MetadataStoreError,
    MetadataVersionError,
    NodeExistsError,
    NodeNotEmptyError,
    NoSuchNodeError,
    SessionExpiredError,
    WalkitError,
)
from walkit.metadata._cas import Decision, cas_update, create_or_set, read_or_absent
from walkit.metadata._cluster import ID_COUNTERS_PATH
from walkit.metadata._paths import (
    MAX_ID,
    ROOT,
    check_id_value,
    check_name,
    check_path,
    check_value,
    check_version,
)
from walkit.metadata._store import (
    MetadataStore,
    StoredNode,
    Versioned,
    WatchEvent,
    WatchEventKind,
)
from walkit.metadata._watch import WatchStream, catch_up_event
from walkit.metadata._zk_security import (
    DigestCredentials,
    ZkTls,
    read_credentials_file,
    zk_tls,
)

logger = get_logger(__name__)


def _counter_value(path: str, raw: bytes | None) -> int:
    """The value of an id counter's node (0: no node yet)."""
    if raw is None:
        return 0
    try:
        return int(raw.decode("ascii"))
    except ValueError:
        raise InvalidMetadataError(f"id counter {path} holds {raw[:40]!r}, not a number") from None


class _KazooLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """kazoo's own log lines, held at DEBUG (ERROR stays ERROR).

    kazoo logs every failed connection attempt as a WARNING ("Connection dropped: ..."), several
    times a second while ZooKeeper is away, which the last-resort handler prints on the stderr
    of an application that configured no logging. This store reports what matters itself: one
    clear error when it cannot connect, and one warning per suspended or lost session. kazoo's
    detail stays available at DEBUG under ``walkit.metadata._zookeeper.kazoo``.
    """

    on_drop: Callable[[str], None] | None = None

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        if level < logging.ERROR:
            level = min(level, logging.DEBUG)
        if self.on_drop is not None and str(msg).startswith("Connection dropped"):
            try:
                self.on_drop(str(msg) % args)
            except (TypeError, ValueError):
                self.on_drop(str(msg))
        super().log(level, msg, *args, **kwargs)


def _is_tls_failure(text: str) -> bool:
    return "[SSL" in text or "certificate" in text.lower()


T = TypeVar("T")
R = TypeVar("R")

_EVENT_KINDS = {
    EventType.CREATED: WatchEventKind.CHANGED,
    EventType.CHANGED: WatchEventKind.CHANGED,
    EventType.DELETED: WatchEventKind.DELETED,
    EventType.CHILD: WatchEventKind.CHILDREN,
}


def _translate(exc: Exception, path: str, closed: bool) -> WalkitError:
    if isinstance(exc, kz.NoNodeError):
        return NoSuchNodeError(f"metadata node {path} does not exist")
    if isinstance(exc, kz.NodeExistsError):
        return NodeExistsError(f"metadata node {path} already exists")
    if isinstance(exc, kz.BadVersionError):
        return MetadataVersionError(f"metadata node {path} is not at the expected version")
    if isinstance(exc, kz.NotEmptyError):
        return NodeNotEmptyError(f"metadata node {path} has children")
    if isinstance(exc, kz.NoChildrenForEphemeralsError):
        return InvalidArgumentError(f"cannot create {path}: its parent is ephemeral")
    if isinstance(exc, kz.NoAuthError):
        return MetadataAccessError(
            f"ZooKeeper refused access to metadata node {path}: its ACL does not allow this "
            "client (wrong or missing credentials_file?)"
        )
    if isinstance(exc, kz.AuthFailedError):
        return MetadataAccessError(f"ZooKeeper refused this client's credentials (at {path})")
    if isinstance(exc, kz.SessionExpiredError):
        return SessionExpiredError(f"ZooKeeper session expired (at {path})")
    if isinstance(exc, kz.ConnectionClosedError) and closed:
        return ClientClosedError("metadata store is closed")
    if isinstance(exc, KazooTimeoutError):
        return MetadataStoreError(f"ZooKeeper did not answer in time (at {path})")
    if isinstance(exc, kz.ConnectionLoss | kz.ConnectionClosedError):
        return MetadataStoreError(
            f"lost the ZooKeeper connection (at {path}); retry after re-reading"
        )
    return MetadataStoreError(f"ZooKeeper error at {path}: {type(exc).__name__}: {exc}")


class _ZkWatch:
    """Keeps one ``(path, children)`` watch of one stream armed in ZooKeeper."""

    def __init__(
        self, store: ZooKeeperMetadataStore, stream: WatchStream, path: str, children: bool
    ):
        self.store = store
        self.stream_ref = weakref.ref(stream)
        self.path = path
        self.full = store._full(path)
        self.children = children
        self.dead = False
        self.needs_rearm = False
        self._lock = threading.Lock()
        self._pending: list[WatchEvent] = []
        #: Whether the event being re-armed after says the node is there (a data watch):
        #: ZooKeeper's watches fire once, so a delete or a creation between that event and the
        #: re-arming read fires nothing, and only that read can tell.
        self._fired_exists: bool | None = None

    # All of the below may run on any thread and never block.

    def arm(self, event: WatchEvent | None = None) -> None:
        """Put the watch in place, then hand ``event`` (if any) to the event loop."""
        if event is not None:
            with self._lock:
                self._pending.append(event)
        if self.dead or self.store._lost or self.store._closed or self.stream_ref() is None:
            self.dead = True
            return
        try:
            if self.children:
                self.store._zk.get_children_async(self.full, watch=self._fired).rawlink(
                    self._children_armed
                )
            else:
                self.store._zk.exists_async(self.full, watch=self._fired).rawlink(self._armed)
        except Exception:  # the client is stopping; nothing more will come
            self.needs_rearm = True
            self._flush()

    def _children_armed(self, result: Any) -> None:
        if isinstance(result.exception, kz.NoNodeError):
            self._found(exists=False)
            # No children watch on a missing node: watch for its creation instead.
            try:
                self.store._zk.exists_async(self.full, watch=self._fired).rawlink(self._armed)
                return
            except Exception:  # the client is stopping
                self.needs_rearm = True
                self._flush()
                return
        self._armed(result)

    def _armed(self, result: Any) -> None:
        if result.exception is not None:
            self._fired_exists = None
            self.needs_rearm = True  # re-armed (with a catch-up event) after reconnecting
        elif self.children and result.value is not None and not isinstance(result.value, list):
            # The exists fallback found the node: it was created meanwhile.
            self.arm(WatchEvent(WatchEventKind.CHANGED, self.path))
            return
        else:
            self._found(exists=result.value is not None)
        self._flush()

    def _found(self, *, exists: bool) -> None:
        """The re-arming read found the node (or not): if the event it follows said otherwise,
        the node was deleted, or created, in between, and nothing fired for that."""
        fired_exists, self._fired_exists = self._fired_exists, None
        if fired_exists is not None and exists != fired_exists:
            kind = WatchEventKind.CHANGED if exists else WatchEventKind.DELETED
            with self._lock:
                self._pending.append(WatchEvent(kind, self.path))

    def _fired(self, event: WatchedEvent) -> None:
        kind = _EVENT_KINDS.get(event.type)
        if kind is None:  # EventType.NONE: kazoo dropped its watches (connection lost)
            self.needs_rearm = True
            return
        self._fired_exists = kind is not WatchEventKind.DELETED
        self.arm(WatchEvent(kind, self.path))

    def _flush(self) -> None:
        with self._lock:
            events, self._pending = self._pending, []
        if events:
            self.store._to_loop(self._deliver, events)

    def _deliver(self, events: list[WatchEvent]) -> None:  # in the store's event loop
        stream = self.stream_ref()
        if stream is not None:
            for event in events:
                stream.push(event)


@final
class ZooKeeperMetadataStore(MetadataStore):
    """A ZooKeeper session under a root path. Open with ``open_metadata_store``."""

    def __init__(
        self,
        url: str,
        hosts: str,
        root: str,
        *,
        session_timeout: float,
        connect_timeout: float,
        operation_timeout: float,
        max_threads: int,
        credentials: DigestCredentials | None = None,
        tls: ZkTls | None = None,
    ) -> None:
        self.url = url
        self.credentials = credentials
        self.tls = tls
        self._kazoo_log = _KazooLog(logging.getLogger(f"{__name__}.kazoo"), {})
        self._kazoo_log.on_drop = self._on_drop
        self._last_drop: str | None = None
        self._tls_failure: str | None = None
        self._tls_failures = 0
        self._loop = current_loop()
        self._what = f"metadata store {url}"
        self._settled = anyio.Event()  # the first connection: made, or refused by TLS
        self._connected_once = False  # (read and set on kazoo's thread)
        self.hosts = hosts
        self.root = root
        self.session_timeout = session_timeout
        self.connect_timeout = connect_timeout
        self.operation_timeout = operation_timeout
        self._limiter = anyio.CapacityLimiter(max_threads)
        self._zk = self._new_client()
        self._watches: weakref.WeakSet[_ZkWatch] = weakref.WeakSet()
        self._watch_lock = threading.Lock()
        self._streams: weakref.WeakSet[WatchStream] = weakref.WeakSet()
        self._id_lock = anyio.Lock()
        #: Jitters the pauses after lost races on the id counters (other clients' creates).
        self._rng = random.Random()
        self._lost_event = anyio.Event()
        # Read from kazoo's threads: plain booleans, set once.
        self._lost = False
        self._closed = False
        self._expired = False

    def _new_client(self, client_id: tuple[int, bytes] | None = None) -> KazooClient:
        return KazooClient(
            hosts=self.hosts,
            timeout=self.session_timeout,
            client_id=client_id,
            connection_retry=KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
            logger=self._kazoo_log,
            auth_data=None if self.credentials is None else self.credentials.auth_data,
            default_acl=None if self.credentials is None else self.credentials.acl,
            **({} if self.tls is None else self.tls.kazoo_options),
        )

    @classmethod
    async def open(
        cls,
        url: str,
        hosts: str,
        root: str,
        *,
        session_timeout: float = 10.0,
        connect_timeout: float = 5.0,
        operation_timeout: float | None = None,
        max_threads: int = 8,
        credentials_file: str | None = None,
        tls_ca: str | None = None,
        tls_cert: str | None = None,
        tls_key: str | None = None,
    ) -> ZooKeeperMetadataStore:
        credentials = None if credentials_file is None else read_credentials_file(credentials_file)
        tls = zk_tls(tls_ca, tls_cert, tls_key)
        store = cls(
            url,
            hosts,
            root,
            session_timeout=session_timeout,
            connect_timeout=connect_timeout,
            operation_timeout=session_timeout if operation_timeout is None else operation_timeout,
            max_threads=max_threads,
            credentials=credentials,
            tls=tls,
        )
        store._zk.add_listener(store._on_state)
        await store._connect()
        try:
            await store._run(store.root, lambda: store._zk.ensure_path_async(store.root))
            # exists() ignores ACLs: read the root so a refused client fails here, clearly.
            acls, _ = await store._run(store.root, lambda: store._zk.get_acls_async(store.root))
            await store._run(store.root, lambda: store._zk.get_children_async(store.root))
        except BaseException:
            await store.aclose()
            raise
        if credentials is not None and any(acl.id.scheme == "world" for acl in acls):
            logger.warning(
                "zookeeper_root_open_acl",
                url=url,
                root=store.root,
                hint="the root was created without an ACL: anyone may change it "
                "(docs/security.md, Metadata store)",
            )
        logger.debug("metadata_store_opened", url=url)
        return store

    async def _connect(self) -> None:
        """Start the session; a TLS handshake that fails ends the wait at once, clearly."""
        await anyio.to_thread.run_sync(self._zk.start_async, limiter=self._limiter)
        try:
            with anyio.move_on_after(self.connect_timeout):
                await self._settled.wait()
        finally:
            if not self._zk.connected:
                self._closed = True
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self._zk.stop, limiter=self._limiter)
                    await anyio.to_thread.run_sync(self._zk.close, limiter=self._limiter)
        if self._zk.connected:
            return
        failure, last = self._tls_failure, self._last_drop
        if failure is not None:
            raise MetadataAccessError(
                f"TLS with ZooKeeper at {self.hosts} failed: {failure} (tls_ca, tls_cert and "
                f"tls_key of metadata URL {self.url}; docs/security.md, Metadata store)"
            )
        if last is not None and "refused" in last:
            last = None  # nothing listens: "is it running?" says it
        hint = " (a TLS port? then give tls_ca)" if self.tls is None else ""
        raise MetadataStoreError(
            f"cannot reach ZooKeeper at {self.hosts} within {self.connect_timeout:g} s "
            f"(is it running? metadata URL {self.url}"
            + (f"; last error: {last}{hint}" if last else "")
            + ")"
        )

    def _on_drop(self, text: str) -> None:
        """A failed connection attempt (kazoo's thread)."""
        self._last_drop = text
        if self.tls is not None and _is_tls_failure(text) and not self._connected_once:
            # kazoo tries every host once per round: give up when as many attempts failed
            # their handshake as there are hosts (one bad server must not stop the others).
            self._tls_failures += 1
            if self._tls_failures >= len(self.hosts.split(",")):
                self._tls_failure = text
                self._to_loop(self._settled.set)

    # --- the MetadataStore calls ----------------------------------------------------------

    async def get(self, path: str) -> Versioned:
        full = self._full(check_path(path))
        data, stat = await self._run(path, lambda: self._zk.get_async(full))
        return Versioned(bytes(data), stat.version)

    async def children(self, path: str) -> list[str]:
        full = self._full(check_path(path))
        return sorted(await self._run(path, lambda: self._zk.get_children_async(full)))

    async def exists(self, path: str) -> int | None:
        full = self._full(check_path(path))
        stat = await self._run(path, lambda: self._zk.exists_async(full))
        return None if stat is None else int(stat.version)

    async def create(
        self, path: str, value: bytes, *, ephemeral: bool = False, make_parents: bool = True
    ) -> int:
        full = self._full(check_path(path))
        data = check_value(value)
        if path == ROOT:
            raise NodeExistsError("metadata node / already exists")
        await self._run(
            path,
            lambda: self._zk.create_async(
                full, data, ephemeral=bool(ephemeral), makepath=bool(make_parents)
            ),
        )
        return 0

    async def set(self, path: str, value: bytes, version: int) -> int:
        full = self._full(check_path(path))
        data = check_value(value)
        check_version(version)
        stat = await self._run(path, lambda: self._zk.set_async(full, data, version=version))
        return int(stat.version)

    async def delete(self, path: str, version: int | None = None) -> None:
        full = self._full(check_path(path))
        check_version(version, allow_none=True)
        if path == ROOT:
            raise InvalidArgumentError("cannot delete the root node")
        zk_version = -1 if version is None else version
        await self._run(path, lambda: self._zk.delete_async(full, version=zk_version))

    async def get_node(self, path: str) -> StoredNode:
        full = self._full(check_path(path))
        data, stat = await self._run(path, lambda: self._zk.get_async(full))
        return StoredNode(bytes(data), stat.version, bool(stat.ephemeralOwner))

    async def next_id(self, name: str = "ledger") -> int:
        """A CAS counter at ``/idgen/<name>`` (decimal text); lost races just try again."""
        self._loop.check(self._what)

        def decide(current: int) -> Decision[bytes, int]:
            value = current + 1
            if value > MAX_ID:
                raise MetadataStoreError(f"id counter {name!r} is exhausted")
            return Decision(value, str(value).encode("ascii"))

        return await self._update_counter(name, decide)

    async def id_counters(self) -> dict[str, int]:
        try:
            names = await self.children(ID_COUNTERS_PATH)
        except NoSuchNodeError:
            return {}
        counters = {}
        for name in names:
            raw = await read_or_absent(self, f"{ID_COUNTERS_PATH}/{name}")
            counters[name] = _counter_value(f"{ID_COUNTERS_PATH}/{name}", raw[0])
        return counters

    async def advance_id_counter(self, name: str, value: int) -> None:
        check_id_value(value)

        def decide(current: int) -> Decision[bytes, None]:
            if current >= value:
                return Decision(None)
            return Decision(None, str(value).encode("ascii"))

        await self._update_counter(name, decide)

    async def _update_counter(self, name: str, decide: Callable[[int], Decision[bytes, R]]) -> R:
        path = f"{ID_COUNTERS_PATH}/{check_name(name, what='id counter')}"
        async with self._id_lock:  # our own calls would only race each other
            _raw, _version, result = await cas_update(
                f"id counter {name!r}",
                read=functools.partial(read_or_absent, self, path),
                write=functools.partial(create_or_set, self, path),
                decide=lambda raw: decide(_counter_value(path, raw)),
                rng=self._rng,
            )
        return result

    def watch(self, path: str, *, children: bool = False) -> WatchStream:
        return self.watch_many([(path, children)])

    def watch_many(self, targets: Iterable[tuple[str, bool]]) -> WatchStream:
        self._loop.check(self._what)
        checked = [(check_path(path), bool(children)) for path, children in targets]
        stream = WatchStream(checked, on_close=self._stream_closed)
        if self._expired:
            stream.finish(WatchEvent(WatchEventKind.SESSION_EXPIRED, ROOT))
            return stream
        if self._closed:
            stream.finish()
            return stream
        self._streams.add(stream)
        for path, children in checked:
            watch = _ZkWatch(self, stream, path, children)
            stream.keepalive.append(watch)
            with self._watch_lock:
                self._watches.add(watch)
            watch.arm()
        return stream

    async def expire_session(self) -> None:
        """Expire this session on the server (ZooKeeper's test trick: a second client takes the
        session over and closes it), then wait until this client has noticed."""
        self._loop.check(self._what)
        if self._closed or self._expired:
            await self._loop.checkpoint()
            return
        client_id = self._zk.client_id
        if client_id is None:
            raise MetadataStoreError("not connected to ZooKeeper: cannot expire the session")

        def take_over_and_close() -> None:
            other = self._new_client(client_id)
            try:
                other.start(timeout=self.connect_timeout)
                other.stop()
            finally:
                other.close()

        for _ in range(3):  # the original client can win the session back in a reconnect race
            try:
                await anyio.to_thread.run_sync(take_over_and_close, limiter=self._limiter)
            except KazooTimeoutError:
                raise MetadataStoreError(f"cannot reach ZooKeeper at {self.hosts}") from None
            with anyio.move_on_after(2 + self.connect_timeout):
                await self._lost_event.wait()
            if self._lost_event.is_set():
                return
        raise MetadataStoreError("the ZooKeeper session did not expire")

    async def aclose(self) -> None:
        self._loop.check(self._what)
        if self._closed:
            await self._loop.checkpoint()
            return
        self._closed = True
        try:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.connect_timeout + 5):
                # stop() ends the session: ZooKeeper deletes its ephemerals and fires watches.
                await anyio.to_thread.run_sync(self._zk.stop, abandon_on_cancel=True)
                await anyio.to_thread.run_sync(self._zk.close, abandon_on_cancel=True)
        finally:
            for stream in list(self._streams):
                stream.finish()

    # --- helpers --------------------------------------------------------------------------

    def _full(self, path: str) -> str:
        return self.root if path == ROOT else self.root.rstrip("/") + path

    async def _run(self, path: str, start: Callable[[], Any]) -> Any:
        """Start a kazoo async call in a worker thread and wait for it, with a timeout."""
        self._loop.check(self._what)
        if self._closed:
            await self._loop.checkpoint()
            raise ClientClosedError(f"metadata store {self.url} is closed")
        if self._expired or self._lost:
            await self._loop.checkpoint()
            raise SessionExpiredError(f"ZooKeeper session of {self.url} expired")
        timeout = self.operation_timeout

        def call() -> Any:
            return start().get(timeout=timeout)

        try:
            return await anyio.to_thread.run_sync(call, limiter=self._limiter)
        except (kz.KazooException, KazooTimeoutError) as exc:
            error = _translate(exc, path, self._closed)
            if isinstance(error, SessionExpiredError):
                self._on_session_lost()
            raise error from None

    def _to_loop(self, fn: Callable[..., object], *args: Any) -> None:
        """Call ``fn(*args)`` in the store's event loop (from any thread; dropped once the
        loop has ended)."""
        self._loop.run_sync_soon(fn, *args)

    def _stream_closed(self, stream: WatchStream) -> None:
        self._streams.discard(stream)
        for watch in stream.keepalive:
            if isinstance(watch, _ZkWatch):
                watch.dead = True

    def _on_state(self, state: str) -> None:
        """kazoo's connection listener (its connection thread; must not block)."""
        with self._watch_lock:
            watches = list(self._watches)
        if state == KazooState.SUSPENDED:
            logger.warning("zookeeper_connection_suspended", url=self.url)
            for watch in watches:
                watch.needs_rearm = True
        elif state == KazooState.LOST:
            if not self._closed:
                self._lost = True
                self._to_loop(self._on_session_lost)
        elif state == KazooState.CONNECTED and not self._connected_once:
            self._connected_once = True
            self._to_loop(self._settled.set)
        elif state == KazooState.CONNECTED and not self._lost and not self._closed:
            logger.info("zookeeper_connection_restored", url=self.url)
            for watch in watches:
                if watch.needs_rearm and not watch.dead:
                    watch.needs_rearm = False
                    watch.arm(catch_up_event(watch.path, watch.children))

    def _on_session_lost(self) -> None:  # in the store's event loop
        self._lost = True
        if self._expired or self._closed:
            return
        self._expired = True
        self._lost_event.set()
        logger.warning("metadata_session_expired", url=self.url)
        for stream in list(self._streams):
            stream.finish(WatchEvent(WatchEventKind.SESSION_EXPIRED, ROOT))
