"""``memory://name``: an in-process tree shared by every store opened with the same name.

Each store object is a session. Fully deterministic: no threads, no clock; every call is a
checkpoint and takes effect at once, so a seeded trio run replays the same way.

A store belongs to the event loop it was opened in. Stores of one tree may live in different
loops (threads): the tree has a lock, and a change reaches another loop's watches through
that loop (``run_sync_soon``) rather than from the writer's thread.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import final

import attrs

from walkit._logging import get_logger
from walkit._loop import current_loop
from walkit.errors import (
    ClientClosedError,
    InvalidArgumentError,
    MetadataStoreError,
    MetadataVersionError,
    NodeExistsError,
    NodeNotEmptyError,
    NoSuchNodeError,
    SessionExpiredError,
)
from walkit.metadata._paths import (
    MAX_ID,
    ROOT,
    ancestors,
    check_id_value,
    check_name,
    check_path,
    check_value,
    check_version,
    name_of,
    parent_of,
)
from walkit.metadata._store import (
    MetadataStore,
    StoredNode,
    Versioned,
    WatchEvent,
    WatchEventKind,
)
from walkit.metadata._watch import ChangeKind, WatchStream, event_for

logger = get_logger(__name__)


@attrs.define
class _Node:
    value: bytes
    version: int = 0
    owner: int | None = None  # session id of an ephemeral's store
    children: set[str] = attrs.Factory(set)


class _Tree:
    """One named tree; lives as long as the process (reopening the name finds the data)."""

    def __init__(self) -> None:
        self.nodes: dict[str, _Node] = {ROOT: _Node(b"")}
        self.counters: dict[str, int] = {}
        self.stores: list[MemoryMetadataStore] = []
        self.last_session = 0
        #: Held while a call reads or changes the tree (stores of several loops may share it).
        self.lock = threading.Lock()

    def notify(self, changes: list[tuple[str, ChangeKind]]) -> None:
        for store in list(self.stores):
            loop = store._loop
            if loop.is_current():
                store._dispatch(changes)
            else:  # its watches belong to another loop (a finished one drops the call)
                loop.run_sync_soon(store._dispatch, changes)


_TREES: dict[str, _Tree] = {}


def forget_memory_tree(name: str) -> None:
    """Drop the named tree; stores still open on it keep the old one (for test isolation)."""
    _TREES.pop(name, None)


@final
class MemoryMetadataStore(MetadataStore):
    """A session on the in-process tree ``name``. Open with ``open_metadata_store``."""

    def __init__(self, name: str, url: str) -> None:
        self.url = url
        self.name = name
        self._loop = current_loop()
        self._what = f"metadata store {url}"
        self._tree = tree = _TREES.setdefault(name, _Tree())
        with tree.lock:
            tree.last_session += 1
            self.session_id = tree.last_session
            tree.stores.append(self)
        self._streams: weakref.WeakSet[WatchStream] = weakref.WeakSet()
        self._closed = False
        self._expired = False

    # --- reads ------------------------------------------------------------------------------

    async def get(self, path: str) -> Versioned:
        await self._enter()
        with self._tree.lock:
            node = self._node(check_path(path))
            return Versioned(node.value, node.version)

    async def get_node(self, path: str) -> StoredNode:
        await self._enter()
        with self._tree.lock:
            node = self._node(check_path(path))
            return StoredNode(node.value, node.version, node.owner is not None)

    async def children(self, path: str) -> list[str]:
        await self._enter()
        with self._tree.lock:
            return sorted(self._node(check_path(path)).children)

    async def exists(self, path: str) -> int | None:
        await self._enter()
        path = check_path(path)
        self._check_session()
        with self._tree.lock:
            node = self._tree.nodes.get(path)
            return None if node is None else node.version

    # --- writes -----------------------------------------------------------------------------

    async def create(
        self, path: str, value: bytes, *, ephemeral: bool = False, make_parents: bool = True
    ) -> int:
        await self._enter()
        path = check_path(path)
        data = check_value(value)
        self._check_session()
        with self._tree.lock:
            nodes = self._tree.nodes
            if path in nodes:
                raise NodeExistsError(f"metadata node {path} already exists")
            missing = [a for a in ancestors(path) if a not in nodes]
            if missing and not make_parents:
                raise NoSuchNodeError(f"parent of {path} does not exist")
            anchor = parent_of(missing[0]) if missing else parent_of(path)
            if nodes[anchor].owner is not None:
                raise InvalidArgumentError(
                    f"cannot create {path}: ephemeral {anchor} cannot have children"
                )
            changes: list[tuple[str, ChangeKind]] = []
            for ancestor in missing:
                self._insert(ancestor, b"", None, changes)
            self._insert(path, data, self.session_id if ephemeral else None, changes)
            self._tree.notify(changes)
        return 0

    async def set(self, path: str, value: bytes, version: int) -> int:
        await self._enter()
        path = check_path(path)
        data = check_value(value)
        check_version(version)
        with self._tree.lock:
            node = self._node(path)
            if node.version != version:
                raise MetadataVersionError(
                    f"metadata node {path} is at version {node.version}, not {version}"
                )
            node.value = data
            node.version += 1
            self._tree.notify([(path, "changed")])
            return node.version

    async def delete(self, path: str, version: int | None = None) -> None:
        await self._enter()
        path = check_path(path)
        check_version(version, allow_none=True)
        if path == ROOT:
            raise InvalidArgumentError("cannot delete the root node")
        with self._tree.lock:
            node = self._node(path)
            if version is not None and node.version != version:
                raise MetadataVersionError(
                    f"metadata node {path} is at version {node.version}, not {version}"
                )
            if node.children:
                raise NodeNotEmptyError(f"metadata node {path} has children")
            changes: list[tuple[str, ChangeKind]] = []
            self._remove(path, changes)
            self._tree.notify(changes)

    async def next_id(self, name: str = "ledger") -> int:
        await self._enter()
        check_name(name, what="id counter")
        self._check_session()
        with self._tree.lock:
            value = self._tree.counters.get(name, 0) + 1
            if value > MAX_ID:
                raise MetadataStoreError(f"id counter {name!r} is exhausted")
            self._tree.counters[name] = value
        return value

    async def id_counters(self) -> dict[str, int]:
        await self._enter()
        self._check_session()
        with self._tree.lock:
            return dict(self._tree.counters)

    async def advance_id_counter(self, name: str, value: int) -> None:
        await self._enter()
        check_name(name, what="id counter")
        check_id_value(value)
        self._check_session()
        with self._tree.lock:
            counters = self._tree.counters
            counters[name] = max(counters.get(name, 0), value)

    # --- watches ----------------------------------------------------------------------------

    def watch(self, path: str, *, children: bool = False) -> WatchStream:
        return self.watch_many([(path, children)])

    def watch_many(self, targets: Iterable[tuple[str, bool]]) -> WatchStream:
        self._loop.check(self._what)
        checked = [(check_path(path), bool(children)) for path, children in targets]
        stream = WatchStream(checked, on_close=self._streams.discard)
        if self._expired:
            stream.finish(WatchEvent(WatchEventKind.SESSION_EXPIRED, ROOT))
        elif self._closed:
            stream.finish()
        else:
            self._streams.add(stream)
        return stream

    def _dispatch(self, changes: list[tuple[str, ChangeKind]]) -> None:
        for stream in list(self._streams):
            for target, children in stream.targets:
                for path, kind in changes:
                    event = event_for(target, children, path, kind)
                    if event is not None:
                        stream.push(event)

    # --- session ----------------------------------------------------------------------------

    async def expire_session(self) -> None:
        """End this session now: its ephemerals go, watches get SESSION_EXPIRED."""
        await self._enter()
        if self._closed or self._expired:
            return
        self._expired = True
        self._end_session()
        logger.info("metadata_session_expired", url=self.url, session=self.session_id)
        for stream in list(self._streams):
            stream.finish(WatchEvent(WatchEventKind.SESSION_EXPIRED, ROOT))

    async def aclose(self) -> None:
        await self._enter()
        if self._closed:
            return
        if not self._expired:
            self._end_session()
        self._closed = True
        for stream in list(self._streams):
            stream.finish()

    def _end_session(self) -> None:
        tree = self._tree
        with tree.lock:
            if self in tree.stores:
                tree.stores.remove(self)
            owned = [p for p, n in tree.nodes.items() if n.owner == self.session_id]
            changes: list[tuple[str, ChangeKind]] = []
            for path in owned:
                self._remove(path, changes)
            tree.notify(changes)

    # --- helpers ----------------------------------------------------------------------------

    async def _enter(self) -> None:
        """Every call: on this store's loop (else WrongEventLoopError), then one checkpoint."""
        self._loop.check(self._what)
        await self._loop.checkpoint()

    def _check_session(self) -> None:
        if self._closed:
            raise ClientClosedError(f"metadata store {self.url} is closed")
        if self._expired:
            raise SessionExpiredError(f"metadata session {self.session_id} on {self.url} expired")

    def _node(self, path: str) -> _Node:
        self._check_session()
        node = self._tree.nodes.get(path)
        if node is None:
            raise NoSuchNodeError(f"metadata node {path} does not exist")
        return node

    def _insert(
        self, path: str, value: bytes, owner: int | None, changes: list[tuple[str, ChangeKind]]
    ) -> None:
        parent = parent_of(path)
        self._tree.nodes[path] = _Node(value, owner=owner)
        self._tree.nodes[parent].children.add(name_of(path))
        changes += [(path, "created"), (parent, "children")]

    def _remove(self, path: str, changes: list[tuple[str, ChangeKind]]) -> None:
        parent = parent_of(path)
        del self._tree.nodes[path]
        self._tree.nodes[parent].children.discard(name_of(path))
        changes += [(path, "deleted"), (parent, "children")]
