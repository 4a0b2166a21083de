"""sqlite is shared by the processes of one host: sessions, ephemerals and ids across them."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests.metadata._util import HANG_GUARD, wait_for
from walkit.errors import SessionExpiredError
from walkit.metadata import MetadataStore, WatchEventKind, open_metadata_store

CHILD = str(Path(__file__).with_name("_child.py"))


async def _wait_ready(process: trio.Process) -> bytes:
    assert process.stdout is not None
    seen = b""
    with trio.fail_after(HANG_GUARD):
        while b"READY\n" not in seen:
            chunk = await process.stdout.receive_some()
            assert chunk, f"child exited early: {seen!r}"
            seen += chunk
    return seen


async def test_killed_process_ephemeral_vanishes(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/m.db"
    child_url = url + "?session_timeout=1"  # the killed process's session times out quickly
    async with await open_metadata_store(url) as store:
        process = await trio.lowlevel.open_process(
            [sys.executable, CHILD, "ephemeral", child_url, "/bookies/available/b1"],
            stdout=subprocess.PIPE,
        )
        try:
            await _wait_ready(process)
            events = store.watch("/bookies/available/b1")
            assert (await store.get("/bookies/available/b1")).value == b"child"
            process.send_signal(signal.SIGKILL)
            await process.wait()
            await wait_for(events, WatchEventKind.DELETED)
            assert await store.exists("/bookies/available/b1") is None
            assert await store.children("/bookies/available") == []
        finally:
            if process.returncode is None:
                process.kill()
            await process.wait()


async def test_ids_unique_across_processes(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path}/m.db"
    got: list[int] = []

    async def child() -> None:
        result = await trio.run_process(
            [sys.executable, CHILD, "ids", url, "150"], capture_stdout=True
        )
        (line,) = [x for x in result.stdout.splitlines() if x.startswith(b"IDS ")]
        got.extend(int(word) for word in line.split()[1:])

    async def here(store: MetadataStore) -> None:
        for _ in range(150):
            got.append(await store.next_id("ledger"))

    with trio.fail_after(60):
        async with await open_metadata_store(url) as store, trio.open_nursery() as nursery:
            nursery.start_soon(child)
            nursery.start_soon(child)
            nursery.start_soon(here, store)
    assert len(got) == 450
    assert len(set(got)) == 450


class _WallClock:
    """The sessions' wall clock, moved by the test (shared by its stores)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_stalled_session_expires_by_the_clock(tmp_path: Path) -> None:
    """A process that stops heart-beating for longer than its timeout loses its session."""
    clock = _WallClock()
    url = f"sqlite://{tmp_path}/m.db"
    async with (
        await open_metadata_store(url, clock=clock, session_timeout=1000) as watcher,
        await open_metadata_store(url, clock=clock, session_timeout=5) as stalled,
    ):
        await stalled.create("/e", b"", ephemeral=True)
        events = stalled.watch("/e")
        clock.now += 3  # within the timeout: nothing happens
        assert await watcher.exists("/e") == 0
        clock.now += 100  # past the stalled one's timeout: the first to notice reaps it
        assert await watcher.exists("/e") is None
        with pytest.raises(SessionExpiredError):
            await stalled.get("/")
        await wait_for(events, WatchEventKind.SESSION_EXPIRED)


async def test_a_watcher_reaps_an_expired_session_by_itself(tmp_path: Path) -> None:
    """The watch poller is one of the reapers: with no write, read or heartbeat from anyone
    for a while, a watcher still sees a dead session's ephemeral go (the poller's cheap check
    on the trio thread must count an expired session as work, not only new change rows)."""
    clock = _WallClock()
    url = f"sqlite://{tmp_path}/m.db"
    async with (
        # Heartbeats every 333 s and 10 s of real time: neither runs during the test.
        await open_metadata_store(url, clock=clock, session_timeout=1000) as watcher,
        await open_metadata_store(url, clock=clock, session_timeout=30) as stalled,
    ):
        await stalled.create("/e", b"", ephemeral=True)
        events = watcher.watch_many([("/e", False), ("/caught-up", False)])
        # Once the poller hands out this create, it has read every change row before it (the
        # ephemeral's too): from here on there are no new rows, only a session to expire.
        await watcher.create("/caught-up", b"")
        assert (await wait_for(events, WatchEventKind.CHANGED)).path == "/caught-up"
        clock.now += 100  # past the stalled one's timeout; nobody calls anything
        with trio.fail_after(5):  # the poller runs every 50 ms; its heartbeat in 333 s
            event = await wait_for(events, WatchEventKind.DELETED)
        assert event.path == "/e"
