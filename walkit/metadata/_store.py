"""The MetadataStore interface every driver implements.

Paths are ZooKeeper-like: absolute, ``/``-separated, no trailing slash, relative to the store's
root (the URL's path for ZooKeeper; the whole database for sqlite; the name for memory).
Every node has bytes and a version that starts at 0 on create and grows by one on each set.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import AsyncIterator

import attrs


@attrs.frozen
class Versioned:
    """A node's value and the version it had when read."""

    value: bytes
    version: int


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
    MetadataStoreError (store unreachable; retryable), SessionExpiredError.
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
        after each one. It ends when the store is closed.
        """

    @abc.abstractmethod
    async def next_id(self, name: str = "ledger") -> int:
        """A unique 64-bit id (positive) from the named counter, never handed out twice."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """End the session (its ephemeral nodes go away) and release resources."""

    async def __aenter__(self) -> MetadataStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
