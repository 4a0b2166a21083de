"""sqlite watches wake on writes (Linux inotify), not on a fast timer.

Each store here polls every 300 s at most on its own (``poll_interval=300``), far beyond the
hang guard: a watch event arrives in time only because the write woke the poller. Without
inotify the store falls back to polling every ``poll_interval``, shown with a short one.
"""

from __future__ import annotations

import itertools
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from tests.metadata._util import HANG_GUARD, wait_for
from walkit.metadata import (
    MetadataStore,
    WatchEventKind,
    _file_changes,
    _sqlite,
    open_metadata_store,
)
from walkit.metadata._file_changes import changed_names
from walkit.metadata._sqlite_connection import SqliteConnection

CHILD = str(Path(__file__).with_name("_child.py"))


def _inotify_problem() -> str | None:
    libc = _file_changes._LIBC
    if libc is None:
        return "no inotify here (not Linux)"
    fd = libc.inotify_init1(0)
    if fd < 0:
        return "cannot open an inotify instance (the user's limit is used up?)"
    os.close(fd)
    return None


_PROBLEM = _inotify_problem()


def _url(tmp_path: Path, poll_interval: float) -> str:
    return f"sqlite://{tmp_path}/m.db?poll_interval={poll_interval}"


@pytest.mark.skipif(_PROBLEM is not None, reason=str(_PROBLEM))
async def test_a_write_in_another_process_wakes_a_watch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The poller's safety net (a look every _QUIET_MAX, in case inotify loses an event) and
    # the sessions' expiry (a look to reap) put far beyond the hang guard: only the write's
    # wake-up can bring the event in time.
    monkeypatch.setattr(_sqlite, "_QUIET_MAX", 300.0)
    url = f"{_url(tmp_path, 300)}&session_timeout=1000"
    async with await open_metadata_store(url) as store:
        events = store.watch_many([("/bookies/available/b1", False), ("/looked", False)])
        # Once this create is handed out the poller has looked, and then sleeps until the
        # file changes (no other look is due for 300 s).
        await store.create("/looked", b"")
        assert (await wait_for(events, WatchEventKind.CHANGED)).path == "/looked"
        process = await trio.lowlevel.open_process(
            [sys.executable, CHILD, "ephemeral", url, "/bookies/available/b1"],
            stdout=subprocess.PIPE,
        )
        try:
            event = await wait_for(events, WatchEventKind.CHANGED)
            assert event.path == "/bookies/available/b1"
            assert (await store.get("/bookies/available/b1")).value == b"child"
        finally:
            process.kill()
            await process.wait()


@pytest.mark.skipif(_PROBLEM is not None, reason=str(_PROBLEM))
async def test_writes_keep_waking_a_watch(tmp_path: Path) -> None:
    """Not only the first write: every later one too (no look is held back by the timer)."""
    async with (
        await open_metadata_store(_url(tmp_path, 300)) as store,
        await open_metadata_store(_url(tmp_path, 300)) as other,
    ):
        await store.create("/n", b"0")
        events = store.watch("/n")
        for n in range(1, 6):
            await trio.sleep(0.1)
            await other.set("/n", b"%d" % n, n - 1)
            await wait_for(events, WatchEventKind.CHANGED)
            assert (await store.get("/n")).value == b"%d" % n


@pytest.mark.skipif(_PROBLEM is not None, reason=str(_PROBLEM))
async def test_more_stores_than_inotify_instances_share_one(tmp_path: Path) -> None:
    """A user gets 128 inotify instances by default; 150 stores of one process all wake, so
    they share one (per file), and none fell back to its 300 s timer."""
    count = 150
    async with await open_metadata_store(_url(tmp_path, 300)) as writer:
        stores: list[MetadataStore] = []
        try:
            for _ in range(count):
                stores.append(await open_metadata_store(_url(tmp_path, 300)))
            streams = [s.watch("/shared") for s in stores]
            await trio.sleep(0.2)
            await writer.create("/shared", b"x")
            with trio.fail_after(HANG_GUARD):
                for stream in streams:
                    await wait_for(stream, WatchEventKind.CHANGED)
        finally:
            for s in stores:
                await s.aclose()


async def test_without_inotify_watches_poll(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_file_changes, "_LIBC", None)
    async with (
        await open_metadata_store(_url(tmp_path, 0.05)) as store,
        await open_metadata_store(_url(tmp_path, 0.05)) as other,
    ):
        events = store.watch("/n")
        await trio.sleep(0.2)
        await other.create("/n", b"x")
        await wait_for(events, WatchEventKind.CHANGED)


def _event(mask: int, name: bytes = b"") -> bytes:
    padded = name + b"\0" * (-len(name) % 16 or 16) if name else b""
    return struct.pack("iIII", 1, mask, 0, len(padded)) + padded


def test_inotify_events_are_read_by_file_name() -> None:
    modify, overflow, ignored = 0x2, 0x4000, 0x8000
    assert changed_names(_event(modify, b"m.db-wal"), b"m.db") == (True, False)
    assert changed_names(_event(modify, b"m.db"), b"m.db") == (True, False)
    assert changed_names(_event(modify, b"other.db-wal"), b"m.db") == (False, False)
    assert changed_names(_event(overflow), b"m.db") == (True, False)  # lost events: look
    assert changed_names(_event(ignored), b"m.db") == (True, True)  # the watch is gone
    both = _event(modify, b"x.log") + _event(modify, b"m.db-wal")
    assert changed_names(both, b"m.db") == (True, False)
    assert changed_names(b"", b"m.db") == (False, False)


@pytest.mark.skipif(_PROBLEM is not None, reason=str(_PROBLEM))
async def test_after_a_write_a_watch_looks_again_a_few_times_not_fifty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each write (every process's session heartbeat is one) wakes every watch of the file,
    which then looks again a while: a write becomes visible a moment after inotify reports
    it. The looks come at doubling gaps (20 ms to 0.64 s: six over ~1.3 s); at a fixed 20 ms,
    an idle process looked 50 times a second."""
    monkeypatch.setattr(_sqlite, "_QUIET_MAX", 300.0)  # (only the write's wake-up counts)
    looks: list[float] = []
    peek = SqliteConnection.poll_due

    def counted(self: SqliteConnection) -> bool:
        looks.append(trio.current_time())
        return peek(self)

    monkeypatch.setattr(SqliteConnection, "poll_due", counted)
    url = f"{_url(tmp_path, 300)}&session_timeout=1000"
    async with await open_metadata_store(url) as store:
        events = store.watch("/n")
        await store.create("/n", b"")
        await wait_for(events, WatchEventKind.CHANGED)
        looks.clear()
        await trio.sleep(2.0)  # a window over the whole back-off, and no write in it
    assert 2 <= len(looks) <= 10, looks  # (a loaded machine only stretches the gaps)
    gaps = [b - a for a, b in itertools.pairwise(looks)]
    assert all(later >= earlier for earlier, later in itertools.pairwise(gaps)), gaps
