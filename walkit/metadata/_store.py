"""The MetadataStore interface every driver implements.

Paths are ZooKeeper-like: absolute, ``/``-separated, no trailing slash, relative to the store's
root (the URL's path for ZooKeeper; the whole database for sqlite; the name for memory).
Every node has bytes and a version that starts at 0 on create and grows by one on each set.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import AsyncIterator, Iterable

import attrs

from walkit.errors import ConfigurationError


@attrs.frozen
class Versioned:
    """A node's value and the version it had when read."""

    value: bytes
    version: int


@attrs.frozen
class StoredNode:
    """A node as a metadata dump sees it: its value, its version, and whether it is
    ephemeral (it belongs to a live session: a running process, not the cluster's state)."""

    value: bytes
    version: int
    ephemeral: bool


#: The largest value a node may hold (ZooKeeper's packet limit is 1 MiB, with headers).
MAX_VALUE_SIZE = 1_000_000


class WatchEventKind(enum.Enum):
    CHANGED = "changed"  # data of the node changed (or it was created)
    DELETED = "deleted"
    CHILDREN = "children"  # the set of children changed
    SESSION_EXPIRED = "session_expired"


@attrs.frozen
class WatchEvent:
    kind: WatchEventKind
    path: str


class MetadataStore(abc.ABC):
    """Async key/value tree with compare-and-set, ephemerals, watches and id generation.

    Errors: NoSuchNodeError, NodeExistsError, MetadataVersionError (a lost CAS),
    NodeNotEmptyError (delete of a node with children), InvalidArgumentError (bad path or value),
    MetadataStoreError (store unreachable; retryable), SessionExpiredError (the session ended:
    every later call raises it, open a new store), ClientClosedError (after ``aclose``).

    Each store object is one session. Values are at most :data:`MAX_VALUE_SIZE` bytes.
    """

    #: The URL this store was opened from (for messages and for handing to subprocesses).
    url: str

    @abc.abstractmethod
    async def get(self, path: str) -> Versioned:
        """Read a node; raise NoSuchNodeError if it does not exist."""

    @abc.abstractmethod
    async def create(
        self, path: str, value: bytes, *, ephemeral: bool = False, make_parents: bool = True
    ) -> int:
        """Create a node (version 0); raise NodeExistsError if it exists.

        Ephemeral nodes vanish when this store's session ends (close, crash, or expiry).
        Returns the new version (0).
        """

    @abc.abstractmethod
    async def set(self, path: str, value: bytes, version: int) -> int:
        """Compare-and-set: write only if the node is at ``version``; return the new version.

        Raises MetadataVersionError if the version differs, NoSuchNodeError if it is gone.
        """

    @abc.abstractmethod
    async def delete(self, path: str, version: int | None = None) -> None:
        """Delete a node (only at ``version`` if given). Nodes with children cannot be deleted."""

    @abc.abstractmethod
    async def children(self, path: str) -> list[str]:
        """Names (not paths) of a node's children, sorted; NoSuchNodeError if it is missing."""

    @abc.abstractmethod
    async def exists(self, path: str) -> int | None:
        """The node's version, or None if it does not exist."""

    @abc.abstractmethod
    def watch(self, path: str, *, children: bool = False) -> AsyncIterator[WatchEvent]:
        """Yield an event each time the node (or, with ``children``, its child set) changes.

        The iterator is persistent (not one-shot); events may be coalesced, so callers re-read
        after each one. It ends when the store is closed, after a SESSION_EXPIRED event when the
        session is lost, or when its ``aclose()`` is called.

        A data watch yields CHANGED (created or set) and DELETED. A children watch yields
        CHILDREN (a child was created or deleted), DELETED (the node itself went away) and
        CHANGED (the node was created).

        Events are kept from the call on, even before iteration starts. The pattern that never
        misses a change: call ``watch``, then read the current state through this same store,
        then consume events (any change the read did not see is reported).
        """

    def watch_many(self, targets: Iterable[tuple[str, bool]]) -> AsyncIterator[WatchEvent]:
        """One iterator over several watches, each ``(path, children)``; events carry their path.

        The bundled drivers implement it natively; the default only handles one target.
        """
        targets = list(targets)
        if len(targets) != 1:
            raise ConfigurationError(f"{type(self).__name__} cannot watch several paths at once")
        path, children = targets[0]
        return self.watch(path, children=children)

    @abc.abstractmethod
    async def next_id(self, name: str = "ledger") -> int:
        """A unique 64-bit id (positive) from the named counter, never handed out twice."""

    async def get_node(self, path: str) -> StoredNode:
        """Read a node and whether it is ephemeral; NoSuchNodeError if it does not exist.

        What a metadata export needs besides :meth:`get` (it leaves ephemeral nodes out).
        """
        raise ConfigurationError(f"{type(self).__name__} cannot tell ephemeral nodes apart")

    async def id_counters(self) -> dict[str, int]:
        """The last id each counter of :meth:`next_id` handed out (unused counters are absent)."""
        raise ConfigurationError(f"{type(self).__name__} cannot list its id counters")

    async def advance_id_counter(self, name: str, value: int) -> None:
        """Make counter ``name`` hand out only ids above ``value`` from now on (a counter
        already past it stays where it is): what a metadata import restores."""
        raise ConfigurationError(f"{type(self).__name__} cannot set its id counters")

    @abc.abstractmethod
    async def aclose(self) -> None:
        """End the session (its ephemeral nodes go away) and release resources."""

    async def expire_session(self) -> None:
        """Make this store's session expire now, as a crash or a partition would (for tests).

        Its ephemeral nodes go away, its watches get SESSION_EXPIRED and end, and every later
        call raises SessionExpiredError.
        """
        raise ConfigurationError(f"{type(self).__name__} cannot expire its session on demand")

    async def __aenter__(self) -> MetadataStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
