"""A file:// lake's data files, and the directories up to the lake's root, are fsynced before
the Iceberg commit names them (a power loss after the commit cannot take them back)."""

from __future__ import annotations

import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from itertools import dropwhile
from pathlib import Path

import pytest

from tests.client.conftest import cluster, connect
from walkit import Log
from walkit.log._offload import offload


@asynccontextmanager
async def _two_ledgers_to_offload(
    memory_url: str, tmp_path: Path, lake_dir: Path
) -> AsyncIterator[Log]:
    """A log "durable" of 11 records in ledgers of 5 (two closed), offloading to ``lake_dir``."""
    async with (
        cluster(memory_url, tmp_path, 1),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        log = await Log.open(
            client,
            "durable",
            roll_entries=5,
            ensemble_size=1,
            write_quorum=1,
            ack_quorum=1,
            offload_to=f"file://{lake_dir}",
        )
        async with log.writer() as w:
            for i in range(11):
                await w.append(b"r%d" % i, timestamp=int(time.time() * 1000))
        yield log


async def test_data_files_and_their_directories_are_fsynced_before_the_commit(
    memory_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lake_dir = tmp_path / "lake"
    synced: list[str] = []  # the lake's paths fsynced, in order
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        if path.startswith(str(lake_dir)) and "/metadata" not in path:  # (the next test's)
            synced.append(path)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    async with _two_ledgers_to_offload(memory_url, tmp_path, lake_dir) as log:
        at_files: list[list[str]] = []

        async def hook(step: str, _ledger_id: int) -> None:
            if step == "files":  # written, not yet committed
                # (from the first data file: the table's creation synced its directories)
                at_files.append(list(dropwhile(lambda p: not p.endswith(".parquet"), synced)))
                synced.clear()

        assert await offload(log, hook=hook) == 2
        md = await log.metadata()
        data = lake_dir / "durable" / "data"
        for done, ledger in zip(at_files, md.offloaded, strict=True):
            files = [f.removeprefix("file://") for f in ledger.files]
            assert done[: len(files)] == files, done
            assert done[len(files) :] == [str(data), str(data.parent), str(lake_dir)], done


def test_a_copy_another_offloader_cleaned_up_is_not_an_error(tmp_path: Path) -> None:
    """Two offloaders of one ledger: the winner's clean-up deletes the loser's copy (its
    ledger is in the table), possibly between the loser's write and its fsync; the loser
    syncs what is left and goes on to the commit, which finds the winner's files."""
    from walkit._core.lake import parse_lake_uri
    from walkit.lake._durable import sync_files

    data = tmp_path / "lake" / "t" / "data"
    data.mkdir(parents=True)
    kept = data / "kept.parquet"
    kept.write_bytes(b"x")
    sync_files(
        parse_lake_uri(f"file://{tmp_path / 'lake'}"),
        [f"file://{data / 'gone.parquet'}", f"file://{kept}"],
    )
    assert kept.read_bytes() == b"x"


async def test_the_tables_metadata_files_are_fsynced_as_pyiceberg_writes_them(
    memory_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyiceberg writes the table's metadata (metadata JSON, manifest lists, manifests) itself;
    the lake's FileIO fsyncs each file, and the metadata directory, as pyiceberg closes it:
    before the catalog's pointer moves to it."""
    lake_dir = tmp_path / "lake"
    synced: set[str] = set()
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.add(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    async with _two_ledgers_to_offload(memory_url, tmp_path, lake_dir) as log:
        assert await offload(log) == 2
    metadata = lake_dir / "durable" / "metadata"
    written = sorted(str(p) for p in metadata.iterdir())
    assert any(p.endswith(".metadata.json") for p in written), written
    assert any(p.endswith(".avro") for p in written), written
    assert [p for p in written if p not in synced] == []
    assert {str(metadata), str(metadata.parent), str(lake_dir)} <= synced
