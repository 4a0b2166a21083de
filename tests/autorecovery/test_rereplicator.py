"""Autorecovery with real bookies in this process (disk storage, loopback TCP, memory metadata):
the auditor marks, workers rereplicate, entries survive the loss of the rest of the ensemble."""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from prometheus_client import CollectorRegistry

from tests.client.conftest import Bookies, cluster, connect
from walkit import BookieId
from walkit.autorecovery import (
    Auditor,
    AutorecoveryMetrics,
    AutorecoveryOptions,
    ReplicationWorker,
    RereplicationOutcome,
    rereplicate_bookie,
    run_autorecovery,
)
from walkit.client import Client
from walkit.metadata import UnderreplicationManager, open_metadata_store, register_bookie
from walkit_bookie.storage import MemoryStorage

#: Only a guard against hangs; nothing here is about speed.
HANG_GUARD = 60
FAST = AutorecoveryOptions(poll_interval=0.2, election_lease=1.0, grace_period=0.5)
UNLIMITED = AutorecoveryOptions(entries_per_second=0, bytes_per_second=0)


async def write_ledgers(
    client: Client,
    count: int,
    entries: int,
    *,
    password: bytes = b"",
    size: int = 0,
    store_password: bool = True,
) -> dict[int, list[bytes]]:
    """``size``: each payload's length (0: short ones of varied lengths)."""
    written: dict[int, list[bytes]] = {}
    for n in range(count):
        lw = await client.create_ledger(3, 3, 2, password=password, store_password=store_password)
        payloads = [f"ledger {n} entry {i} ".encode() * (1 + i % 7) for i in range(entries)]
        if size:
            payloads = [(p * (size // len(p) + 1))[:size] for p in payloads]
        await lw.append_batch(payloads)
        await lw.close()
        written[lw.id] = payloads
    return written


async def wait_rereplicated(client: Client, ledgers: list[int], lost: BookieId) -> None:
    """Poll the metadata until no ledger lists ``lost`` and no marker is left."""
    urm = UnderreplicationManager(client.metadata_store)
    while True:
        listing = [
            lid for lid in ledgers if lost in (await client.ledger_metadata(lid)).all_bookies()
        ]
        if not listing and not await urm.list_ids():
            return
        await trio.sleep(0.05)


async def read_all(client: Client, written: dict[int, list[bytes]], password: bytes = b"") -> None:
    for lid, payloads in written.items():
        reader = await client.open_ledger(lid, password=password)
        got = await reader.read(0, reader.last_add_confirmed)
        assert [e.payload for e in got] == payloads


@pytest.mark.parametrize("password", [b"", b"a password of their own"])
async def test_lost_bookie_is_rereplicated_and_survives_the_rest_of_the_ensemble(
    memory_url: str, tmp_path: Path, password: bytes
) -> None:
    """The workers are given no password: they take it from the ledgers' metadata."""
    with trio.fail_after(HANG_GUARD):
        async with cluster(memory_url, tmp_path, 4) as bookies, connect(memory_url) as client:
            written = await write_ledgers(client, 4, 40, password=password)
            ensemble = (await client.ledger_metadata(next(iter(written)))).fragments[0][1]
            async with connect(memory_url) as service_client, trio.open_nursery() as nursery:
                await nursery.start(
                    lambda task_status: run_autorecovery(
                        service_client,
                        name="svc",
                        options=FAST,
                        rng=random.Random(1),
                        lost_bookie_delay=0,
                        task_status=task_status,
                    )
                )
                lost = ensemble[0]
                await bookies.stop(bookies.index_of(lost))
                await wait_rereplicated(client, list(written), lost)
                nursery.cancel_scope.cancel()
            for lid in written:
                md = await client.ledger_metadata(lid)
                assert lost not in md.all_bookies()
                assert md.is_closed
            # Stop the other two bookies of the original ensemble: only the replacement is
            # left, and every entry must read back from it, byte for byte.
            for other in ensemble[1:]:
                await bookies.stop(bookies.index_of(other))
            async with connect(memory_url) as reader_client:
                await read_all(reader_client, written, password)


async def test_no_valid_replacement_keeps_the_marker_and_says_why(
    memory_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="walkit")
    with trio.fail_after(HANG_GUARD):
        async with cluster(memory_url, tmp_path, 3) as bookies, connect(memory_url) as client:
            written = await write_ledgers(client, 1, 10)
            (lid,) = written
            lost = (await client.ledger_metadata(lid)).fragments[0][1][1]
            await bookies.stop(bookies.index_of(lost))
            auditor = Auditor(client, name="a", options=FAST, rng=random.Random(2))
            listed = (await client.ledger_metadata(lid)).all_bookies() - {lost}
            assert await auditor.check(listed, {lost}) == 1
            # Not the auditor: the worker exports the under-replicated count all the same.
            registry = CollectorRegistry()
            worker = ReplicationWorker(
                client,
                name="w",
                options=FAST,
                metrics=AutorecoveryMetrics(registry),
                rng=random.Random(3),
            )
            gauge = "walkit_autorecovery_underreplicated_ledgers"
            assert await worker.run_once() == 0
            assert worker.outcomes == {RereplicationOutcome.NO_REPLACEMENT: 1}
            assert registry.get_sample_value(gauge) == 1
            urm = UnderreplicationManager(client.metadata_store)
            assert await urm.list_ids() == [lid]  # the marker stays
            assert await urm.lock_owner(lid) is None  # and is free for the next attempt
            assert any(
                "rereplication_no_replacement" in r.getMessage() and str(lost) in r.getMessage()
                for r in caplog.records
            ), [r.getMessage() for r in caplog.records]
            # A fourth bookie joins: the next pass rereplicates it.
            await bookies.start(3)
            with trio.fail_after(HANG_GUARD):
                while await worker.run_once() == 0:  # noqa: ASYNC110 (a pass per poll)
                    await trio.sleep(0.05)
            assert await urm.list_ids() == []
            assert registry.get_sample_value(gauge) == 0
            assert lost not in (await client.ledger_metadata(lid)).all_bookies()


async def test_worker_killed_while_copying_another_finishes(
    memory_url: str, tmp_path: Path
) -> None:
    with trio.fail_after(HANG_GUARD):
        async with cluster(memory_url, tmp_path, 4) as bookies, connect(memory_url) as client:
            written = await write_ledgers(client, 1, 60)
            (lid,) = written
            lost = (await client.ledger_metadata(lid)).fragments[0][1][2]
            await bookies.stop(bookies.index_of(lost))
            urm = UnderreplicationManager(client.metadata_store)
            await urm.ensure_paths()
            await urm.mark(lid, [lost])
            # Worker A copies slowly (10 entries/s) and dies mid-copy: its session is lost.
            slow = AutorecoveryOptions(entries_per_second=10, window=1, poll_interval=0.2)
            store_a = await open_metadata_store(memory_url)
            async with connect(memory_url) as client_a:
                worker_a = ReplicationWorker(client_a, name="a", options=slow)
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(worker_a.run_once)
                    while worker_a.rereplicator.metrics.entries_copied < 5:  # noqa: ASYNC110 (polls a counter)
                        await trio.sleep(0.02)
                    assert await urm.lock_owner(lid) == "a"
                    # The crash: the session ends without any cleanup by the worker.
                    await client_a.metadata_store.expire_session()
                    nursery.cancel_scope.cancel()
            await store_a.aclose()
            assert await urm.lock_owner(lid) is None
            assert await urm.list_ids() == [lid]
            assert lost in (await client.ledger_metadata(lid)).all_bookies()
            worker_b = ReplicationWorker(client, name="b", options=FAST)
            assert await worker_b.run_once() == 1
            assert await urm.list_ids() == []
            md = await client.ledger_metadata(lid)
            assert lost not in md.all_bookies()
            await read_all(client, written)


async def test_open_ledger_waits_then_is_recovered_and_rereplicated(
    memory_url: str, tmp_path: Path
) -> None:
    with trio.fail_after(HANG_GUARD):
        async with cluster(memory_url, tmp_path, 4) as bookies, connect(memory_url) as client:
            lw = await client.create_ledger(3, 3, 2)
            payloads = [b"open %d" % i for i in range(20)]
            await lw.append_batch(payloads)
            lost = (await client.ledger_metadata(lw.id)).fragments[0][1][1]
            urm = UnderreplicationManager(client.metadata_store)
            await urm.ensure_paths()
            await urm.mark(lw.id, [lost])
            await bookies.stop(bookies.index_of(lost))
            worker = ReplicationWorker(client, name="w", options=FAST)
            assert await worker.run_once() == 0
            assert worker.outcomes == {RereplicationOutcome.WAITING: 1}
            assert not (await client.ledger_metadata(lw.id)).is_closed
            with trio.fail_after(HANG_GUARD):
                while await worker.run_once() == 0:  # noqa: ASYNC110 (a pass per poll)
                    await trio.sleep(0.1)
            md = await client.ledger_metadata(lw.id)
            assert md.is_closed and md.last_entry_id == 19
            assert lost not in md.all_bookies()
            reader = await client.open_ledger(lw.id)
            assert [e.payload for e in await reader.read(0, 19)] == payloads


async def test_recover_bookie_in_the_foreground(memory_url: str, tmp_path: Path) -> None:
    with trio.fail_after(HANG_GUARD):
        async with cluster(memory_url, tmp_path, 4) as bookies, connect(memory_url) as client:
            written = await write_ledgers(client, 3, 30, password=b"secret", store_password=False)
            lost = (await client.ledger_metadata(next(iter(written)))).fragments[0][1][0]
            await bookies.stop(bookies.index_of(lost))
            listing = [
                lid for lid in written if lost in (await client.ledger_metadata(lid)).all_bookies()
            ]
            # Without the password (not kept in the metadata) the marker stays, and why.
            report = await rereplicate_bookie(client, lost)
            assert report.ledgers == listing and not report.rereplicated
            assert all("password is needed" in why for why in report.failed.values())
            progress: list[tuple[int, int, int]] = []
            report = await rereplicate_bookie(
                client,
                lost,
                options=AutorecoveryOptions(passwords=[b"secret"]),
                on_ledger=lambda done, total, lid: progress.append((done, total, lid)),
            )
            assert report.ok and report.rereplicated == listing
            assert report.entries == 30 * len(listing)  # E == Qw: the lost bookie held them all
            assert [p[0] for p in progress] == list(range(1, len(listing) + 1))
            assert await UnderreplicationManager(client.metadata_store).list_ids() == []
            await read_all(client, written, b"secret")


async def test_a_dead_but_still_registered_replacement_is_passed_over(
    memory_url: str, tmp_path: Path
) -> None:
    """A bookie that died a moment ago stays registered until its session expires, so the
    placement policy may offer it as a replacement: copying to it fails, and the rereplicator plans
    again without it instead of failing the ledger."""
    with trio.fail_after(HANG_GUARD):
        async with (
            cluster(memory_url, tmp_path, 5) as bookies,
            connect(memory_url) as client,
            await open_metadata_store(memory_url) as stale_session,
        ):
            lost = None
            written: dict[int, list[bytes]] = {}
            while lost is None or len(written) < 8:  # 8 ledgers on one ensemble of 3
                more = await write_ledgers(client, 1, 20)
                lid = next(iter(more))
                ensemble = (await client.ledger_metadata(lid)).fragments[0][1]
                if lost is None:
                    lost, first = ensemble[0], set(ensemble)
                if set(ensemble) == first:
                    written.update(more)
            dead = next(b for b in bookies.ids.values() if b not in first)
            await bookies.stop(bookies.index_of(dead))
            await register_bookie(stale_session, dead)  # its registration outlives it
            await bookies.stop(bookies.index_of(lost))
            report = await rereplicate_bookie(client, lost)
            # Each ledger's replacement is one of two: the live spare, or the dead one first
            # (then the live spare): without passing over the dead one, ~255 in 256 runs fail.
            assert report.ok and set(written) <= set(report.rereplicated), report.failed
            for lid in written:
                bookies_now = (await client.ledger_metadata(lid)).all_bookies()
                assert dead not in bookies_now and lost not in bookies_now
            await read_all(client, written)


async def test_concurrent_workers_on_one_ledger(memory_url: str, tmp_path: Path) -> None:
    with trio.fail_after(HANG_GUARD):
        async with cluster(memory_url, tmp_path, 4) as bookies, connect(memory_url) as client:
            written = await write_ledgers(client, 1, 80)
            (lid,) = written
            lost = (await client.ledger_metadata(lid)).fragments[0][1][1]
            await bookies.stop(bookies.index_of(lost))
            urm = UnderreplicationManager(client.metadata_store)
            await urm.ensure_paths()
            await urm.mark(lid, [lost])
            rereplicated: list[int] = []
            async with connect(memory_url) as c1, connect(memory_url) as c2:
                workers = [
                    ReplicationWorker(c, name=f"w{i}", options=FAST, rng=random.Random(i))
                    for i, c in enumerate((c1, c2))
                ]

                async def one(worker: ReplicationWorker) -> None:
                    rereplicated.append(await worker.run_once())

                async with trio.open_nursery() as nursery:
                    for worker in workers:
                        nursery.start_soon(one, worker)
            # One of them took the lock and rereplicated it; the other found it locked (or gone).
            assert sorted(rereplicated) == [0, 1]
            md = await client.ledger_metadata(lid)
            assert lost not in md.all_bookies()
            assert len(md.fragments) == 1  # one swap, not two stacked ones
            assert await urm.list_ids() == []
            await read_all(client, written)


async def test_log_ledgers_with_mac_digests_and_metrics(memory_url: str, tmp_path: Path) -> None:
    """A log created without a password keeps a generated one: workers find it, check MAC
    digests with it and give the replacement the right master key. The metrics count."""

    from walkit import Log, LogPosition

    with trio.fail_after(HANG_GUARD):
        async with cluster(memory_url, tmp_path, 4) as bookies, connect(memory_url) as client:
            records = [b"record %d" % i for i in range(50)]
            async with (
                Log.open(
                    client, "orders", ensemble_size=3, write_quorum=3, ack_quorum=2, digest="mac"
                ) as log,
                log.writer() as writer,
            ):
                await writer.append_batch(records)
            ledgers = await client.list_ledgers()
            assert len(ledgers) == 1
            original = set((await client.ledger_metadata(ledgers[0])).fragments[0][1])
            lost = min(original)
            registry = CollectorRegistry()
            async with connect(memory_url) as service, trio.open_nursery() as nursery:
                await nursery.start(
                    lambda task_status: run_autorecovery(
                        service,
                        name="svc",
                        options=FAST,
                        registry=registry,
                        rng=random.Random(5),
                        lost_bookie_delay=0,
                        task_status=task_status,
                    )
                )
                await bookies.stop(bookies.index_of(lost))
                await wait_rereplicated(client, ledgers, lost)
                nursery.cancel_scope.cancel()
            copied = registry.get_sample_value("walkit_autorecovery_entries_copied_total")
            # Every entry of the ledger (the 50 records share entries: record sets).
            entries = (await client.ledger_metadata(ledgers[0])).last_entry_id + 1
            assert copied is not None and copied >= entries >= 1
            assert registry.get_sample_value("walkit_autorecovery_bytes_copied_total")
            assert registry.get_sample_value("walkit_autorecovery_heal_seconds_count")
            # Stop the two other original bookies: the log reads back from the replacement.
            for other in original - {lost}:
                await bookies.stop(bookies.index_of(other))
            async with Log.open(client, "orders", create=False) as log:
                got = []
                async for rec in log.reader(start=LogPosition.EARLIEST):
                    got.append(rec.payload)
                    if len(got) == len(records):
                        break
            assert got == records


async def test_periodic_check_finds_a_copy_missing_on_a_live_bookie(
    memory_url: str, tmp_path: Path
) -> None:
    with trio.fail_after(HANG_GUARD):
        async with cluster(memory_url, tmp_path, 4) as bookies, connect(memory_url) as client:
            written = await write_ledgers(client, 2, 25)
            lid = next(iter(written))
            emptied = (await client.ledger_metadata(lid)).fragments[0][1][2]
            # The bookie keeps running under the same address but lost the ledger (a wiped
            # disk restored from an old backup, say).
            await bookies.objects[bookies.index_of(emptied)].forget_ledgers([lid])
            auditor = Auditor(client, name="a", options=FAST, rng=random.Random(4))
            registered = set(bookies.ids.values())
            assert await auditor.check(registered, set(), entries=False) == 0
            assert await auditor.check(registered, set(), entries=True) == 1
            urm = UnderreplicationManager(client.metadata_store)
            found = await urm.read(lid)
            assert found is not None and found[0].missing == (emptied,)
            worker = ReplicationWorker(client, name="w", options=FAST, rng=random.Random(6))
            assert await worker.run_once() == 1
            assert emptied not in (await client.ledger_metadata(lid)).all_bookies()
            # Nothing is missing any more.
            assert await auditor.check(registered, set(), entries=True) == 0
            await read_all(client, written)


def _corrupt(bookies: Bookies, bookie: BookieId, ledger_id: int, entries: range) -> None:
    """Flip the last payload byte of stored entries: their digests no longer match."""
    storage = bookies.objects[bookies.index_of(bookie)].storage
    assert isinstance(storage, MemoryStorage)
    for entry_id in entries:
        packet = bytearray(storage.entries[(ledger_id, entry_id)])
        packet[-1] ^= 0xFF
        storage.entries[(ledger_id, entry_id)] = bytes(packet)


@asynccontextmanager
async def _lost_bookie_and_bad_copies(
    memory_url: str,
    tmp_path: Path,
    entries: int,
    bad_first: range,
    bad_second: range,
    size: int = 0,
    fragment_copies: bool = False,
) -> AsyncIterator[tuple[Bookies, Client, dict[int, list[bytes]], tuple[BookieId, ...]]]:
    """4 in-memory bookies and one ledger of ``entries``; the two survivors' copies of the
    given entries corrupted, the first bookie of the ensemble stopped. Yields the bookies, a
    client, what was written and the ensemble. ``fragment_copies``: the bookies answer
    COPY_FRAGMENT requests."""
    options = {"fragment_copies": fragment_copies}
    with trio.fail_after(HANG_GUARD):
        async with (
            cluster(memory_url, tmp_path, 4, memory=True, options=options) as bookies,
            connect(memory_url) as client,
        ):
            written = await write_ledgers(client, 1, entries, size=size)
            (lid,) = written
            ensemble = (await client.ledger_metadata(lid)).fragments[0][1]
            _corrupt(bookies, ensemble[1], lid, bad_first)
            _corrupt(bookies, ensemble[2], lid, bad_second)
            await bookies.stop(bookies.index_of(ensemble[0]))
            yield bookies, client, written, ensemble


#: Copies made by the replacement itself (COPY_FRAGMENT), or sent through the rereplicator.
BY_REPLACEMENT = pytest.mark.parametrize("by_replacement", [False, True])


@BY_REPLACEMENT
async def test_copies_pass_over_corrupted_replicas(
    memory_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, by_replacement: bool
) -> None:
    """Each survivor holds bad copies of a third of the entries (a different third each): a
    copy read from a bad replica fails its digest check and is read from the other one, so
    the replacement ends up with good bytes of every entry (whoever reads them)."""
    caplog.set_level(logging.WARNING)
    bad = (range(0, 30, 3), range(1, 30, 3))
    async with _lost_bookie_and_bad_copies(
        memory_url, tmp_path, 30, *bad, fragment_copies=by_replacement
    ) as setup:
        bookies, client, written, (lost, first, second) = setup
        report = await rereplicate_bookie(client, lost, options=UNLIMITED)
        assert report.ok and report.rereplicated == list(written), report.failed
        assert report.entries_by_replacements == (30 if by_replacement else 0)
        assert "rereplication_bad_digest" in caplog.text
        # Only the replacement's copies are left to read from.
        await bookies.stop(bookies.index_of(first))
        await bookies.stop(bookies.index_of(second))
        await read_all(client, written)


@BY_REPLACEMENT
async def test_an_entry_with_no_good_replica_fails_the_rereplication_and_says_which(
    memory_url: str, tmp_path: Path, by_replacement: bool
) -> None:
    bad = (range(7, 8), range(7, 8))
    async with _lost_bookie_and_bad_copies(
        memory_url, tmp_path, 10, *bad, fragment_copies=by_replacement
    ) as setup:
        _, client, written, (lost, first, second) = setup
        (lid,) = written
        report = await rereplicate_bookie(client, lost, options=UNLIMITED)
        assert not report.ok and list(report.failed) == [lid]
        assert "no surviving copy of entry 7" in report.failed[lid]
        assert str(first) in report.failed[lid] and str(second) in report.failed[lid]
        # The marker stays: the ledger is still under-replicated.
        assert await UnderreplicationManager(client.metadata_store).list_ids() == [lid]


async def _rereplicate_counting_survivor_reads(
    memory_url: str,
    tmp_path: Path,
    entries: int,
    size: int = 0,
    options: AutorecoveryOptions | None = None,
) -> int:
    """Rereplicate one ledger of ``entries`` (E = Qw = 3; ``size`` as in write_ledgers) after its
    first bookie is lost; return the read answers its two survivors gave meanwhile, after
    checking that every entry reads back from the replacement alone."""
    async with _lost_bookie_and_bad_copies(
        memory_url, tmp_path, entries, range(0), range(0), size
    ) as setup:
        bookies, client, written, (lost, first, second) = setup
        survivors = [bookies.objects[bookies.index_of(b)].handler for b in (first, second)]
        before = sum(h.stats.reads_answered for h in survivors)
        report = await rereplicate_bookie(client, lost, options=options)
        assert report.ok and report.entries == entries, report.failed
        answered = sum(h.stats.reads_answered for h in survivors) - before
        await bookies.stop(bookies.index_of(first))
        await bookies.stop(bookies.index_of(second))
        await read_all(client, written)
        return answered


async def test_copies_are_read_in_batches_where_every_replica_holds_every_entry(
    memory_url: str, tmp_path: Path
) -> None:
    """E = Qw: a copier reads runs of entries with one batch read each (BP-62), not one read
    per entry; the rereplicated ledger reads back whole from its replacement."""
    answered = await _rereplicate_counting_survivor_reads(memory_url, tmp_path, 60)
    assert answered <= 8, answered  # chunks of 8, 8, 16, 28 entries: 5 batches


async def test_batch_reads_are_sized_to_fit_whole_answers(memory_url: str, tmp_path: Path) -> None:
    """Entries of 64 KiB: 16 of them (each packet a header longer) pass the 1 MiB an answer
    may hold, so asking for 16 got 15 and a second request for the last one. Once the
    packets' size is known, batches (and chunks) are sized to whole answers: 15 entries."""
    unlimited = AutorecoveryOptions(entries_per_second=0, bytes_per_second=0)
    answered = await _rereplicate_counting_survivor_reads(
        memory_url, tmp_path, 120, 64 * 1024, unlimited
    )
    # chunks of 8, 8, 15, 30, 59 entries: 1 + 1 + 1 + 2 + 4 batches (asking 16 at a time
    # and answered 15: 14)
    assert answered <= 10, answered


async def test_copies_are_read_entry_by_entry_from_bookies_without_batch_reads(
    memory_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bookie that does not know batch reads (an older one) answers BAD_REQUEST: the copier
    reads the same entries one by one, from the same replica first."""
    from walkit._core.wire import ErrorResponse, StatusCode, encode_frame
    from walkit_bookie.server._reads import Reads

    def older(self: Reads, conn: object, req: object) -> None:
        frame = encode_frame(ErrorResponse(req.request_id, StatusCode.BAD_REQUEST, "unknown"))  # type: ignore[attr-defined]
        self.read_done(conn, frame)  # type: ignore[arg-type]

    monkeypatch.setattr(Reads, "batch_read", older)
    assert await _rereplicate_counting_survivor_reads(memory_url, tmp_path, 30) >= 30


def test_the_old_names_still_work_and_warn() -> None:
    """The names from before the words were settled keep working a release, with a warning."""
    import walkit.autorecovery as autorecovery

    for old, new in (
        ("Healer", autorecovery.Rereplicator),
        ("HealOutcome", RereplicationOutcome),
        ("RecoveryReport", autorecovery.RereplicationReport),
        ("recover_bookie", rereplicate_bookie),
    ):
        with pytest.warns(DeprecationWarning, match=old):
            assert getattr(autorecovery, old) is new
    assert RereplicationOutcome.HEALED is RereplicationOutcome.REREPLICATED  # type: ignore[comparison-overlap]
    report = autorecovery.RereplicationReport(BookieId("127.0.0.1", 3181), rereplicated=[4])
    with pytest.warns(DeprecationWarning, match="rereplicated"):
        assert report.healed == [4]
    with pytest.warns(DeprecationWarning, match="ledgers_rereplicated"):
        assert AutorecoveryMetrics().ledgers_healed == 0
    with pytest.raises(AttributeError):
        _ = autorecovery.NoSuchName
