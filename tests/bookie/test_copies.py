"""Rereplication copies (adds flagged COPY) skip the journal: one entry-log write, one sync and
one synced index transaction per group, durable before the answer, with every rule of an
add kept (idempotent, never a rewrite, the ledger's key and fence)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests._cluster import process_cluster
from tests.bookie._helpers import KEY, config, connect, packet, payload_for, running_bookie
from tests.bookie.test_disk import small_filesystem
from walkit._core.wire import (
    AddFlag,
    AddResponse,
    FrameDecoder,
    ReadLacFlag,
    ReadResponse,
    StatusCode,
    decode_message,
    encode_read_request,
)
from walkit_bookie.storage._storage import DiskStorage

COPY = AddFlag.RECOVERY | AddFlag.COPY


async def test_copies_are_stored_apart_from_the_journal(tmp_path: Path) -> None:
    cfg = config([tmp_path / "d"], checkpoint_interval=3600)
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
        stats = bookie.storage.stats
        records = stats.journal_records
        requests = [
            c.add_request(5, e, payload_for(5, e, 3000), lac=e - 1, flags=COPY) for e in range(40)
        ]
        answers = await c.call_many(requests)
        assert [a.status for a in answers if isinstance(a, AddResponse)] == [StatusCode.OK] * 40
        assert stats.copies_stored == 40
        assert 1 <= stats.copy_groups <= 40
        assert stats.journal_records == records  # none of them went through the journal
        # Written around the page cache (O_DIRECT: tmp_path is not tmpfs).
        assert isinstance(bookie.storage, DiskStorage)
        entrylog = bookie.storage._entrylog
        assert entrylog is not None and entrylog._file is not None
        assert entrylog._file._direct_fd >= 0
        # Readable at once, from the entry log (never in the write cache).
        assert bookie.storage.cached_entry(5, 7) is None
        for e in (0, 7, 39):
            assert (await c.read(5, e)).packet == packet(5, e, payload_for(5, e, 3000), e - 1)
        assert (await c.read_lac(5)).lac == 38
        # A plain add beside them still goes through the journal.
        assert (await c.add(6, 0, b"plain")).status is StatusCode.OK
        assert stats.journal_records == records + 1


async def test_copies_keep_the_rules_of_an_add(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (bookie, bid), connect(bid) as c:
        for e in range(3):
            assert (await c.add(1, e, payload_for(1, e), lac=e - 1, flags=COPY)).status is (
                StatusCode.OK
            )
        # The same bytes again: an idempotent success; other bytes: refused, copy or not.
        assert (await c.add(1, 1, payload_for(1, 1), lac=0, flags=COPY)).status is StatusCode.OK
        assert (await c.add(1, 1, b"forged", lac=0, flags=COPY)).status is StatusCode.ENTRY_EXISTS
        assert (await c.add(1, 2, b"forged", lac=1)).status is StatusCode.ENTRY_EXISTS
        assert bookie.handler.stats.adds_refused_rewrite == 2
        # Another key is refused; a fenced ledger takes copies (they are recovery adds) but
        # not a COPY without RECOVERY.
        wrong = await c.add(1, 3, b"x", lac=2, flags=COPY, key=b"k" * 20)
        assert wrong.status is StatusCode.UNAUTHORIZED_ACCESS
        assert (await c.read_lac(1, flags=ReadLacFlag.FENCE)).status is StatusCode.OK
        assert (await c.add(1, 3, b"d", lac=2, flags=AddFlag.COPY)).status is (
            StatusCode.LEDGER_FENCED
        )
        assert (await c.add(1, 3, b"d", lac=2, flags=COPY)).status is StatusCode.OK
        for e in range(3):
            assert (await c.read(1, e)).packet == packet(1, e, payload_for(1, e), e - 1)


async def test_copies_and_journaled_adds_of_one_ledger_survive_a_restart(tmp_path: Path) -> None:
    cfg = config([tmp_path / "j", tmp_path / "l"], checkpoint_interval=3600)
    async with running_bookie(cfg) as (_, bid), connect(bid) as c:
        for e in range(5):  # the journal's (and the write cache's)
            assert (await c.add(9, e, payload_for(9, e), lac=e - 1)).status is StatusCode.OK
        copies = [
            c.add_request(9, e, payload_for(9, e), lac=e - 1, flags=COPY) for e in range(5, 10)
        ]
        await c.call_many(copies)
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
        assert bookie.handler.ledgers[9].last_entry == 9
        assert bookie.handler.ledgers[9].master_key == KEY
        for e in range(10):
            assert (await c.read(9, e)).packet == packet(9, e, payload_for(9, e), e - 1)
        assert (await c.add(9, 7, b"forged", lac=6)).status is StatusCode.ENTRY_EXISTS


@pytest.mark.processes
async def test_acknowledged_copies_survive_sigkill(tmp_path: Path) -> None:
    """No checkpoint, no journal record: an acknowledged copy is in a synced entry log and a
    synced index transaction, so a SIGKILL right after the answer loses nothing."""
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 1, extra_args=["--checkpoint-interval", "3600"]) as cluster:
        bookie = cluster.bookies[0]
        async with connect(bookie.address) as c:
            requests = [
                c.add_request(21, e, payload_for(21, e, 60_000), lac=e - 1, flags=COPY)
                for e in range(64)
            ]
            answers = await c.call_many(requests)
            assert {a.status for a in answers if isinstance(a, AddResponse)} == {StatusCode.OK}
        bookie.kill()
        bookie.start()
        async with connect(bookie.address) as c:
            for e in range(64):
                assert (await c.read(21, e)).packet == packet(
                    21, e, payload_for(21, e, 60_000), e - 1
                )
            assert (await c.read_lac(21)).lac == 62
            assert (await c.add(21, 3, b"forged", lac=2, flags=COPY)).status is (
                StatusCode.ENTRY_EXISTS
            )


async def test_copies_on_a_full_disk_turn_the_bookie_read_only(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "small", "3m") as small:
        cfg = config([small / "j", small / "l"], disk_usage_threshold=1.0, checkpoint_interval=3600)
        async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
            acked = []
            status = StatusCode.OK
            for e in range(20_000):
                status = (
                    await c.add(1, e, payload_for(1, e, 20_000), lac=e - 1, flags=COPY)
                ).status
                if status is not StatusCode.OK:
                    break
                acked.append(e)
            assert status is StatusCode.BOOKIE_READ_ONLY
            assert acked and bookie.read_only
            for e in (acked[0], acked[-1]):
                assert (await c.read(1, e)).packet == packet(1, e, payload_for(1, e, 20_000), e - 1)


async def test_large_read_answers_reach_a_slow_reader_whole(tmp_path: Path) -> None:
    """Large read answers are sent as (header, packet) without a join: with the socket full
    (the client reads nothing for a while) the rest goes through the writer task, in order."""
    async with running_bookie(config([tmp_path / "d"])) as (bookie, bid):
        async with connect(bid) as c:
            adds = [c.add_request(4, e, payload_for(4, e, 200_000), lac=e - 1) for e in range(40)]
            await c.call_many(adds)
        stats = bookie.handler.stats
        answered = stats.reads_answered
        stream = await trio.open_tcp_stream(bid.host, bid.port)
        async with stream:
            await stream.send_all(b"".join(encode_read_request(100 + e, 4, e) for e in range(40)))
            answers: list[ReadResponse] = []
            # A hang guard: answers queued but never sent, or bytes lost, block the reads below.
            with trio.fail_after(20):
                # ~8 MB of answers, more than the socket buffers hold: wait until the bookie has
                # answered all 40 and some wait in its queue for the writer task (its own counts;
                # no event marks an answer queued).
                while not (stats.reads_answered - answered == 40 and stats.unsent_bytes):  # noqa: ASYNC110
                    await trio.sleep(0.01)
                decoder = FrameDecoder(64 * 1024 * 1024)
                while len(answers) < 40:
                    chunk = await stream.receive_some(1 << 20)
                    assert chunk, f"the bookie closed the connection after {len(answers)} answers"
                    decoder.feed(chunk)
                    while (body := decoder.next_frame()) is not None:
                        message = decode_message(body)
                        assert isinstance(message, ReadResponse)
                        answers.append(message)
        assert [a.request_id for a in answers] == [100 + e for e in range(40)]
        for e, answer in enumerate(answers):
            assert answer.status is StatusCode.OK
            assert answer.packet == packet(4, e, payload_for(4, e, 200_000), e - 1)
