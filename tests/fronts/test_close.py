"""Closing a fenced log writer, on each front (trio, asyncio, walkit.sync from threads).

The rule (docs/log.md, "Closing a writer"): closing succeeds once the application has been
told of the fence by a call; it raises only when records the application handed over could
not be made durable and no call raised that.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

import walkit
import walkit.sync
from tests._cluster import ProcessCluster, process_cluster
from tests.fronts._fronts import FRONTS, Front
from walkit import LogPosition

pytestmark = pytest.mark.processes

_names = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("close")
    with process_cluster(f"sqlite:///{root / 'metadata.db'}", root, 3) as c:
        yield c


@pytest.fixture(params=FRONTS)
def front(request: pytest.FixtureRequest) -> Front:
    return Front(request.param)


def _name(front: Front) -> str:
    return f"close-{front.name}-{next(_names)}"


async def _payloads(log: Any) -> list[bytes]:
    reader = log.reader(follow=False)
    out = []
    while (record := await reader.next()) is not None:
        out.append(record.payload)
    return out


def test_a_with_block_that_caught_the_fence_exits_quietly(
    cluster: ProcessCluster, front: Front
) -> None:
    async def scenario(front: Front) -> None:
        name = _name(front)
        async with (
            front.connect(cluster.metadata_url) as first,
            front.connect(cluster.metadata_url) as second,
            front.open_log(first, name) as log1,
            front.open_log(second, name) as log2,
        ):
            caught = 0
            async with log1.writer() as old:  # leaving it raises nothing
                await old.append(b"old")
                async with log2.writer() as new:
                    try:
                        await old.append(b"too late")
                    except walkit.WriterFencedError:
                        caught += 1
                    await new.append(b"new")
            assert caught == 1
            assert await _payloads(log2) == [b"old", b"new"]

    front.run(scenario)


async def _open_writer(front: Front, log: Any) -> Any:
    """The writer itself (not a context): walkit.sync's, or the async one."""
    if front.name == "sync":
        return await anyio.to_thread.run_sync(log.sync.writer)
    return await log.writer()


async def _append(front: Front, writer: Any, payload: bytes) -> LogPosition:
    if front.name == "sync":
        return await anyio.to_thread.run_sync(writer.append, payload)
    return await writer.append(payload)  # type: ignore[no-any-return]


def test_close_and_aclose_of_a_fenced_writer_are_quiet(
    cluster: ProcessCluster, front: Front
) -> None:
    """Explicit close (and aclose on the async fronts), after the fence was seen and also
    when it was not (nothing handed over was lost: the takeover kept every record)."""

    async def scenario(front: Front) -> None:
        name = _name(front)
        async with (
            front.connect(cluster.metadata_url) as first,
            front.connect(cluster.metadata_url) as second,
            front.open_log(first, name) as log1,
            front.open_log(second, name) as log2,
        ):
            for seen in (True, False):
                old = await _open_writer(front, log1)
                await _append(front, old, b"a")
                async with log2.writer() as new:
                    await new.append(b"b")
                if seen:
                    with pytest.raises(walkit.WriterFencedError):
                        await _append(front, old, b"late")
                if front.name == "sync":
                    await anyio.to_thread.run_sync(old.close)
                    await anyio.to_thread.run_sync(old.close)  # idempotent
                    with old:  # and the context exit
                        pass
                else:
                    await old.aclose()
                    await old.close()
                    async with old:
                        pass
            assert await _payloads(log2) == [b"a", b"b", b"a", b"b"]

    front.run(scenario)


async def _append_and_walk_away(writer: walkit.LogWriter, payload: bytes) -> None:
    """Hand a record over and stop waiting for it (a cancelled task): no call will say how
    it went."""
    with anyio.CancelScope() as scope:
        scope.cancel()
        await writer.append(payload)  # queued before the first checkpoint, then cancelled


def test_close_raises_a_failure_no_call_reported(cluster: ProcessCluster, front: Front) -> None:
    """The old writer does not know it was fenced; a record it was handed fails (the bookies
    refuse the fenced ledger) and the caller had stopped waiting: close raises, once."""

    async def scenario(front: Front) -> None:
        name = _name(front)
        async with (
            front.connect(cluster.metadata_url) as first,
            front.connect(cluster.metadata_url) as second,
            front.open_log(first, name) as log1,
            front.open_log(second, name) as log2,
        ):
            old = await _open_writer(front, log1)
            kept = await _append(front, old, b"kept")
            async with log2.writer() as new:  # fences the old writer's ledger
                await new.append(b"new")
            if front.name == "sync":
                # Through the async writer underneath, in the sync client's loop.
                await anyio.to_thread.run_sync(
                    first.sync.thread.call, _append_and_walk_away, old.async_writer, b"lost"
                )
                with pytest.raises(walkit.WriterFencedError):
                    await anyio.to_thread.run_sync(old.close)
                await anyio.to_thread.run_sync(old.close)  # once
            else:
                await _append_and_walk_away(old, b"lost")
                with pytest.raises(walkit.WriterFencedError):
                    await old.aclose()
                await old.aclose()  # once
            records = log2.reader(follow=False)
            first_record = await records.next()
            assert first_record is not None and first_record.position == kept
            assert b"lost" not in await _payloads(log2)

    front.run(scenario)


_INTERRUPTED_THREAD = """
import inspect, os, signal, sys, threading, time
import walkit, walkit.sync
from walkit.sync import _log

url, name = sys.argv[1], sys.argv[2]
# Ctrl-C raises KeyboardInterrupt, as in a program started from a terminal (a test runner
# started in the background by a shell inherits SIGINT ignored, and so would this child).
signal.signal(signal.SIGINT, signal.default_int_handler)
source, first = inspect.getsourcelines(_log._AppendQueue.append)
WAIT_LINE = first + next(i for i, line in enumerate(source) if "call.done.acquire()" in line)

def interrupt_when_waiting(main):
    # SIGINT once the main thread waits for its append's outcome (the bookies are paused,
    # so it waits until then), not before its records were queued.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(main)
        if frame is not None and frame.f_code.co_name == "append" and frame.f_lineno == WAIT_LINE:
            os.kill(os.getpid(), signal.SIGINT)
            return
        time.sleep(0.01)

with walkit.sync.Client.connect(url) as client, walkit.sync.Log.open(client, name) as log:
    old = log.writer()
    old.append(b"kept")
    with walkit.sync.Client.connect(url) as other, walkit.sync.Log.open(other, name) as log2:
        with log2.writer() as new:
            new.append(b"new")
    print("pause", flush=True)
    sys.stdin.readline()
    threading.Thread(target=interrupt_when_waiting, args=(threading.get_ident(),)).start()
    try:
        old.append(b"lost")
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    sys.stdin.readline()  # the bookies run again
    try:
        old.close()
    except walkit.WriterFencedError:
        print("close raised", flush=True)
    old.close()
    print("closed quietly", flush=True)
"""


def test_an_interrupted_threads_lost_append_is_raised_by_close(cluster: ProcessCluster) -> None:
    """walkit.sync: a thread interrupted (Ctrl-C) while its append waited handed the record
    over; the bookies refuse it (the log was taken over): close raises that, once."""
    root = Path(__file__).resolve().parents[2]
    child = subprocess.Popen(
        [sys.executable, "-c", _INTERRUPTED_THREAD, cluster.metadata_url, "close-interrupted"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "pause"
        for bookie in cluster.bookies:
            bookie.pause()
        try:
            child.stdin.write("go\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "interrupted"
        finally:
            for bookie in cluster.bookies:
                bookie.resume()
        child.stdin.write("go\n")
        child.stdin.flush()
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    assert out.split("\n")[:2] == ["close raised", "closed quietly"]
