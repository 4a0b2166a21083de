"""A rolling upgrade from the last release to the working tree, with bookie and client
processes of both versions in one cluster (docs/operations.md, Upgrades).

The release (``releases.toml``) is built from the repository's history into a virtualenv of its
own (``_release.py``). On it: four bookies and a writer that appends all along. The bookies are
upgraded one at a time (clean stop, start on the working tree, same data dir and port) while
the writer goes on; then the writer; then a client of the working tree takes the log over. Every
acknowledged record reads back, in order, with its position. A reader of the release reads the
whole log from the upgraded bookies. Last, the bookies are rolled back to the release one at a
time and the release's reader, then the working tree's, read it all again: what the upgraded
bookies wrote, the older ones read (the rollback path).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._cluster import BookieProcess, free_port
from tests.compat._release import (
    LogClient,
    OldBookieProcess,
    check_release_python,
    latest_release,
    release_python,
)
from walkit import Client, Log, LogPosition
from walkit._version import __version__
from walkit.metadata import open_metadata_store

pytestmark = pytest.mark.processes

LOG = "upgrade"
BOOKIES = 4


@pytest.fixture(scope="module")
def release() -> tuple[str, Path]:
    version, commit = latest_release()
    python = release_python(version, commit)
    check_release_python(python, version)
    return version, python


class Cluster:
    """Four bookies, each of the release or of the working tree, on fixed ports and dirs."""

    def __init__(self, root: Path, python: Path) -> None:
        self.url = f"sqlite://{root / 'metadata.db'}"
        self.python = python
        self.slots = [(root / f"bookie-{i}", free_port()) for i in range(BOOKIES)]
        self.running: list[BookieProcess] = []

    def start(self, index: int, *, old: bool) -> None:
        data_dir, port = self.slots[index]
        bookie = (
            OldBookieProcess(self.python, self.url, data_dir, port)
            if old
            else BookieProcess(self.url, data_dir, port)
        )
        bookie.start()
        self.running[index : index + 1] = [bookie]

    def stop(self, index: int) -> None:
        self.running[index].stop()

    def close(self) -> None:
        for bookie in self.running:
            bookie.stop()


@pytest.fixture
def cluster(tmp_path: Path, release: tuple[str, Path]) -> Iterator[Cluster]:
    made = Cluster(tmp_path, release[1])
    try:
        for i in range(BOOKIES):
            made.running.append(OldBookieProcess(release[1], made.url, *made.slots[i]))
            made.running[i].start()
        yield made
    finally:
        made.close()


async def _versions(url: str) -> dict[str, str]:
    """Each registered bookie's walkit version, as it registered."""
    async with await open_metadata_store(url) as store:
        out = {}
        for name in await store.children("/bookies/available"):
            raw = (await store.get(f"/bookies/available/{name}")).value
            out[name] = json.loads(raw)["walkit_version"]
        return out


def _acks(lines: list[str]) -> list[tuple[str, str]]:
    return [tuple(line.split()[1:3]) for line in lines if line.startswith("ACK ")]  # type: ignore[misc]


def _read_with(python: Path | str, url: str) -> list[tuple[str, str]]:
    reader = LogClient(python, "read", url, LOG)
    version = reader.next_line()
    lines = reader.rest()
    assert lines[-1] == "END", lines[-5:]
    assert version.startswith("VERSION ")
    return [(parts[1], parts[2]) for parts in (line.split() for line in lines[:-1])]


def _check_all_acked_read(acked: list[tuple[str, str]], read: list[tuple[str, str]]) -> None:
    """Every acknowledged record is there with its position, in order (records whose append
    failed may be there too)."""
    positions = dict(read)
    missing = [(pos, payload) for pos, payload in acked if positions.get(pos) != payload]
    assert not missing, f"{len(missing)} acknowledged records are missing: {missing[:5]}"
    order = [LogPosition.parse(pos) for pos, _ in read]
    assert order == sorted(order)


async def test_rolling_upgrade_then_rollback(cluster: Cluster, release: tuple[str, Path]) -> None:
    old_version, python = release
    url = cluster.url
    assert set((await _versions(url)).values()) == {old_version}

    writer = LogClient(python, "write", url, LOG, "old")
    try:
        assert writer.next_line().split()[1] == old_version
        writer.wait_for("ACK ", 100)
        for i in range(BOOKIES):  # one at a time, while the writer appends
            cluster.stop(i)
            writer.wait_for("ACK ", 20)  # it goes on without that bookie
            cluster.start(i, old=False)
            writer.wait_for("ACK ", 50)
        versions = await _versions(url)
        assert sorted(versions.values()) == [__version__] * BOOKIES, versions
        writer.stop()
        assert writer.rest()[-1].startswith("DONE")
    finally:
        writer.kill()
    acked = _acks(writer.lines)

    new_writer = LogClient(sys.executable, "write", url, LOG, "new")
    try:
        assert new_writer.next_line().split()[1] == __version__
        new_writer.wait_for("ACK ", 100)
        new_writer.stop()
        new_writer.rest()
    finally:
        new_writer.kill()
    acked += _acks(new_writer.lines)
    errors = [line for line in writer.lines + new_writer.lines if line.startswith("ERR ")]

    # The new client takes the log over (fencing the last writer's ledgers) and reads it all;
    # it stamps nothing, since the release's reader reads the log next (docs/operations.md).
    async with (
        Client.connect(url, wall_clock=None) as client,
        Log.open(client, LOG, create=False) as log,
    ):
        async with log.writer() as w:
            last = await w.append(b"taken-over")
        read = [(str(r.position), r.payload.decode()) async for r in log.reader(follow=False)]
    assert read[-1] == (str(last), "taken-over")
    _check_all_acked_read(acked, read)

    # An old client reads everything from the new bookies.
    assert _read_with(python, url) == read

    # Rolled back one at a time: the old bookies read what the new ones wrote.
    for i in range(BOOKIES):
        cluster.stop(i)
        cluster.start(i, old=True)
    assert sorted((await _versions(url)).values()) == [old_version] * BOOKIES
    assert _read_with(python, url) == read
    # And a client of the working tree reads it from the old bookies.
    async with Client.connect(url) as client, Log.open(client, LOG, create=False) as log:
        assert [
            (str(r.position), r.payload.decode()) async for r in log.reader(follow=False)
        ] == read
    assert len(acked) >= 100 + BOOKIES * 70 + 100, (len(acked), errors)
