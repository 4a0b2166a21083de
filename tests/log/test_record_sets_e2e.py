"""Record sets and idempotent producers end to end (in-process bookies, memory metadata).

Checkers: every acknowledged record is read exactly once, in position order, with its bytes;
readers start and stop in the middle of an entry; old-format ledgers (one record per entry)
read as slot 0; a producer's retried record, or batch, is stored once, also after a takeover.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from tests.client.conftest import cluster, connect
from walkit import Log, LogPosition, LogRecord
from walkit._core.producers import ProducerTable
from walkit._core.record_set import FORMAT_KEY, ProducerTag
from walkit._core.retention import RECORDS_KEY
from walkit.client import client_services
from walkit.errors import (
    ConfigurationError,
    DuplicateRecordError,
    InvalidArgumentError,
    WriterFencedError,
)
from walkit.log._context import KIND_KEY
from walkit.log._link import JOB_KEY, PART_KEY, STAGED_KIND
from walkit.log._passwords import LOG_KEY


async def read_all(log: Log, start: LogPosition | str = "earliest", **kw: Any) -> list[LogRecord]:
    return [rec async for rec in log.reader(start, follow=False, **kw)]


def check_exactly_once_in_order(acked: dict[LogPosition, bytes], got: list[LogRecord]) -> None:
    positions = [r.position for r in got]
    assert positions == sorted(positions), "records out of position order"
    assert len(set(positions)) == len(positions), "a record was read twice"
    by_pos = {r.position: r.payload for r in got}
    for pos, payload in acked.items():
        assert by_pos.get(pos) == payload, f"acknowledged record at {pos} lost or changed"


async def test_concurrent_appends_share_entries_and_read_back_exactly_once(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "packed", roll_entries=20, batch_bytes=2000)
        acked: dict[LogPosition, bytes] = {}
        async with log.writer() as w:

            async def appender(task: int) -> None:
                for n in range(60):
                    payload = b"t%02d-%03d-" % (task, n) + b"x" * (n % 50)
                    acked[await w.append(payload)] = payload

            async with trio.open_nursery() as nursery:
                for task in range(32):
                    nursery.start_soon(appender, task)
            batch = [b"batch-%d" % i * 40 for i in range(300)]
            for pos, payload in zip(await w.append_batch(batch), batch, strict=True):
                acked[pos] = payload
        got = await read_all(log)
        assert len(got) == 32 * 60 + 300
        check_exactly_once_in_order(acked, got)
        entries = {p.entry_start() for p in acked}
        assert len(entries) < len(acked) / 3, "concurrent appends should share entries"
        assert max(p.slot for p in acked) > 0
        # Every entry respects the size bound (a lone larger record may go alone), and every
        # closed ledger says how many records it holds (retention counts by it).
        md = await log.metadata()
        for lg in md.ledgers:
            lr = await client.open_ledger(lg.ledger_id, password=log.options.password)
            assert lr.metadata.custom_metadata[FORMAT_KEY] == b"recordset-1"
            held = sum(1 for p in acked if p.ledger_seq == lg.seq)
            assert lr.metadata.custom_metadata[RECORDS_KEY] == str(held).encode(), lg
            if lr.last_add_confirmed >= 0:
                for entry in await lr.read(0, lr.last_add_confirmed):
                    assert len(entry.payload) <= 2000


async def test_readers_start_and_end_in_the_middle_of_an_entry(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "slots")
        async with log.writer() as w:
            first = await w.append_batch([b"a", b"b", b"c", b"d"])
            second = await w.append_batch([b"e", b"f"])
        assert {p.entry_start() for p in first} == {first[0]}
        assert [p.slot for p in first] == [0, 1, 2, 3]
        got = await read_all(log, first[1].next())
        assert [r.payload for r in got] == [b"c", b"d", b"e", b"f"]
        got = await read_all(log, str(first[2]))  # the string form round-trips
        assert [r.payload for r in got] == [b"c", b"d", b"e", b"f"]
        end = [rec async for rec in log.reader(first[1], end=second[1], follow=False)]
        assert [r.payload for r in end] == [b"b", b"c", b"d", b"e"]
        # A start past the last slot of an entry goes on with the next entry.
        got = await read_all(log, LogPosition(first[0].ledger_seq, first[0].entry_id, 99))
        assert [r.payload for r in got] == [b"e", b"f"]
        # Truncating in the middle of an entry: readers start at the point.
        async with log.writer() as w:
            await w.truncate(first[2])
        assert [r.payload for r in await read_all(log)] == [b"c", b"d", b"e", b"f"]


async def test_old_format_ledgers_read_as_one_record_per_entry(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "mixed")
        # A ledger as writers before record sets made it: no format key, raw records (staged
        # and linked, as a bulk write did).
        old = await client.create_ledger(
            3,
            2,
            2,
            password=log.options.password,
            custom_metadata={
                LOG_KEY: b"mixed",
                KIND_KEY: STAGED_KIND.encode(),
                JOB_KEY: b"old-job",
                PART_KEY: b"0",
            },
        )
        raw = [b"old-0", b"\x01\x00 looks like an envelope", b"old-2"]
        await old.append_batch(raw)
        await old.close()
        await log.link_ledgers([old.id], job="old-job")
        async with log.writer() as w:
            new = await w.append_batch([b"new-0", b"new-1"])
        got = await read_all(log)
        assert [r.payload for r in got] == [*raw, b"new-0", b"new-1"]
        assert [r.position.slot for r in got[:3]] == [0, 0, 0]
        assert [r.position.entry_id for r in got[:3]] == [0, 1, 2]
        assert [r.position for r in got[3:]] == new


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
async def test_compressed_logs_read_back(memory_url: str, tmp_path: Path, codec: str) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, f"z-{codec}", compression=codec)
        records = [b"order %06d: the same words again and again" % i for i in range(2000)]
        async with log.writer() as w:
            positions = await w.append_batch(records)
        got = await read_all(log)
        assert [r.payload for r in got] == records
        assert [r.position for r in got] == positions
        # A reader with another setting (or none) reads it too: the codec is in each entry.
        plain = await Log.open(client, f"z-{codec}")
        assert [r.payload for r in await read_all(plain)] == records
        md = await log.metadata()
        lr = await client.open_ledger(md.ledgers[0].ledger_id, password=log.options.password)
        entries = await lr.read(0, lr.last_add_confirmed)
        assert sum(len(e.payload) for e in entries) < sum(map(len, records)) / 3


async def test_bad_options_and_records(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        with pytest.raises(ConfigurationError, match="unknown compression"):
            await Log.open(client, "bad", compression="gzip")
        with pytest.raises(ConfigurationError, match="batch_bytes"):
            await Log.open(client, "bad", batch_bytes=0)
        with pytest.raises(ConfigurationError, match="batch_bytes"):
            await Log.open(client, "bad", batch_bytes=65 * 1024 * 1024)
        log = await Log.open(client, "bad")
        async with log.writer() as w:
            with pytest.raises(InvalidArgumentError, match="larger than the maximum"):
                await w.append(b"x" * (client_services(client).context.options.max_entry_size + 1))
            with pytest.raises(InvalidArgumentError, match="must be bytes"):
                await w.append("text")  # type: ignore[arg-type]
            with pytest.raises(InvalidArgumentError, match="both"):
                await w.append(b"x", producer_id="p")
            with pytest.raises(InvalidArgumentError, match="sequence"):
                await w.append(b"x", producer_id="p", sequence=-1)
            with pytest.raises(InvalidArgumentError, match="producer_id"):
                await w.append(b"x", producer_id="", sequence=1)
            with pytest.raises(InvalidArgumentError, match="255"):
                await w.append(b"x", producer_id="p" * 300, sequence=1)
            # The writer lives on after refusals.
            assert (await w.append(b"fine")).slot == 0


def test_producer_table_keeps_the_highest_and_recent_positions() -> None:
    table = ProducerTable()
    assert table.duplicate_of("p", 0) == (False, None)
    for seq in range(100):
        table.durable("p", seq, LogPosition(1, seq))
    assert table.highest("p") == 99
    assert table.duplicate_of("p", 99) == (True, LogPosition(1, 99))
    assert table.duplicate_of("p", 50) == (True, LogPosition(1, 50))
    assert table.duplicate_of("p", 3) == (True, None)  # older than the remembered positions
    assert table.duplicate_of("p", 100) == (False, None)
    assert table.duplicate_of("q", 1) == (False, None)
    table.durable("p", 7, LogPosition(9, 9))  # a second copy never moves the first
    assert table.highest("p") == 99


async def test_a_retried_append_is_stored_once(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "idem")
        async with log.writer() as w:
            first = [await w.append(b"r%d" % s, producer_id="p1", sequence=s) for s in range(5)]
            with pytest.raises(DuplicateRecordError) as dup:
                await w.append(b"r3", producer_id="p1", sequence=3)
            assert dup.value.position == first[3]
            # Two tasks racing with the same record: one stores it, the other is told where.
            outcomes: list[object] = []

            async def send() -> None:
                try:
                    outcomes.append(await w.append(b"r5", producer_id="p1", sequence=5))
                except DuplicateRecordError as exc:
                    outcomes.append(("dup", exc.position))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(send)
                nursery.start_soon(send)
            stored = [o for o in outcomes if isinstance(o, LogPosition)]
            assert len(stored) == 1
            assert ("dup", stored[0]) in outcomes
            # Other producers and untagged records are independent.
            await w.append(b"q0", producer_id="p2", sequence=0)
            await w.append(b"plain")
        got = await read_all(log)
        assert [r.payload for r in got] == [
            b"r0",
            b"r1",
            b"r2",
            b"r3",
            b"r4",
            b"r5",
            b"q0",
            b"plain",
        ]
        assert got[5].producer == ProducerTag("p1", 5)
        assert got[-1].producer is None


async def test_a_new_writer_learns_producers_from_the_tail(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "idem-takeover", roll_entries=3)
        old = await log.writer()
        positions = [
            await old.append(b"a%d" % s, producer_id="kv-client", sequence=s) for s in range(6)
        ]
        # A second writer takes the log over (the first one is fenced, as after a crash).
        async with log.writer() as new:
            with pytest.raises(DuplicateRecordError) as dup:
                await new.append(b"a5", producer_id="kv-client", sequence=5)
            assert dup.value.position == positions[5]
            assert (await new.append(b"a6", producer_id="kv-client", sequence=6)) > positions[5]
        with pytest.raises(WriterFencedError):
            await old.append(b"a6", producer_id="kv-client", sequence=6)
        await old.close()  # quiet: the append said so
        got = await read_all(log)
        assert [r.payload for r in got] == [b"a%d" % s for s in range(7)]


def test_producer_table_remembers_a_batch_as_runs_per_entry() -> None:
    table = ProducerTable()
    # 1,000 records of one producer in entries of 300 (slots 0..299), the first entry holding
    # an untagged record at slot 0 first: four runs.
    for seq in range(1000):
        entry, slot = divmod(seq + 1, 300)
        table.durable("p", seq, LogPosition(2, entry, slot))
    for seq in (0, 298, 299, 599, 999):
        entry, slot = divmod(seq + 1, 300)
        assert table.duplicate_of("p", seq) == (True, LogPosition(2, entry, slot))
    # A gap in the numbers starts a run of its own, and so does a position out of step.
    table.durable("p", 1005, LogPosition(2, 3, 101))
    table.durable("p", 1006, LogPosition(2, 3, 103))
    assert table.duplicate_of("p", 1002) == (True, None)  # never written: below the highest
    assert table.duplicate_of("p", 1005) == (True, LogPosition(2, 3, 101))
    assert table.duplicate_of("p", 1006) == (True, LogPosition(2, 3, 103))
    # Only the last RECENT_POSITIONS runs are kept.
    for seq in range(2000, 2100):
        table.durable("p", seq, LogPosition(3, seq))
    assert table.duplicate_of("p", 2099) == (True, LogPosition(3, 2099))
    assert table.duplicate_of("p", 999) == (True, None)


async def test_a_retried_batch_stores_only_what_is_not_in_the_log(
    memory_url: str, tmp_path: Path
) -> None:
    payloads = [b"b%03d" % i for i in range(100)]
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        # Small entries: a batch spans many of them.
        log = await Log.open(client, "idem-batch", batch_bytes=128)
        async with log.writer() as w:
            # The first try stored a prefix (as a writer that died in the middle would).
            prefix = await w.append_batch(payloads[:30], producer_id="p", sequence=1000)
            whole = await w.append_batch(payloads, producer_id="p", sequence=1000)
            assert whole[:30] == prefix
            assert whole == sorted(whole) and len(set(whole)) == 100
            # Retried whole: nothing is stored, every position is the first copy's.
            assert await w.append_batch(payloads, producer_id="p", sequence=1000) == whole
            with pytest.raises(DuplicateRecordError) as dup:
                await w.append(payloads[57], producer_id="p", sequence=1057)
            assert dup.value.position == whole[57]
            # Two tasks retrying one batch at once: stored once, both told the same positions.
            more = [b"m%d" % i for i in range(40)]
            answers: list[list[LogPosition]] = []

            async def retry() -> None:
                answers.append(await w.append_batch(more, producer_id="p", sequence=1100))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(retry)
                nursery.start_soon(retry)
            assert answers[0] == answers[1]
            # Untagged batches and other producers are independent.
            await w.append_batch([b"plain"])
            await w.append_batch([b"q"], producer_id="q", sequence=0)
            with pytest.raises(InvalidArgumentError, match="2\\^64"):
                await w.append_batch([b"x", b"y"], producer_id="q", sequence=2**64 - 1)
            with pytest.raises(InvalidArgumentError, match="both"):
                await w.append_batch([b"x"], producer_id="q")
            assert await w.append_batch([], producer_id="q", sequence=5) == []
        got = await read_all(log)
        assert [r.payload for r in got] == [*payloads, *more, b"plain", b"q"]
        assert [r.position for r in got[:100]] == whole
        assert [r.producer for r in got[:140]] == [
            *(ProducerTag("p", 1000 + i) for i in range(140))
        ]


async def test_a_new_writer_recognises_a_retried_batch(memory_url: str, tmp_path: Path) -> None:
    payloads = [b"t%03d" % i for i in range(50)]
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "idem-batch-takeover", batch_bytes=128)
        old = await log.writer()
        first = await old.append_batch(payloads[:20], producer_id="kv", sequence=0)
        async with log.writer() as new:  # takes over: the old writer is fenced
            again = await new.append_batch(payloads, producer_id="kv", sequence=0)
            assert again[:20] == first
        with pytest.raises(WriterFencedError):
            await old.append_batch([b"late"], producer_id="kv", sequence=50)
        await old.close()  # quiet: the append said so
        got = await read_all(log)
        assert [r.payload for r in got] == payloads
        assert [r.position for r in got] == again
