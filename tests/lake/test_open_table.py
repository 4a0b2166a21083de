"""The offloaded table read by other engines, without walkit: pyiceberg alone (in a process
that never imports walkit), then DuckDB and Polars when installed."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
import trio

from tests.client.conftest import cluster, connect
from tests.lake.test_crashes import _fill
from walkit import Log

READ = """
import json, sys
from pyiceberg.catalog.sql import SqlCatalog
lake = sys.argv[1]
catalog = SqlCatalog("walkit", uri=f"sqlite:///{lake}/catalog.db", warehouse=f"file://{lake}")
rows = catalog.load_table("walkit.x_orders_2e_v2").scan().to_arrow()
rows = rows.sort_by([("ledger_seq", "ascending"), ("entry_id", "ascending"), ("slot", "ascending")])
assert not any(m == "walkit" or m.startswith("walkit.") for m in sys.modules)
print(json.dumps([p.decode() for p in rows.column("payload").to_pylist()]))
"""


async def test_pyiceberg_duckdb_and_polars_read_the_table(memory_url: str, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        log = await Log.open(client, "orders.v2", roll_entries=5, offload_to=f"file://{lake}")
        payloads = await _fill(log, 16)
        await log.offload()
        in_lake = sum(x.records for x in (await log.metadata()).offloaded)
    with trio.fail_after(120):
        done = await trio.run_process(
            [sys.executable, "-c", READ, str(lake)],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [p.decode() for p in payloads[:in_lake]]

    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("walkit", uri=f"sqlite:///{lake}/catalog.db", warehouse=f"file://{lake}")
    table = catalog.load_table("walkit.x_orders_2e_v2")
    duckdb = pytest.importorskip("duckdb")
    arrow = table.scan().to_arrow()
    count = duckdb.sql("select count(*) from arrow where key = 'k'").fetchall()  # (by name)
    del arrow
    assert count == [(in_lake,)]
    polars = pytest.importorskip("polars")
    frame = polars.scan_iceberg(table).select(polars.len()).collect()
    assert frame.item() == in_lake
