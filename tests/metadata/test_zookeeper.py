"""ZooKeeper-only behaviour: a server that goes away and comes back within the session."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests._zookeeper import ZooKeeperServer, missing_zookeeper
from tests.metadata._util import HANG_GUARD, wait_for
from walkit.errors import MetadataStoreError
from walkit.metadata import MetadataStore, WatchEventKind, open_metadata_store

pytestmark = pytest.mark.zookeeper


async def _until_written(store: MetadataStore, path: str, value: bytes) -> None:
    with trio.fail_after(2 * HANG_GUARD):  # a JVM restart on a busy machine can be slow
        while True:
            try:
                await store.set(path, value, (await store.get(path)).version)
                return
            except MetadataStoreError:
                await trio.sleep(0.1)  # still reconnecting


async def test_watches_and_ephemerals_survive_a_server_restart(tmp_path: Path) -> None:
    problem = missing_zookeeper()
    if problem:
        pytest.fail(problem)
    server = ZooKeeperServer(tmp_path)
    await trio.to_thread.run_sync(server.start)
    try:
        url = server.url("/restart")
        options = {"session_timeout": 30.0, "operation_timeout": 1.0}
        async with (
            await open_metadata_store(url, **options) as watcher,
            await open_metadata_store(url, **options) as writer,
        ):
            await writer.create("/node", b"0")
            await writer.create("/member", b"", ephemeral=True)
            events = watcher.watch("/node")
            assert (await watcher.get("/node")).value == b"0"

            await trio.to_thread.run_sync(server.stop)
            with pytest.raises(MetadataStoreError):
                await watcher.get("/node")  # fails after operation_timeout, does not hang
            await trio.to_thread.run_sync(server.restart)

            await _until_written(writer, "/node", b"1")
            await wait_for(events, WatchEventKind.CHANGED)
            assert (await watcher.get("/node")).value == b"1"
            assert await watcher.exists("/member") == 0  # same session: the ephemeral stayed
            # The watch is still armed after the catch-up.
            await writer.delete("/node")
            await wait_for(events, WatchEventKind.DELETED)
    finally:
        await trio.to_thread.run_sync(server.stop)


async def test_a_watch_sees_a_change_between_its_event_and_its_rearming(
    zookeeper_server: ZooKeeperServer, zookeeper_url: str
) -> None:
    """ZooKeeper's watches fire once; the store arms the next one when the event comes. A
    delete (or a creation) that lands in between fires nothing: the store must tell it from
    what its re-arming read finds. A transaction makes the gap certain: its set fires the
    watch, its delete lands before the store can re-arm."""
    from kazoo.client import KazooClient

    root = zookeeper_url.split(str(zookeeper_server.port), 1)[1]
    writer = KazooClient(hosts=zookeeper_server.hosts)
    await trio.to_thread.run_sync(writer.start)
    try:
        async with await open_metadata_store(zookeeper_url) as store:
            await store.create("/n", b"0")
            events = store.watch("/n")
            assert (await store.get("/n")).value == b"0"

            def set_then_delete() -> None:
                tx = writer.transaction()
                tx.set_data(f"{root}/n", b"1")
                tx.delete(f"{root}/n")
                results = tx.commit()
                assert results[1] is True, results

            await trio.to_thread.run_sync(set_then_delete)
            await wait_for(events, WatchEventKind.DELETED)

            def create_then_set() -> None:
                tx = writer.transaction()
                tx.create(f"{root}/n", b"2")
                tx.set_data(f"{root}/n", b"3")
                results = tx.commit()
                assert not any(isinstance(r, Exception) for r in results), results

            await trio.to_thread.run_sync(create_then_set)
            await wait_for(events, WatchEventKind.CHANGED)
            assert (await store.get("/n")).value == b"3"
            await events.aclose()  # type: ignore[attr-defined]

            # A children watch: a child comes (it fires), and the node goes with it.
            await store.create("/dir", b"")
            children = store.watch("/dir", children=True)
            assert await store.children("/dir") == []

            def child_then_gone() -> None:
                tx = writer.transaction()
                tx.create(f"{root}/dir/a", b"")
                tx.delete(f"{root}/dir/a")
                tx.delete(f"{root}/dir")
                results = tx.commit()
                assert not any(isinstance(r, Exception) for r in results), results

            await trio.to_thread.run_sync(child_then_gone)
            await wait_for(children, WatchEventKind.DELETED)
            await children.aclose()  # type: ignore[attr-defined]
    finally:
        await trio.to_thread.run_sync(writer.stop)
