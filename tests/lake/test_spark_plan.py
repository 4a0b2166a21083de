"""The Spark source reads the bookies: a ledger that lives only in the lake (offloaded, its
bookies' copy deleted) is refused in words when a read is planned, not with a NoSuchLedgerError
that looks like a race; a read that starts after it plans as before."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.client.conftest import cluster, connect
from walkit import Log
from walkit.errors import ConfigurationError
from walkit.spark._connect import Connection
from walkit.spark._read_io import log_state


async def test_a_lake_only_ledger_is_refused_when_spark_plans(
    memory_url: str, tmp_path: Path
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        log = await Log.open(
            client,
            "orders",
            roll_entries=5,
            offload_to=f"file://{tmp_path / 'lake'}",
            offload_deletion_lag=0,
        )
        async with log.writer() as w:
            for i in range(20):
                await w.append(b"order-%d" % i)
        assert await log.offload() >= 2
        md = await log.metadata()
        gone = [x for x in md.offloaded if x.bookies_deleted]
        assert gone, md.offloaded
        conn = Connection(memory_url)
        with pytest.raises(ConfigurationError, match="lives only in the lake"):
            await log_state(conn, "orders", 0)
        # From the first ledger still on the bookies on, the plan is as before.
        on_bookies = [lg.seq for lg in md.ledgers if md.lake_ledger(lg.ledger_id) not in gone]
        state = await log_state(conn, "orders", min(on_bookies))
        assert state.ledgers
