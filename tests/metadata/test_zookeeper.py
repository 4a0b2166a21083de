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
