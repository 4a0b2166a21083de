"""Lake format 2's ``producer`` column: records' idempotent-producer tags are written to the
table and read back by the log's readers (so that a writer taking over a log whose tail is in
the lake still recognises a retry), and files written without the column (format 1) read as
records without a tag."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.client.conftest import cluster, connect
from tests.lake.test_crashes import BASE_MS, _lake
from walkit import Log
from walkit._core.lake import LAKE_FORMAT
from walkit._core.record_set import ProducerTag
from walkit.errors import DuplicateRecordError
from walkit.lake._table import BASE_SCHEMA, ICEBERG_SCHEMA, PRODUCER_FIELD


async def _tagged(log: Log, count: int) -> list[tuple[bytes, ProducerTag | None]]:
    """Records of two producers and untagged ones, interleaved, one per entry or batched."""
    wrote: list[tuple[bytes, ProducerTag | None]] = []
    async with log.writer() as w:
        for i in range(count):
            payload = f"r{i:03d}".encode()
            if i % 3 == 2:
                await w.append(payload, timestamp=BASE_MS + i)
                wrote.append((payload, None))
            else:
                producer = f"p{i % 3}"
                await w.append(payload, producer_id=producer, sequence=i, timestamp=BASE_MS + i)
                wrote.append((payload, ProducerTag(producer, i)))
        batch = [b"b0", b"b1", b"b2"]
        await w.append_batch(batch, producer_id="batcher", sequence=100)
        wrote.extend((p, ProducerTag("batcher", 100 + n)) for n, p in enumerate(batch))
    return wrote


async def test_producer_tags_go_to_the_table_and_come_back(
    memory_url: str, tmp_path: Path, lake_opts: dict[str, Any]
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        log = await Log.open(client, "tags", roll_entries=4, **lake_opts)
        wrote = await _tagged(log, 14)
        await log.offload()
        md = await log.metadata()
        assert len(md.offloaded) == len(md.ledgers) - 1 >= 3
        table = _lake(log).table()
        assert table is not None
        assert table.properties["walkit.lake-format"] == str(LAKE_FORMAT) == "2"
        assert table.schema().find_field("producer") == PRODUCER_FIELD  # ids 12-14
        rows = (
            table.scan()
            .to_arrow()
            .sort_by(
                [("ledger_seq", "ascending"), ("entry_id", "ascending"), ("slot", "ascending")]
            )
        )
        in_lake = sum(x.records for x in md.offloaded)
        assert in_lake > 0
        expect = [
            None if tag is None else {"producer_id": tag.producer_id, "sequence": tag.sequence}
            for _payload, tag in wrote[:in_lake]
        ]
        assert rows.column("producer").to_pylist() == expect
        read = [(r.payload, r.producer) async for r in log.reader(follow=False)]
        assert read == wrote


async def test_a_takeover_recognises_a_retry_whose_first_copy_is_in_the_lake(
    memory_url: str, tmp_path: Path, lake_opts: dict[str, Any]
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        opts = {"roll_entries": 2, **lake_opts}
        log = await Log.open(client, "retry", **opts)
        async with log.writer() as w:
            first = await w.append(b"pay", producer_id="teller", sequence=41)
            await w.append(b"other")  # the ledger's second entry: it rolls
            await w.append(b"third")  # in the next ledger (the last: never offloaded)
        await log.offload()
        md = await log.metadata()
        ledger = md.ledger_with_seq(first.ledger_seq)
        assert ledger is not None and md.lake_ledger(ledger.ledger_id) is not None
        async with log.writer() as w:  # a new writer: it recovers the tail from the lake
            with pytest.raises(DuplicateRecordError) as caught:
                await w.append(b"pay", producer_id="teller", sequence=41)
        assert caught.value.position == first


async def test_files_without_the_producer_column_read_as_untagged(
    memory_url: str, tmp_path: Path
) -> None:
    lake_dir = tmp_path / "lake"
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        log = await Log.open(client, "old", roll_entries=4, offload_to=f"file://{lake_dir}")
        wrote = await _tagged(log, 10)
        await log.offload()
        md = await log.metadata()
        for lake in md.offloaded:  # as lake format 1 wrote them: no producer column
            for uri in lake.files:
                path = uri.removeprefix("file://")
                old = pq.read_table(path).drop_columns(["producer"])
                assert old.schema.names == [f.name for f in BASE_SCHEMA.fields]
                pq.write_table(old, path, compression="zstd")
        read = [(r.payload, r.producer) async for r in log.reader(follow=False)]
        in_lake = sum(x.records for x in md.offloaded)
        assert read[:in_lake] == [(p, None) for p, _tag in wrote[:in_lake]]
        assert read[in_lake:] == wrote[in_lake:]


def test_the_format_adds_columns_with_new_ids() -> None:
    assert ICEBERG_SCHEMA.find_field("producer").field_id == 12
    assert max(BASE_SCHEMA.field_ids) == 11 < min(ICEBERG_SCHEMA.field_ids - BASE_SCHEMA.field_ids)
