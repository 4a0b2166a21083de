"""The log API end to end with in-process bookies: appends and reads, rolls, tailing across
rolls and takeovers, two writers, snapshots, truncation, empty-ledger cleanup, bad metadata."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
from trio.lowlevel import ParkingLot

import walkit
from tests.client.conftest import cluster, connect
from tests.log._history import LogHistory
from walkit import Log, LogPosition, LogRecord, NoSuchLogError
from walkit.client import client_services
from walkit.errors import (
    ConfigurationError,
    InvalidArgumentError,
    InvalidMetadataError,
    LedgerClosedError,
    WriterFencedError,
)
from walkit.log import log_path
from walkit.log._roll import ROLL_RETRY_DELAY
from walkit.placement import BasePlacementPolicy

P = LogPosition.parse


async def read_all(log: Log, start: LogPosition | str = "earliest") -> list[LogRecord]:
    return [rec async for rec in log.reader(start, follow=False)]


async def read_until(
    log: Log, end: LogPosition, start: LogPosition | str = "earliest"
) -> list[LogRecord]:
    """Every record before ``end``, waiting for them: a reader sees the last records of an open
    ledger once the bookies know they are acknowledged (the writer's next entry or explicit
    LAC tells them a few ms later)."""
    with trio.fail_after(30):
        return [rec async for rec in log.reader(start, end=end)]


async def test_append_and_read_back_on_every_metadata_store(
    metadata_url: str, tmp_path: Path
) -> None:
    async with cluster(metadata_url, tmp_path, 3), connect(metadata_url) as client:
        async with Log.open(client, "orders") as log:
            async with log.writer() as w:
                first = await w.append(b"record")
                batch = await w.append_batch([b"r1", b"r2"])
                assert first == w.first_position
                # The batch shares one entry (a record set): slots 0 and 1 of the next entry.
                assert batch == [
                    LogPosition(first.ledger_seq, 1, 0),
                    LogPosition(first.ledger_seq, 1, 1),
                ]
            got = await read_all(log)
            assert [(r.position, r.payload) for r in got] == [
                (first, b"record"),
                (batch[0], b"r1"),
                (batch[1], b"r2"),
            ]
        # A second open finds the same log.
        again = await Log.open(client, "orders", create=False)
        assert [r.payload for r in await read_all(again)] == [b"record", b"r1", b"r2"]


async def test_rolls_by_entries_and_by_bytes(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "by-count", roll_entries=10)
        async with log.writer() as w:
            positions = [await w.append(b"n%03d" % i) for i in range(35)]
        md = await log.metadata()
        assert len(md.ledgers) == 4
        assert [p.ledger_seq for p in positions] == [s for s in (1, 2, 3, 4) for _ in range(10)][
            :35
        ]
        for lg in md.ledgers:  # every ledger is closed once the writer closed
            assert (await client.ledger_metadata(lg.ledger_id)).is_closed
        got = await read_all(log)
        assert [r.position for r in got] == positions

        log2 = await Log.open(client, "by-size", roll_bytes=1000, roll_entries=None)
        async with log2.writer() as w:
            for i in range(10):
                await w.append(bytes([i]) * 400)
        # 400-byte records: a ledger passes 1000 bytes after its third record.
        assert len((await log2.metadata()).ledgers) == 4
        assert [r.payload[0] for r in await read_all(log2)] == list(range(10))


async def test_concurrent_appends_get_positions_in_call_order_across_rolls(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "fifo", roll_entries=2)
        order = itertools.count()
        results: list[tuple[int, LogPosition]] = []
        async with log.writer() as w:

            async def appender(task: int) -> None:
                for n in range(15):
                    ticket = next(order)  # taken right before the call: the call order
                    if n % 4 == 3:
                        poss = await w.append_batch(
                            [b"t%d-%d-a" % (task, n), b"t%d-%d-b" % (task, n)]
                        )
                        results.append((ticket, poss[0]))
                        assert poss[1] > poss[0]
                    else:
                        results.append((ticket, await w.append(b"t%d-%d" % (task, n))))
                    await trio.lowlevel.checkpoint()

            async with trio.open_nursery() as nursery:
                for task in range(8):
                    nursery.start_soon(appender, task)
        by_call = [pos for _, pos in sorted(results)]
        assert by_call == sorted(by_call), "positions are not in call order"
        got = await read_all(log)
        assert len(got) == 8 * 15 + 8 * 3
        assert [r.position for r in got] == sorted(r.position for r in got)
        assert len((await log.metadata()).ledgers) > 3


async def test_tailing_reader_follows_rolls_and_a_takeover(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "tail", roll_entries=5)
        history = LogHistory()
        seen: list[LogRecord] = []
        read_one = ParkingLot()  # the reader wakes it for every record
        total = 40

        async def tail(task_status: trio.TaskStatus[None]) -> None:
            reader = log.reader(LogPosition.EARLIEST)
            task_status.started()
            async for rec in reader:
                seen.append(rec)
                read_one.unpark_all()
                if len(seen) == total:
                    return

        async with trio.open_nursery() as nursery:
            await nursery.start(tail)
            async with log.writer() as w1:
                for i in range(25):
                    await history.append("w1", w1, b"a%02d" % i)
                    if i % 7 == 0:
                        with trio.fail_after(20):
                            while len(seen) < i + 1:  # the reader catches up, then tails
                                await read_one.park()
            async with log.writer() as w2:
                for i in range(15):
                    await history.append("w2", w2, b"b%02d" % i)
        history.check(seen, await read_all(log))
        assert [r.payload for r in seen[:3]] == [b"a00", b"a01", b"a02"]


async def test_second_writer_fences_the_first_and_nothing_acknowledged_is_lost(
    memory_url: str, tmp_path: Path
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url) as c1,
        connect(memory_url) as c2,
    ):
        log1 = await Log.open(c1, "two", roll_entries=50)
        log2 = await Log.open(c2, "two")
        history = LogHistory()
        w1 = await log1.writer()
        took_over = trio.Event()
        w1_errors: list[BaseException] = []

        async def old_writer(task: int) -> None:
            for n in itertools.count():
                try:
                    await history.append(f"w1.{task}", w1, b"w1-%d-%d" % (task, n))
                except WriterFencedError as exc:
                    w1_errors.append(exc)
                    return
                if n == 20 and task == 0:
                    took_over.set()

        async with trio.open_nursery() as nursery:
            for task in range(4):
                nursery.start_soon(old_writer, task)
            await took_over.wait()
            async with log2.writer() as w2:
                for i in range(30):
                    await history.append("w2", w2, b"w2-%d" % i)
        assert len(w1_errors) == 4  # every old appender was fenced
        assert isinstance(w1_errors[0], walkit.errors.LedgerFencedError)
        with pytest.raises(WriterFencedError):  # and stays fenced
            await w1.append(b"late")
        with pytest.raises(WriterFencedError):
            await w1.truncate(w1.first_position)
        await w1.close()  # quiet: each append that failed raised the fence already
        history.check(await read_all(log2), await read_all(log1))
        assert len(history.acked_by("w1.0")) >= 21
        # The old writer's ledger was recovered (closed) by the takeover; the log's ledgers
        # are all closed, the new writer's last.
        md = await log2.metadata()
        for lg in md.ledgers:
            assert (await c2.ledger_metadata(lg.ledger_id)).is_closed


async def test_old_writer_that_rolls_after_a_takeover_is_fenced(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "roll-late", roll_entries=3)
        w1 = await log.writer()
        for i in range(3):
            await w1.append(b"x%d" % i)  # the next append rolls
        before = set(await client.list_ledgers())
        w2 = await log.writer()
        with pytest.raises(WriterFencedError):
            await w1.append(b"after")
        # The ledger the old writer created for its roll was deleted again.
        after = set(await client.list_ledgers())
        assert after - before == {w2.ledger_id}
        await w2.append(b"new")
        await w2.close()
        assert [r.payload for r in await read_all(log)] == [b"x0", b"x1", b"x2", b"new"]


async def test_takeover_of_a_writer_that_left_without_closing(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "crash")
        w1 = await log.writer()
        acked = [await w1.append(b"c%d" % i) for i in range(10)]
        # w1 is dropped without close (a crashed process): its ledger stays open.
        assert not (await client.ledger_metadata(w1.ledger_id)).is_closed
        async with log.writer() as w2:
            assert w2.first_position > acked[-1]
            await w2.append(b"next")
        assert (await client.ledger_metadata(w1.ledger_id)).last_entry_id == 9
        assert [r.payload for r in await read_all(log)] == [b"c%d" % i for i in range(10)] + [
            b"next"
        ]


async def test_empty_ledgers_left_by_failovers_are_dropped_and_deleted(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "empty")
        async with log.writer() as w:
            await w.append(b"keep")
            kept = w.ledger_id
        abandoned = []
        for _ in range(5):  # writers that take over and die before writing anything
            w = await log.writer()
            abandoned.append(w.ledger_id)
        md = await log.metadata()
        # Never more than the data ledger, and the last writer's (still open) ledger.
        assert [lg.ledger_id for lg in md.ledgers] == [kept, abandoned[-1]]
        existing = set(await client.list_ledgers())
        assert not existing & set(abandoned[:-1])
        async with log.writer() as w:
            await w.append(b"more")
        md = await log.metadata()
        assert md.ledgers[0].ledger_id == kept
        assert abandoned[-1] not in {lg.ledger_id for lg in md.ledgers}
        assert abandoned[-1] not in set(await client.list_ledgers())
        assert [r.payload for r in await read_all(log)] == [b"keep", b"more"]


async def test_snapshots_save_restore_and_keep(memory_url: str, tmp_path: Path) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=lambda: 1.5) as client,
    ):
        log = await Log.open(client, "snaps", keep_snapshots=2, snapshot_chunk_size=1000)
        assert await log.latest_snapshot() is None
        async with log.writer() as w:
            p1 = await w.append(b"one")
            p2 = await w.append(b"two")
        state = bytes(range(256)) * 20  # 5120 bytes: 6 chunks
        s1 = await log.save_snapshot(p1, state)
        assert (s1.position, s1.size, s1.time_ms) == (p1, len(state), 1500)

        async def pieces() -> AsyncIterator[bytes]:
            for i in range(7):
                yield b"%d" % i * 333

        s2 = await log.save_snapshot(str(p2), pieces())
        latest = await log.latest_snapshot()
        assert latest == s2 and latest is not None
        assert await latest.read() == b"".join(b"%d" % i * 333 for i in range(7))
        chunks = [c async for c in latest]
        assert [len(c) for c in chunks] == [1000, 1000, 331]
        assert await s1.read() == state
        # A third snapshot drops the one at the lowest position, and deletes its ledger.
        s3 = await log.save_snapshot(p2, b"")
        assert [s.ledger_id for s in await log.snapshots()] == [s2.ledger_id, s3.ledger_id]
        assert s1.ledger_id not in await client.list_ledgers()
        assert await s3.read() == b""
        with pytest.raises(walkit.errors.NoSuchLedgerError):
            await s1.read()
        # Bad input.
        with pytest.raises(InvalidArgumentError):
            await log.save_snapshot(LogPosition.LATEST, b"x")
        with pytest.raises(InvalidArgumentError):
            await log.save_snapshot(P("99:0"), b"x")
        with pytest.raises(InvalidArgumentError):
            await log.save_snapshot(p2, "text")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            await log.save_snapshot("nonsense", b"x")
        ledgers_before = set(await client.list_ledgers())

        async def bad_pieces() -> AsyncIterator[bytes]:
            yield b"ok"
            yield "not bytes"  # type: ignore[misc]

        with pytest.raises(InvalidArgumentError):
            await log.save_snapshot(p2, bad_pieces())
        assert set(await client.list_ledgers()) == ledgers_before  # no half-written snapshot


async def test_snapshot_bytes_are_checked_against_the_recorded_crc(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "crc")
        snap = await log.save_snapshot(LogPosition.EARLIEST, b"state")
        store = client.metadata_store
        node = await store.get(log_path("crc"))
        md = walkit.LogMetadata.from_bytes("crc", node.value)
        import attrs

        bad = attrs.evolve(md, snapshots=(attrs.evolve(md.snapshots[0], crc32c=snap.crc32c ^ 1),))
        await store.set(log_path("crc"), bad.to_bytes(), node.version)
        latest = await log.latest_snapshot()
        assert latest is not None
        with pytest.raises(walkit.errors.DigestMismatchError):
            await latest.read()


async def test_truncation(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "trunc", roll_entries=5)
        async with log.writer() as w:
            positions = [await w.append(b"t%02d" % i) for i in range(17)]
            md = await log.metadata()
            first_two = [lg.ledger_id for lg in md.ledgers[:2]]
            third = md.ledgers[2].ledger_id
            cut = positions[12]  # the third ledger's third record
            assert cut.ledger_seq == md.ledgers[2].seq and cut.entry_id == 2
            await w.truncate(cut)
            md = await log.metadata()
            assert md.truncated == cut
            assert md.ledgers[0].ledger_id == third
            remaining = set(await client.list_ledgers())
            assert not remaining & set(first_two)
            assert third in remaining  # never the ledger holding the point
            # Readers starting before it start at it.
            end = w.end_position
            assert [r.position for r in await read_until(log, end)] == positions[12:]
            assert [r.position for r in await read_until(log, end, positions[14])] == positions[14:]
            # Never backwards; not past the end; not LATEST.
            await w.truncate(positions[3])
            assert (await log.metadata()).truncated == cut
            with pytest.raises(InvalidArgumentError):
                await w.truncate(LogPosition(w.ledger_seq + 1, 0))
            with pytest.raises(InvalidArgumentError):
                await w.truncate(LogPosition(w.ledger_seq, 3))
            with pytest.raises(InvalidArgumentError):
                await w.truncate(LogPosition.LATEST)
            # Up to the end of the current ledger is fine.
            await w.truncate(w.end_position)
            assert len((await log.metadata()).ledgers) == 1
            assert await read_all(log) == []
            later = await w.append(b"later")
        assert [r.position for r in await read_all(log)] == [later]


async def test_reader_in_a_truncated_ledger_jumps_to_the_truncation_point(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "jump", roll_entries=4, read_batch=2)
        async with log.writer() as w:
            positions = [await w.append(b"j%02d" % i) for i in range(12)]
            reader = log.reader(end=w.end_position)
            got = [await reader.next(), await reader.next()]  # a batch of 2 from ledger 1
            await w.truncate(positions[9])
            async for rec in reader:
                got.append(rec)
        # The reader may finish the ledger it is in (its entries are not reclaimed at once),
        # then goes on at the truncation point: in order, nothing missing from there on.
        read = [r.position for r in got if r is not None]
        k = read.index(positions[9])
        assert read == positions[:k] + positions[9:]
        assert k >= 2


async def test_reader_start_end_latest_and_next_timeout(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "latest", roll_entries=3)
        tail_from_latest = log.reader(LogPosition.LATEST)
        assert await tail_from_latest.next(timeout=0.05) is None
        async with log.writer() as w:
            old = [await w.append(b"old%d" % i) for i in range(5)]
            # LATEST is after the last record readers can see: wait until that is old[4].
            await read_until(log, w.end_position)
            latest = log.reader("latest")
            assert await latest.next(timeout=0.05) is None
            new = await w.append(b"new")
            rec = await latest.next(timeout=10)
            assert rec is not None and (rec.position, rec.payload) == (new, b"new")
            rec = await tail_from_latest.next(timeout=10)
            assert rec is not None and rec.payload == b"old0"
        # start is inclusive, end exclusive; a start between ledgers moves to the next one.
        got = [r.position async for r in log.reader(old[1], end=old[4])]
        assert got == old[1:4]
        got = [r.position async for r in log.reader(old[2].next(), follow=False)]
        assert got == [*old[3:], new]
        assert [r async for r in log.reader(new.next(), follow=False)] == []


async def test_bad_input_and_options(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        with pytest.raises(InvalidArgumentError):
            Log.open(client, "a/b")
        with pytest.raises(InvalidArgumentError):
            Log.open(client, "")
        with pytest.raises(ConfigurationError):
            Log.open(client, "x", roll_entrys=3)  # type: ignore[call-arg]
        with pytest.raises(ConfigurationError):
            Log.open(client, "x", roll_entries=0)
        with pytest.raises(ConfigurationError):
            Log.open(client, "x", password="text")  # type: ignore[arg-type]
        with pytest.raises(NoSuchLogError):
            await Log.open(client, "missing", create=False)
        with pytest.raises(walkit.errors.NoSuchNodeError):  # NoSuchLogError is one
            await Log.open(client, "missing", create=False)
        with pytest.raises(ConfigurationError):
            await Log.open(client, "quorums", ensemble_size=2, write_quorum=3)
        log = await Log.open(client, "quorums", ensemble_size=3, write_quorum=3, ack_quorum=2)
        assert log.config.write_quorum == 3
        again = await Log.open(client, "quorums")  # the stored configuration is used
        assert again.config == log.config
        with pytest.raises(ConfigurationError):
            await Log.open(client, "quorums", write_quorum=2)
        with pytest.raises(InvalidArgumentError):
            log.reader("1:x")
        async with log.writer() as w:
            with pytest.raises(InvalidArgumentError):
                await w.append("text")  # type: ignore[arg-type]
            with pytest.raises(InvalidArgumentError):
                await w.append_batch(b"not a list")  # type: ignore[arg-type]
            await w.append(b"fine")
        with pytest.raises(LedgerClosedError):
            await w.append(b"after close")
        await w.close()  # twice is fine
        await log.aclose()
        with pytest.raises(walkit.errors.ClientClosedError):
            log.writer()


async def test_malformed_log_metadata(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "good")
        store = client.metadata_store
        await store.create(log_path("bad"), b'{"format": 1, "name": "bad"}')
        with pytest.raises(InvalidMetadataError):
            await Log.open(client, "bad")
        # A log whose node goes bad under a handle: every call says so; the client lives on.
        node = await store.get(log_path("good"))
        await store.set(log_path("good"), b"\x00garbage", node.version)
        with pytest.raises(InvalidMetadataError):
            await log.writer()
        with pytest.raises(InvalidMetadataError):
            await read_all(log)
        with pytest.raises(InvalidMetadataError):
            await log.latest_snapshot()
        other = await Log.open(client, "other")
        async with other.writer() as w:
            await w.append(b"still fine")
        assert [r.payload for r in await read_all(other)] == [b"still fine"]


async def test_errors_in_the_writer_block_come_out_unwrapped(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "unwrap")
        with pytest.raises(KeyError):
            async with log.writer() as w:
                await w.append(b"x")
                raise KeyError("mine")
        # The writer closed its ledger on the way out.
        assert (await client.ledger_metadata(w.ledger_id)).is_closed
        assert [r.payload for r in await read_all(log)] == [b"x"]


async def test_a_writer_rolls_away_from_a_failed_ledger(memory_url: str, tmp_path: Path) -> None:
    async with (
        cluster(memory_url, tmp_path, 3) as bookies,
        connect(memory_url, add_timeout=1.0, read_timeout=1.0) as client,
    ):
        log = await Log.open(client, "heal")
        async with log.writer() as w:
            before = [await w.append(b"before-%d" % i) for i in range(5)]
            failed_ledger = w.ledger_id
            await bookies.stop(0)  # E=3 on 3 bookies: no replacement for it
            with pytest.raises(walkit.errors.NotEnoughBookiesError):
                for i in range(100):
                    await w.append(b"lost-%d" % i)
            await bookies.start(0)
            # The bookie is registered again (start() returns once it is); wait until the
            # client's placement sees it (its metadata watch). A roll that failed meanwhile is
            # retried ROLL_RETRY_DELAY later, on the writer's clock, and until then appends
            # fail fast: wait for that very moment. Then the next append must roll.
            placement = client_services(client).context.placement
            assert isinstance(placement, BasePlacementPolicy)
            with trio.fail_after(30):
                while len(placement.writable_bookies()) < 3:  # noqa: ASYNC110 (a watch's effect)
                    await trio.sleep(0.01)
            retry_at = w._roller.retry_at
            assert retry_at <= trio.current_time() + ROLL_RETRY_DELAY
            await trio.sleep_until(retry_at)
            with trio.fail_after(30):
                after = await w.append(b"after")
            assert w.ledger_id != failed_ledger and after.ledger_seq > before[0].ledger_seq
        md = await client.ledger_metadata(failed_ledger)
        assert md.is_closed and md.last_entry_id >= 4
        got = [r.payload for r in await read_all(log)]
        assert got[:5] == [b"before-%d" % i for i in range(5)] and got[-1] == b"after"
        assert all(p.startswith(b"lost-") for p in got[5:-1])


async def test_a_log_created_without_a_password_gets_a_random_one(
    memory_url: str, tmp_path: Path
) -> None:
    """The ledgers' master key is no longer public: a log created without a password gets a
    random one, kept in its metadata, which every client of the log picks up."""
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "secret")
        async with log.writer() as w:
            pos = await w.append(b"one")
        assert len(log.options.password) == 32
        md = await log.metadata()
        assert md.config.password == log.options.password
        ledger_id = next(ll.ledger_id for ll in md.ledgers if ll.seq == pos.ledger_seq)
        with pytest.raises(walkit.UnauthorizedAccessError):
            await client.open_ledger(ledger_id, password=b"")
        async with connect(memory_url) as other:
            again = await Log.open(other, "secret")
            assert again.options.password == log.options.password
            assert [r.payload for r in await read_all(again)] == [b"one"]
        other_log = await Log.open(client, "another")
        assert other_log.options.password != log.options.password
        # A password given at creation is the ledgers' password, and is not stored.
        chosen = await Log.open(client, "chosen", password=b"pw")
        assert chosen.options.password == b"pw"
        assert (await chosen.metadata()).config.password == b""
        async with chosen.writer() as w:
            await w.append(b"x")
        assert [
            r.payload for r in await read_all(await Log.open(client, "chosen", password=b"pw"))
        ] == [b"x"]
