"""Fixtures for the client tests: real bookies in this process (DiskStorage in tmp dirs, or
MemoryStorage over a SimNetwork), and a client connected to them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from walkit._core.types import BookieId
from walkit.client import Client
from walkit.metadata import open_metadata_store
from walkit.net import Network
from walkit_bookie import Bookie, BookieConfig, MemoryStorage


class Bookies:
    """Bookies running in this process; each can be stopped and started again (same port and
    data dir, so it comes back as the same bookie)."""

    def __init__(
        self,
        url: str,
        root: Path,
        nursery: trio.Nursery,
        *,
        network: Any = None,
        memory: bool = False,
        options: dict[str, Any] | None = None,
    ) -> None:
        self.url = url
        self.root = root
        self.nursery = nursery
        self.network = network
        self.memory = memory
        #: More BookieConfig fields for every bookie.
        self.options = options or {}
        self.ids: dict[int, BookieId] = {}
        self.objects: dict[int, Bookie] = {}
        self._scopes: dict[int, trio.CancelScope] = {}
        self._stopped: dict[int, trio.Event] = {}
        self._storages: dict[int, MemoryStorage] = {}

    async def start(self, index: int) -> BookieId:
        bookie_id: BookieId = await self.nursery.start(self._run, index)
        self.ids[index] = bookie_id
        return bookie_id

    async def start_many(self, count: int) -> list[BookieId]:
        return [await self.start(i) for i in range(count)]

    async def _run(self, index: int, task_status: trio.TaskStatus[BookieId]) -> None:
        store = await open_metadata_store(self.url)
        stopped = trio.Event()
        self._stopped[index] = stopped
        try:
            with trio.CancelScope() as scope:
                self._scopes[index] = scope
                port = self.ids[index].port if index in self.ids else 0
                config = BookieConfig(
                    data_dirs=[str(self.root / f"bookie-{index}")],
                    port=port,
                    network_location="/default-region/default-rack",
                    **self.options,
                )
                kwargs: dict[str, Any] = {"metadata": store}
                if self.network is not None:
                    node: Network = self.network.node(f"bookie-{index}")
                    kwargs["network"] = node
                if self.memory:
                    storage = self._storages.get(index)
                    if storage is None:
                        storage = MemoryStorage()
                        self._storages[index] = storage
                    kwargs["storage"] = storage
                bookie = Bookie(config, **kwargs)
                self.objects[index] = bookie
                await bookie.run(task_status=task_status)
        finally:
            with trio.CancelScope(shield=True):
                await store.aclose()
            stopped.set()

    async def stop(self, index: int) -> None:
        """A clean stop (the bookie deregisters); in-flight requests get no answer."""
        self._scopes[index].cancel()
        await self._stopped[index].wait()

    def index_of(self, bookie: BookieId) -> int:
        return next(i for i, b in self.ids.items() if b == bookie)


def connect(url: str, **options: Any) -> AbstractAsyncContextManager[Client]:
    return Client.connect(url, **options)


@asynccontextmanager
async def cluster(
    url: str, root: Path, count: int = 3, **bookie_kwargs: Any
) -> AsyncIterator[Bookies]:
    async with trio.open_nursery() as nursery:
        bookies = Bookies(url, root, nursery, **bookie_kwargs)
        await bookies.start_many(count)
        try:
            yield bookies
        finally:
            nursery.cancel_scope.cancel()


@pytest.fixture
def anyio_backend() -> str:  # pragma: no cover - only trio here
    return "trio"


__all__ = ["Bookies", "cluster", "connect"]


@pytest.fixture
def memory_url(request: pytest.FixtureRequest) -> Any:
    """A fresh in-process metadata store (for tests that are about the client, not the store)."""
    from tests._zookeeper import unique_root
    from walkit.metadata import forget_memory_tree

    name = unique_root(request.node.name).lstrip("/")
    yield f"memory://{name}"
    forget_memory_tree(name)
