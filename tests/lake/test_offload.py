"""Offloading closed ledgers to a file:// lake with in-process bookies: what the table and the
log's metadata hold afterwards, and that every record is there exactly once."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pyarrow.parquet as pq
import pytest

from tests._log_events import log_event
from tests.client.conftest import cluster, connect
from walkit import Log
from walkit.errors import ConfigurationError, NoSuchLogError
from walkit.lake._table import lake_of

#: Records' timestamps: now, so that the writer's housekeeping (offload_after) leaves them.
BASE_MS = int(time.time() * 1000)


async def _fill(log: Log, ledgers: int, per_ledger: int) -> list[bytes]:
    """Write ``ledgers`` ledgers of ``per_ledger`` records (with keys and timestamps) and
    leave a last, current one holding one more record."""
    payloads = []
    async with log.writer() as w:
        for i in range(ledgers * per_ledger + 1):
            payload = f"record-{i:05d}".encode()
            await w.append(payload, key=f"k{i % 7}".encode(), timestamp=BASE_MS + i)
            payloads.append(payload)
    return payloads


async def test_offload_then_read_back_exactly_once(memory_url: str, tmp_path: Path) -> None:
    lake_dir = tmp_path / "lake"
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        log = await Log.open(
            client,
            "orders",
            roll_entries=10,
            offload_to=f"file://{lake_dir}",
            offload_deletion_lag=0,
        )
        payloads = await _fill(log, 3, 10)
        before = [r async for r in log.reader(follow=False)]
        offloaded = await log.offload()
        md = await log.metadata()
        assert offloaded == len(md.offloaded) >= 3
        assert md.to_json()["format"] == 4
        assert await log.offload() == 0  # nothing left
        lake = lake_of(log.name, log.options.offload_to, log.options.offload_catalog)
        assert lake is not None
        table = lake.table()
        assert table is not None
        rows = (
            table.scan()
            .to_arrow()
            .sort_by(
                [("ledger_seq", "ascending"), ("entry_id", "ascending"), ("slot", "ascending")]
            )
        )
        in_lake = sum(x.records for x in md.offloaded)
        assert rows.num_rows == in_lake
        assert rows.column("payload").to_pylist() == [r.payload for r in before[:in_lake]]
        # The bookie copies of the ledgers a takeover does not need are gone.
        keep = {lg.ledger_id for lg in md.to_recover()}
        assert all(x.bookies_deleted == (x.ledger_id not in keep) for x in md.offloaded)
        # Files: zstd Parquet with the reader's columns.
        meta = pq.ParquetFile(md.offloaded[0].files[0].removeprefix("file://")).metadata
        assert meta.row_group(0).column(0).compression == "ZSTD"
        assert [r.payload async for r in log.reader(follow=False)] == payloads
        after = [r async for r in log.reader(follow=False)]
        assert after == before


async def test_without_offload_to_offload_is_a_configuration_error(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 1), connect(memory_url) as client:
        log = await Log.open(client, "plain", ensemble_size=1, write_quorum=1, ack_quorum=1)
        with pytest.raises(ConfigurationError, match="offload_to"):
            await log.offload()


@pytest.mark.parametrize("uri", ["file://relative/dir", "http://x/y", "s3://", 42])
async def test_bad_lake_uris_are_configuration_errors(memory_url: str, uri: object) -> None:
    async with connect(memory_url) as client:
        with pytest.raises(ConfigurationError, match="offload_to"):
            await Log.open(client, "x", offload_to=uri)  # type: ignore[arg-type]


async def test_position_at_and_readers_across_the_lake_and_the_bookies(
    memory_url: str, tmp_path: Path, lake_opts: dict[str, Any]
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        log = await Log.open(client, "timed", roll_entries=10, **lake_opts)
        payloads = await _fill(log, 4, 10)
        before = {t: await log.position_at(BASE_MS + t) for t in (0, 5, 17, 33, 40, 99)}
        assert await log.offload() >= 3
        md = await log.metadata()
        for t, pos in before.items():
            assert await log.position_at(BASE_MS + t) == pos, t
        # A reader started in the middle of an offloaded ledger, across into the bookies.
        start = before[17]
        assert md.lake_ledger(md.ledger_with_seq(start.ledger_seq).ledger_id) is not None  # type: ignore[union-attr]
        got = [r.payload async for r in log.reader(start, follow=False)]
        assert got == payloads[17:]
        # A consumer reads the lake too.
        consumer = log.consumer("c", follow=False)
        assert [r.payload async for r in consumer] == payloads


async def test_the_writer_offloads_as_it_rolls(memory_url: str, tmp_path: Path) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        log = await Log.open(
            client,
            "rolling",
            roll_entries=5,
            offload_to=f"file://{tmp_path / 'lake'}",
            offload_after=0,
        )
        payloads = await _fill(log, 4, 5)
        async with log.writer() as w:  # a takeover's housekeeping offloads the closed ones
            with anyio.fail_after(120):
                while True:  # (each offload logs its event once its metadata CAS is done)
                    with log_event("walkit.log._offload", "log_ledger_offloaded") as offloaded:
                        if len((await log.metadata()).offloaded) >= 4:
                            break
                        await offloaded.wait()
            await w.append(b"last")
        assert [r.payload async for r in log.reader(follow=False)] == [*payloads, b"last"]


async def test_metrics_of_offloads_and_lake_reads(memory_url: str, tmp_path: Path) -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time, metrics_registry=registry) as client,
    ):
        log = await Log.open(client, "seen", roll_entries=10, offload_to=f"file://{tmp_path / 'l'}")
        await _fill(log, 2, 10)
        assert await log.offload() == 2
        labels = {"log": "seen"}
        assert registry.get_sample_value("walkit_lake_offloaded_ledgers_total", labels) == 2
        assert registry.get_sample_value("walkit_lake_offloaded_files_total", labels) == 2
        assert (registry.get_sample_value("walkit_lake_offloaded_bytes_total", labels) or 0) > 0
        assert registry.get_sample_value("walkit_lake_offload_lag_seconds", labels) == 0
        assert len([r async for r in log.reader(follow=False)]) == 21
        assert registry.get_sample_value("walkit_lake_read_seconds_count", labels) == 2
        await Log.delete(client, "seen")
        with pytest.raises(NoSuchLogError):
            await log.offload()
        assert registry.get_sample_value("walkit_lake_offload_failures_total", labels) == 1
