"""Bulk appends end to end with in-process bookies (disk storage): staged ledgers linked into
a log in one CAS, exactly-once sink marks, fencing of the current writer, and the cleanup of
what failed jobs staged."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.client.conftest import cluster, connect
from tests.log._history import LogHistory
from walkit import Log, LogPosition, LogRecord
from walkit.errors import InvalidArgumentError, WriterFencedError
from walkit.log import LinkResult


async def read_all(log: Log) -> list[LogRecord]:
    return [rec async for rec in log.reader(LogPosition.EARLIEST, follow=False)]


async def stage(log: Log, job: str, part: int, payloads: list[bytes]) -> tuple[int, int]:
    """What one task does: a staged ledger with its records, closed; (ledger id, last entry)."""
    lw = await log.stage_ledger(job, part)
    if payloads:
        await lw.append_batch(payloads)
    await lw.close()
    return lw.id, lw.last_add_confirmed


async def test_linked_ledgers_read_back_in_part_order_after_the_existing_records(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "events", password=b"pw")
        async with log.writer() as w:
            before = await w.append_batch([b"old0", b"old1"])
        parts = [[b"p0.%d" % i for i in range(5)], [b"p1.0"], [b"p2.%d" % i for i in range(3)]]
        # Tasks finish in any order; the committer links in part order.
        staged: dict[int, tuple[int, int]] = {}
        async with trio.open_nursery() as nursery:
            for part in (2, 0, 1):

                async def task(part: int = part) -> None:
                    staged[part] = await stage(log, "job-1", part, parts[part])

                nursery.start_soon(task)
        assert await log.staged_ledgers("job-1") != []
        records_before = await read_all(log)
        assert [r.payload for r in records_before] == [b"old0", b"old1"]  # invisible till linked

        result = await log.link_ledgers(
            [staged[p][0] for p in range(3)],
            job="job-1",
            expected_last_entries=[staged[p][1] for p in range(3)],
        )
        assert isinstance(result, LinkResult)
        assert result.records == 9 and not result.replayed
        seq0 = before[0].ledger_seq
        assert [lg.seq for lg in result.ledgers] == [seq0 + 1, seq0 + 2, seq0 + 3]
        assert result.first == LogPosition(seq0 + 1, 0)
        assert result.end == LogPosition(seq0 + 3, 3)
        got = await read_all(log)
        assert [r.payload for r in got] == [b"old0", b"old1", *parts[0], *parts[1], *parts[2]]
        assert got[2].position == LogPosition(seq0 + 1, 0)
        assert await log.staged_ledgers() == []

        # A writer takes over normally after the linked records, and the reader follows.
        async with log.writer() as w:
            assert w.first_position > got[-1].position
            await w.append(b"after")
        assert [r.payload for r in await read_all(log)][-2:] == [b"p2.2", b"after"]
        # Every listed ledger is closed: none of the linked ones is left open.
        md = await log.metadata()
        for lg in md.ledgers:
            assert (await client.ledger_metadata(lg.ledger_id)).is_closed


async def test_link_fences_the_current_writer_and_loses_none_of_its_records(
    memory_url: str, tmp_path: Path
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url) as c1,
        connect(memory_url) as c2,
    ):
        log1 = await Log.open(c1, "busy", roll_entries=7)
        log2 = await Log.open(c2, "busy")
        history = LogHistory()
        writer = await log1.writer()
        enough = trio.Event()
        fenced: list[BaseException] = []

        async def keep_writing() -> None:
            for n in range(10_000):
                try:
                    await history.append("w", writer, b"w%d" % n)
                except WriterFencedError as exc:
                    fenced.append(exc)
                    return
                if n == 15:
                    enough.set()
                await trio.sleep(0.001)

        staged = await stage(log2, "bulk", 0, [b"bulk%d" % i for i in range(20)])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(keep_writing)
            await enough.wait()
            result = await log2.link_ledgers([staged[0]], job="bulk")
        assert fenced, "the writer was not fenced"
        got = await read_all(log2)
        history.check(got)
        payloads = [r.payload for r in got]
        # Every acknowledged record comes before the linked ones, which are last and whole.
        assert payloads[-20:] == [b"bulk%d" % i for i in range(20)]
        assert set(payloads[:-20]) >= {p for _, p, _ in history.acked}
        assert result.ledgers[-1] == (await log2.metadata()).last


async def test_a_replayed_sink_batch_is_not_appended_twice(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "stream")
        a = await stage(log, "q.0", 0, [b"a0", b"a1"])
        first = await log.link_ledgers([a[0]], sink=("q", 0), job="q.0")
        assert first.records == 2
        # The same batch again (a restart from a checkpoint written before the commit was
        # known): nothing is linked and the new copy is deleted.
        again = await stage(log, "q.0.retry", 0, [b"a0", b"a1"])
        replay = await log.link_ledgers([again[0]], sink=("q", 0), job="q.0.retry")
        assert replay.replayed and replay.records == 0 and replay.ledgers == ()
        assert again[0] not in await client.list_ledgers()
        # The next batch, an empty batch, and another query.
        b = await stage(log, "q.1", 0, [b"b0"])
        await log.link_ledgers([b[0]], sink=("q", 1))
        empty = await log.link_ledgers([], sink=("q", 2))
        assert empty.records == 0 and not empty.replayed
        c = await stage(log, "r.0", 0, [b"c0"])
        await log.link_ledgers([c[0]], sink=("r", 0))
        md = await log.metadata()
        assert (md.sink_batch("q"), md.sink_batch("r")) == (2, 0)
        assert [r.payload for r in await read_all(log)] == [b"a0", b"a1", b"b0", b"c0"]
        # Linking the same ledgers a second time (a retried commit) is a no-op.
        same = await log.link_ledgers([c[0]], sink=("r", 0))
        assert same.records == 1 and not same.replayed
        assert [r.payload for r in await read_all(log)] == [b"a0", b"a1", b"b0", b"c0"]


async def test_empty_and_open_staged_ledgers(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "odd")
        empty = await stage(log, "j", 0, [])
        # A task that died after writing, before closing: the link recovers (closes) it.
        lw = await log.stage_ledger("j", 1)
        await lw.append_batch([b"x0", b"x1"])
        result = await log.link_ledgers([empty[0], lw.id])
        assert [lg.ledger_id for lg in result.ledgers] == [lw.id]
        assert empty[0] not in await client.list_ledgers()  # empty ones are deleted
        assert (await client.ledger_metadata(lw.id)).last_entry_id == 1
        assert [r.payload for r in await read_all(log)] == [b"x0", b"x1"]


async def test_discarding_and_leftovers_of_failed_attempts(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "jobs", password=b"secret")
        other = await Log.open(client, "other-log")
        failed = [await stage(log, "dead-job", p, [b"d%d" % p]) for p in range(3)]
        mine = await stage(other, "dead-job", 0, [b"other"])
        found = await log.staged_ledgers("dead-job")
        assert sorted(s.ledger_id for s in found) == sorted(f[0] for f in failed)
        assert {s.part for s in found} == {0, 1, 2} and all(s.closed for s in found)
        # An aborted job deletes what it staged; another log's ledgers are left alone.
        deleted = await log.discard_staged("dead-job")
        assert sorted(deleted) == sorted(f[0] for f in failed)
        assert mine[0] in await client.list_ledgers()
        assert await read_all(log) == []
        # The job has ended: a task attempt that stages a ledger now (a zombie) gets an error
        # and its ledger is deleted at once.
        before = set(await client.list_ledgers())
        with pytest.raises(InvalidArgumentError, match="job dead-job of log jobs has ended"):
            await log.stage_ledger("dead-job", 7)
        assert set(await client.list_ledgers()) == before
        # Another log's job of the same name is another job.
        await stage(other, "dead-job", 1, [b"fine"])

        # A task attempt that failed left a ledger; the retried attempt's one is linked and
        # the commit (with the job id) deletes the leftover.
        leftover = await stage(log, "job-2", 0, [b"first attempt"])
        retried = await stage(log, "job-2", 0, [b"second attempt"])
        await log.link_ledgers([retried[0]], job="job-2")
        assert leftover[0] not in await client.list_ledgers()
        assert [r.payload for r in await read_all(log)] == [b"second attempt"]

        # A sweep of every job needs a cutoff (jobs under way keep theirs).
        with pytest.raises(InvalidArgumentError, match="created_before_ms"):
            await log.discard_staged()
        young = await stage(log, "running", 0, [b"r"])
        assert await log.discard_staged(created_before_ms=0) == []
        assert [s.ledger_id for s in await log.staged_ledgers()] == [young[0]]


async def test_link_refuses_ledgers_that_are_not_staged_for_the_log(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "strict")
        other = await Log.open(client, "elsewhere")
        plain = await client.create_ledger()
        await plain.append(b"x")
        await plain.close()
        with pytest.raises(InvalidArgumentError, match="was not staged for log strict"):
            await log.link_ledgers([plain.id])
        foreign = await stage(other, "j", 0, [b"y"])
        with pytest.raises(InvalidArgumentError, match="was not staged for log strict"):
            await log.link_ledgers([foreign[0]])
        good = await stage(log, "j", 0, [b"z0", b"z1"])
        with pytest.raises(InvalidArgumentError, match="ends at entry 1, not at 5"):
            await log.link_ledgers([good[0]], expected_last_entries=[5])
        with pytest.raises(InvalidArgumentError, match="repeated"):
            await log.link_ledgers([good[0], good[0]])
        with pytest.raises(InvalidArgumentError, match="job id"):
            await log.stage_ledger("", 0)
        with pytest.raises(InvalidArgumentError, match="part number"):
            await log.stage_ledger("j", -1)
        with pytest.raises(InvalidArgumentError, match="batch id"):
            await log.link_ledgers([good[0]], sink=("q", -1))
        assert await read_all(log) == []  # nothing was linked by the refused calls
        await log.link_ledgers([good[0]])
        with pytest.raises(InvalidArgumentError, match="belongs to the log already"):
            await log.link_ledgers([good[0], foreign[0]])
        assert [r.payload for r in await read_all(log)] == [b"z0", b"z1"]


async def test_a_tailing_reader_follows_a_link_between_two_writers(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "tailed", roll_entries=4)
        history = LogHistory()
        seen: list[LogRecord] = []
        total = 6 + 5 + 3

        async def tail(task_status: trio.TaskStatus[None]) -> None:
            reader = log.reader(LogPosition.EARLIEST)
            task_status.started()
            async for rec in reader:
                seen.append(rec)
                if len(seen) == total:
                    return

        async with trio.open_nursery() as nursery:
            await nursery.start(tail)
            w1 = await log.writer()
            for i in range(6):
                await history.append("w1", w1, b"w1-%d" % i)
            staged = await stage(log, "j", 0, [b"bulk-%d" % i for i in range(5)])
            result = await log.link_ledgers([staged[0]], job="j")
            with pytest.raises(WriterFencedError):
                await w1.append(b"late")
            async with log.writer() as w2:
                for i in range(3):
                    await history.append("w2", w2, b"w2-%d" % i)
        everything = await read_all(log)
        history.check(seen, everything)
        payloads = [r.payload for r in seen]
        assert payloads[6:11] == [b"bulk-%d" % i for i in range(5)]
        assert seen[6].position == result.first


async def test_discarding_a_family_of_jobs_by_prefix(memory_url: str, tmp_path: Path) -> None:
    from walkit.log._link import discard_jobs

    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "family")
        older = await stage(log, "q.5.run1", 0, [b"x"])  # a run that died before its commit
        mine = await stage(log, "q.5.run2", 1, [b"y"])
        other_batch = await stage(log, "q.50.run2", 0, [b"z"])
        deleted = await discard_jobs(log, "q.5.", ["q.5.run2", "q.5.run3"])
        assert sorted(deleted) == sorted([older[0], mine[0]])
        assert [s.ledger_id for s in await log.staged_ledgers()] == [other_batch[0]]
        for job in ("q.5.run1", "q.5.run2", "q.5.run3"):  # every one of them has ended
            with pytest.raises(InvalidArgumentError, match="has ended"):
                await log.stage_ledger(job, 0)
        await stage(log, "q.5.run4", 0, [b"a later run"])


async def test_record_set_ledgers_link_with_their_record_counts(
    memory_url: str, tmp_path: Path
) -> None:
    from walkit._core.record_set import encode_record_set

    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "packed", password=b"pw")
        # Part 0: two record sets of 3 and 2 records; part 1: an untagged ledger (the format
        # of staged ledgers before record sets), one record per entry; part 2: record sets
        # whose count nobody reports (the link reads their headers).
        lw = await log.stage_ledger("job-rs", 0, record_sets=True)
        await lw.append_batch(
            [encode_record_set([b"a0", b"a1", b"a2"]), encode_record_set([b"a3", b"a4"])]
        )
        await lw.close()
        old = await log.stage_ledger("job-rs", 1)
        await old.append_batch([b"b0", b"b1"])
        await old.close()
        unreported = await log.stage_ledger("job-other", 0, record_sets=True)
        await unreported.append(encode_record_set([b"c0", b"c1", b"c2", b"c3"]))
        await unreported.close()
        with pytest.raises(InvalidArgumentError, match="one count per ledger"):
            await log.link_ledgers([lw.id, old.id], record_counts=[5])
        result = await log.link_ledgers([lw.id, old.id], job="job-rs", record_counts=[5, 2])
        assert result.records == 7
        seq = result.ledgers[0].seq
        assert result.end == LogPosition(seq + 1, 2)
        more = await log.link_ledgers([unreported.id])
        assert more.records == 4 and more.end == LogPosition(seq + 2, 1)
        got = [(str(r.position), r.payload) for r in await read_all(log)]
        assert got == [
            (f"{seq}:0:0", b"a0"),
            (f"{seq}:0:1", b"a1"),
            (f"{seq}:0:2", b"a2"),
            (f"{seq}:1:0", b"a3"),
            (f"{seq}:1:1", b"a4"),
            (f"{seq + 1}:0:0", b"b0"),
            (f"{seq + 1}:1:0", b"b1"),
            *[(f"{seq + 2}:0:{i}", b"c%d" % i) for i in range(4)],
        ]
