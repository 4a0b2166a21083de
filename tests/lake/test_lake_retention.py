"""Retention over offloaded ledgers: whole files leave the table and the lake, snapshots are
expired, and a durable consumer holds retention in the lake as on the bookies."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.client.conftest import cluster, connect
from tests.lake.test_crashes import _fill, _lake, data_files
from walkit import Log


async def test_retention_removes_lake_files_and_consumers_hold_it(
    memory_url: str, tmp_path: Path, lake_opts: dict[str, Any]
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        log = await Log.open(
            client,
            "kept",
            roll_entries=5,
            offload_deletion_lag=0,
            **lake_opts,
        )
        payloads = await _fill(log, 30)
        await log.offload()
        md = await log.metadata()
        assert len(md.offloaded) >= 5
        # A consumer that committed into the third offloaded ledger holds the rest.
        consumer = log.consumer("audit")
        seen = []
        async for rec in log.reader(follow=False):
            seen.append(rec)
            if len(seen) == 12:
                break
        await consumer.commit(seen[-1].position)
        result = await log.apply_retention(retain_records=0)
        assert result.dropped and all(
            lg.seq < seen[-1].position.ledger_seq for lg in result.dropped
        )
        after = await log.metadata()
        gone = {lg.ledger_id for lg in result.dropped}
        assert not gone & {x.ledger_id for x in after.offloaded}
        lake = _lake(log)
        table = lake.table()
        assert table is not None
        in_table = set(table.scan().to_arrow().column("ledger_id").to_pylist())
        assert in_table == {x.ledger_id for x in after.offloaded}
        assert len(table.snapshots()) == 1  # expired
        assert data_files(lake) == {f for x in after.offloaded for f in x.files}
        rest = [r.payload async for r in log.reader(follow=False)]
        assert rest == payloads[len(payloads) - len(rest) :]
        assert len(rest) >= len(payloads) - 12


async def test_deleting_the_log_drops_its_table_and_files(memory_url: str, tmp_path: Path) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        log = await Log.open(
            client, "doomed", roll_entries=5, offload_to=f"file://{tmp_path / 'lake'}"
        )
        await _fill(log, 16)
        assert await log.offload() == 3
        lake = _lake(log)
        data = Path(lake.uri.root) / lake.table_name / "data"
        assert len(list(data.iterdir())) == 3
        await Log.delete(client, "doomed")
        assert list(data.iterdir()) == []
        assert lake.table(create=False) is None
