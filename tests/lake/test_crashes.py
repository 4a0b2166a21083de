"""An offload that dies at each of its steps, and two offloaders at once, leave every record
exactly once in the table and in the log, and no orphan file, after the next pass."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.client.conftest import cluster, connect
from walkit import Log
from walkit.lake._commit import table_files
from walkit.lake._table import Lake, lake_of
from walkit.log._offload import offload

#: Records' timestamps: now, so that the writer's housekeeping (offload_after) leaves them.
BASE_MS = int(time.time() * 1000)


class Crash(Exception):
    """What the fault hook raises: the offloader dies there."""


async def _fill(log: Log, records: int) -> list[bytes]:
    payloads = []
    async with log.writer() as w:
        for i in range(records):
            payload = f"r{i:04d}".encode()
            await w.append(payload, key=b"k", timestamp=BASE_MS + i * 1000)
            payloads.append(payload)
    return payloads


def data_files(lake: Lake) -> set[str]:
    """Every file under the table's data directory, as URIs."""
    from pyarrow import fs

    from walkit.lake._commit import _fs

    filesystem, base = _fs(lake)
    infos = filesystem.get_file_info(fs.FileSelector(base, allow_not_found=True))
    return {f"{lake.data_dir}/{i.path.rsplit('/', 1)[-1]}" for i in infos}


def _lake(log: Log) -> Lake:
    lake = lake_of(log.name, log.options.offload_to, log.options.offload_catalog)
    assert lake is not None
    return lake


async def _check_exactly_once(log: Log, payloads: list[bytes]) -> None:
    md = await log.metadata()
    lake = _lake(log)
    table = lake.table()
    assert table is not None
    rows = table.scan().to_arrow()
    keys = list(
        zip(
            rows.column("ledger_seq").to_pylist(),
            rows.column("entry_id").to_pylist(),
            rows.column("slot").to_pylist(),
            strict=True,
        )
    )
    assert len(keys) == len(set(keys)) == sum(x.records for x in md.offloaded)
    held = table_files(table)
    assert {lid: set(x.files) for lid in held for x in md.offloaded if x.ledger_id == lid} == held
    assert data_files(lake) == set().union(*held.values())  # no orphan file
    assert [r.payload async for r in log.reader(follow=False)] == payloads


@pytest.mark.parametrize("step", ["columns", "files", "commit", "cas", "bookies"])
async def test_a_crash_at_each_step_is_finished_by_the_next_pass(
    memory_url: str, tmp_path: Path, step: str, lake_opts: dict[str, Any]
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        log = await Log.open(
            client,
            "crashy",
            roll_entries=5,
            offload_deletion_lag=0,
            **lake_opts,
        )
        payloads = await _fill(log, 23)

        async def hook(at: str, _ledger_id: int) -> None:
            if at == step:
                raise Crash(at)

        with pytest.raises(Crash):
            await offload(log, hook=hook)
        await log.offload()
        await _check_exactly_once(log, payloads)
        md = await log.metadata()
        assert len(md.offloaded) == len(md.ledgers) - 1


async def test_two_offloaders_at_once(
    memory_url: str, tmp_path: Path, lake_opts: dict[str, Any]
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time) as client,
        connect(memory_url, wall_clock=time.time) as other,
    ):
        opts = {"roll_entries": 4, **lake_opts}
        log = await Log.open(client, "raced", **opts)
        payloads = await _fill(log, 30)
        twin = await Log.open(other, "raced", **opts)
        counts: list[int] = []

        async def run(handle: Log) -> None:
            counts.append(await handle.offload())

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, log)
            tg.start_soon(run, twin)
        md = await log.metadata()
        assert sum(counts) == len(md.offloaded) == len(md.ledgers) - 1
        await log.offload()  # the next pass: strays of the lost races are gone
        await _check_exactly_once(log, payloads)
