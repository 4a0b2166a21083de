"""Every metadata driver under trio, asyncio and uvloop: the same scenarios, the same results.

Each test is a plain function that runs its scenario in a fresh loop of each kind
(``tests/_event_loops.py``), on memory, sqlite (two sessions on one file, so changes travel
through the file and its change log) and a real ZooKeeper. Also: cancellation from asyncio
(``asyncio.wait_for``, ``task.cancel()``) leaves a store usable, and a store or a watch used
from another event loop or thread raises WrongEventLoopError instead of hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import anyio.from_thread
import anyio.lowlevel
import pytest
import trio

from tests._event_loops import ASYNCIO_LOOPS, EVENT_LOOPS, run_on
from tests.metadata._util import HANG_GUARD, drained, next_event, wait_for
from walkit._core.types import BookieId
from walkit.errors import (
    MetadataVersionError,
    NoSuchNodeError,
    SessionExpiredError,
    WrongEventLoopError,
)
from walkit.metadata import (
    BookieList,
    Versioned,
    WatchEvent,
    WatchEventKind,
    WatchStream,
    ensure_cluster,
    forget_memory_tree,
    list_bookies,
    open_metadata_store,
    register_bookie,
    set_bookie_read_only,
    watch_bookies,
)

CHANGED, DELETED, CHILDREN, EXPIRED = (
    WatchEventKind.CHANGED,
    WatchEventKind.DELETED,
    WatchEventKind.CHILDREN,
    WatchEventKind.SESSION_EXPIRED,
)


def stream(events: AsyncIterator[WatchEvent]) -> WatchStream:
    """The bundled drivers' watches are WatchStreams (with ``aclose``)."""
    assert isinstance(events, WatchStream)
    return events


async def until(
    events: AsyncIterator[WatchEvent], read: Callable[[], Awaitable[object]], wanted: object
) -> None:
    """Re-read after each event until ``read()`` gives ``wanted`` (events may be coalesced)."""
    with anyio.fail_after(HANG_GUARD):
        while await read() != wanted:
            await next_event(events)


async def two_sessions(url: str) -> None:
    async with await open_metadata_store(url) as a, await open_metadata_store(url) as b:
        await a.create("/dir", b"")
        assert await a.create("/n", b"one") == 0
        data = stream(b.watch("/n"))
        kids = stream(b.watch("/dir", children=True))
        # Read through the watching store after watching: no later change can be missed.
        assert await b.get("/n") == Versioned(b"one", 0)
        assert await b.children("/dir") == []

        # Compare-and-set: the second writer at the old version loses.
        assert await a.set("/n", b"two", 0) == 1
        with pytest.raises(MetadataVersionError):
            await b.set("/n", b"lost", 0)
        await wait_for(data, CHANGED)
        assert await b.get("/n") == Versioned(b"two", 1)

        await a.create("/dir/lease", b"a's", ephemeral=True)
        await a.create("/dir/kept", b"")
        await until(kids, lambda: b.children("/dir"), ["kept", "lease"])

        ids = [await a.next_id(), await b.next_id(), await a.next_id("other"), await b.next_id()]
        assert all(i > 0 for i in ids)
        assert len(set(ids[:2] + ids[3:])) == 3

        await b.delete("/n", 1)
        await wait_for(data, DELETED)
        with pytest.raises(NoSuchNodeError):
            await a.get("/n")

        # a's session ends: its ephemeral goes, b's children watch says so.
        await a.aclose()
        await until(kids, lambda: b.children("/dir"), ["kept"])
        await data.aclose()
        await kids.aclose()


async def session_expiry(url: str) -> None:
    async with await open_metadata_store(url) as a, await open_metadata_store(url) as b:
        await a.create("/lease", b"", ephemeral=True)
        mine = stream(a.watch("/anything"))
        theirs = stream(b.watch("/lease"))
        assert await b.exists("/lease") == 0
        await a.expire_session()
        assert [e.kind for e in await drained(mine)][-1:] == [EXPIRED]
        await wait_for(theirs, DELETED)
        assert await b.exists("/lease") is None
        with pytest.raises(SessionExpiredError):
            await a.get("/")
        await theirs.aclose()


async def bookie_registry(url: str) -> None:
    bookie = BookieId.parse("127.0.0.1:3181")
    async with await open_metadata_store(url) as client, await open_metadata_store(url) as server:
        await ensure_cluster(client)
        events = stream(watch_bookies(client))

        async def mode() -> tuple[list[BookieId], list[BookieId]]:
            found = await list_bookies(client)
            return sorted(found.writable), sorted(found.readonly)

        assert await list_bookies(client) == BookieList()
        await register_bookie(server, bookie, network_location="/region/rack")
        await until(events, mode, ([bookie], []))
        assert (await list_bookies(client)).writable[bookie].network_location == "/region/rack"
        await set_bookie_read_only(server, bookie, True)
        await until(events, mode, ([], [bookie]))
        await server.aclose()  # the registration is ephemeral: it goes with the session
        await until(events, mode, ([], []))
        await events.aclose()


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_two_sessions(loop: str, metadata_url: str) -> None:
    run_on(loop, two_sessions, metadata_url)


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_session_expiry(loop: str, metadata_url: str) -> None:
    run_on(loop, session_expiry, metadata_url)


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_bookie_registry(loop: str, metadata_url: str) -> None:
    run_on(loop, bookie_registry, metadata_url)


# --- cancellation from asyncio -------------------------------------------------------------


async def cancelled_by_asyncio(url: str) -> None:
    async with await open_metadata_store(url) as store, await open_metadata_store(url) as other:
        await store.create("/c", b"0")

        # A watch iteration that asyncio.wait_for gives up on keeps its events.
        events = stream(store.watch("/c"))
        assert await store.get("/c") == Versioned(b"0", 0)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(events.__anext__(), 0.05)
        await other.set("/c", b"1", 0)
        assert (await next_event(events)).kind is CHANGED

        # Calls cancelled at every stage (before, in or after a worker thread), beside calls
        # that go on. A cancelled write may or may not land, as with any cancelled write:
        # they go to another node.
        await store.create("/w", b"")
        for round_ in range(100):
            cancelled = [
                asyncio.ensure_future(store.set("/w", b"x", 0)),
                asyncio.ensure_future(store.get("/c")),
                asyncio.ensure_future(store.next_id()),
            ]
            kept = [
                asyncio.ensure_future(store.create(f"/k/{round_}", b"")),
                asyncio.ensure_future(store.get("/c")),
            ]
            for _ in range(round_ % 8):
                await asyncio.sleep(0)
            for call in cancelled:
                call.cancel()
            for call in cancelled:
                with contextlib.suppress(asyncio.CancelledError, MetadataVersionError):
                    await call
            assert [await call for call in kept] == [0, Versioned(b"1", 1)]
        assert len(await other.children("/k")) == 100

        # The store still works: a compare-and-set at the version read lands.
        node = await store.get("/c")
        assert await store.set("/c", b"after", node.version) == node.version + 1
        assert await other.get("/c") == Versioned(b"after", node.version + 1)
        await until(events, lambda: store.get("/c"), Versioned(b"after", node.version + 1))

        # So does a watch iteration cancelled with task.cancel().
        waiting = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(0)
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        await other.delete("/c")
        await wait_for(events, DELETED)
        await events.aclose()


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_cancelled_by_asyncio(loop: str, metadata_url: str) -> None:
    run_on(loop, cancelled_by_asyncio, metadata_url)


# --- one store, one event loop -------------------------------------------------------------


async def used_from_elsewhere(url: str) -> None:
    async with await open_metadata_store(url) as store:
        await store.create("/n", b"")
        events = stream(store.watch("/n"))

        def elsewhere() -> list[str]:  # another thread: no loop, then an asyncio and a trio one
            refused = []

            async def watch_there() -> None:
                store.watch("/n")

            async def iterate_there() -> None:
                await events.__anext__()

            attempts: dict[str, Callable[[], object]] = {
                "watch, no loop": lambda: store.watch("/n"),
                "get on asyncio": lambda: asyncio.run(store.get("/n")),
                "set on trio": lambda: trio.run(store.set, "/n", b"", 0),
                "watch on asyncio": lambda: asyncio.run(watch_there()),
                "iterate on asyncio": lambda: asyncio.run(iterate_there()),
                "close on trio": lambda: trio.run(store.aclose),
            }
            for what, attempt in attempts.items():
                try:
                    attempt()
                except WrongEventLoopError as exc:
                    assert "another thread or event loop" in str(exc)
                    refused.append(what)
            return refused

        refused = await anyio.to_thread.run_sync(elsewhere)
        assert refused == [
            "watch, no loop",
            "get on asyncio",
            "set on trio",
            "watch on asyncio",
            "iterate on asyncio",
            "close on trio",
        ]
        # Nothing of that reached the store: it and its watch still work here.
        assert await store.set("/n", b"here", 0) == 1
        assert (await next_event(events)).kind is CHANGED
        await events.aclose()


@pytest.mark.parametrize("loop", ["trio", "asyncio"])
def test_used_from_another_loop(loop: str, metadata_url: str) -> None:
    run_on(loop, used_from_elsewhere, metadata_url)


async def memory_across_loops(url: str) -> None:
    """Two sessions on one memory tree, one in this loop and one in an asyncio loop of another
    thread, each waiting on a watch: each is woken by the other's change."""
    async with await open_metadata_store(url) as here:
        await here.create("/n", b"")
        events = stream(here.watch("/n"))
        opened = anyio.Event()
        token = anyio.lowlevel.current_token()

        async def there() -> WatchEvent:
            async with await open_metadata_store(url) as store:
                theirs = stream(store.watch("/n"))
                anyio.from_thread.run_sync(opened.set, token=token)
                seen = await next_event(theirs)  # woken from the other thread's loop
                await store.set("/n", b"there", 1)
                await theirs.aclose()
                return seen

        async with anyio.create_task_group() as tasks:
            results: list[WatchEvent] = []

            async def run_there() -> None:
                results.append(await anyio.to_thread.run_sync(asyncio.run, there()))

            tasks.start_soon(run_there)
            with anyio.fail_after(HANG_GUARD):
                await opened.wait()
            assert await here.set("/n", b"here", 0) == 1
            await until(events, lambda: here.get("/n"), Versioned(b"there", 2))
        assert results == [WatchEvent(CHANGED, "/n")]
        await events.aclose()


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_memory_tree_shared_by_two_loops(loop: str) -> None:
    name = f"loops-{loop}-{threading.get_ident()}"
    try:
        run_on(loop, memory_across_loops, f"memory://{name}")
    finally:
        forget_memory_tree(name)
