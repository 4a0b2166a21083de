"""Entry-log usage, removal of dead entry logs, and minor / major compaction (real files)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import lmdb
import pytest
import trio

from tests.bookie._helpers import (
    BookieProcess,
    Client,
    config,
    connect,
    http_request,
    packet,
    payload_for,
    running_bookie,
)
from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.types import BookieId
from walkit._core.wire import ReadRequest, ReadResponse, StatusCode
from walkit.metadata import LedgerManager, MetadataStore, open_metadata_store, registration_path
from walkit_bookie import Bookie, BookieConfig
from walkit_bookie.storage._entrylog import ENTRYLOG_DIR
from walkit_bookie.storage._index import INDEX_DIR

SIZE = 1000
TOKEN = b"compaction-test-admin-token"


def _payload(ledger: int, entry: int) -> bytes:
    return payload_for(ledger, entry, SIZE + entry % 7)


Round = tuple[list[int], range]


def _mixed(ledgers: list[int], count: int) -> list[Round]:
    """``count`` rounds of 30 entries of each ledger, interleaved, then a small round of
    ledger 9 that closes the last of them (the log being written is never compacted)."""
    return [(ledgers, range(r * 30, r * 30 + 30)) for r in range(count)] + [([9], range(5))]


async def _fill(c: Client, bookie: Bookie, rounds: list[Round]) -> None:
    """Each round: the entries of each ledger (interleaved), then a checkpoint, which writes
    them to one entry log (the next round starts a new one past the tiny roll size)."""
    for ledgers, entries in rounds:
        reqs = [c.add_request(lg, e, _payload(lg, e)) for e in entries for lg in ledgers]
        assert all(a.status is StatusCode.OK for a in await c.call_many(reqs))  # type: ignore[union-attr]
        await bookie.storage.checkpoint()


async def _check(c: Client, expected: dict[int, list[int]], gone: list[int]) -> None:
    for ledger, entries in expected.items():
        for e in entries:
            got = await c.read(ledger, e)
            assert got.status is StatusCode.OK, (ledger, e, got.status)
            assert got.packet == packet(ledger, e, _payload(ledger, e)), (ledger, e)
    for ledger in gone:
        assert (await c.read(ledger, 0)).status is StatusCode.NO_SUCH_LEDGER


def _log_files(cfg: BookieConfig) -> dict[str, int]:
    return {
        p.name: p.stat().st_size for d in cfg.ledger_dirs for p in (d / ENTRYLOG_DIR).glob("*.log")
    }


def _usage(bookie: Bookie) -> list[tuple[int, int]]:
    return sorted((u.log_id, u.live) for u in bookie.storage.entry_log_usage())


def _forget_usage(cfg: BookieConfig) -> None:
    """Drop the usage table and its format mark: the next start counts it from the index."""
    env = lmdb.open(str(cfg.ledger_dirs[0] / INDEX_DIR), max_dbs=5)
    with env.begin(write=True) as txn:
        txn.drop(env.open_db(b"usage", txn=txn), delete=True)
        txn.delete(b"usage_format", db=env.open_db(b"meta", txn=txn))
    env.close()


def _cfg(tmp_path: Path, **kw: object) -> BookieConfig:
    dirs = [tmp_path / "j", tmp_path / "l1", tmp_path / "l2"]  # logs spread over two dirs
    return config(dirs, entrylog_max_size=64 * 1024, **kw)


async def test_compaction_reclaims_space_and_every_live_entry_reads_back(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    # Four mixed logs, one of ledger 5 alone, and the current one (ledger 9).
    rounds = _mixed([1, 2, 3, 4], 4)
    rounds.insert(4, ([5], range(70)))
    live = {1: list(range(120)), 4: list(range(120)), 9: list(range(5))}
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
        await _fill(c, bookie, rounds)
        usage = bookie.storage.entry_log_usage()
        assert len(usage) == 6 and all(u.ratio > 0.9 for u in usage[:5])
        before = sum(_log_files(cfg).values())
        await bookie.forget_ledgers([2, 3, 5])
        by_log = {u.log_id: u for u in bookie.storage.entry_log_usage()[:5]}
        assert [round(u.ratio, 1) for u in by_log.values()] == [0.5, 0.5, 0.5, 0.5, 0.0]

        # Minor (0.2): only the log with nothing live goes, without copying anything.
        minor = await bookie.collect_garbage("minor")
        assert minor.result is not None
        assert (minor.result.logs_removed, minor.result.logs_compacted) == (1, 0)
        assert minor.result.entries_moved == 0
        assert len(_log_files(cfg)) == 5
        await _check(c, live, [2, 3, 5])

        # Major (0.8): the half-dead logs are copied into the current one and removed.
        major = await bookie.collect_garbage("major")
        assert major.result is not None
        assert (major.result.logs_compacted, major.result.logs_kept) == (4, 0)
        assert major.result.entries_moved == 2 * 4 * 30
        files = _log_files(cfg)
        assert not set(files) & {f"{i:016x}.log" for i in by_log}  # the old logs are gone
        after = sum(files.values())
        assert after < before / 2
        stats = bookie.storage.stats
        assert stats.entry_logs_compacted == 4 and stats.entry_logs_removed == 1
        assert stats.compaction_bytes_reclaimed >= before - after - 64 * 1024
        assert all(u.ratio > 0.9 for u in bookie.storage.entry_log_usage())
        await _check(c, live, [2, 3, 5])
        # Nothing left to do: another pass moves nothing.
        again = await bookie.collect_garbage("major")
        assert again.result is not None and again.result.entries_moved == 0
        kept_usage = sorted((u.log_id, u.live) for u in bookie.storage.entry_log_usage())
        # A removed log leaves no usage behind: a log goes only once nothing in it is live.
        assert not {log_id for log_id, _live in kept_usage} & set(by_log)
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
        await _check(c, live, [2, 3, 5])
        # Nor in the usage table on disk (read back at start).
        assert sorted((u.log_id, u.live) for u in bookie.storage.entry_log_usage()) == kept_usage


async def test_reads_keep_working_during_compaction(tmp_path: Path) -> None:
    # Slowed down so that the reads below overlap many of its batches.
    cfg = _cfg(tmp_path, compaction_max_rate=400_000, compaction_batch_bytes=16 * 1024)
    live = {lg: list(range(3 * 30)) for lg in (1, 3)}
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
        await _fill(c, bookie, _mixed([1, 2, 3], 3))
        await bookie.forget_ledger(2)
        done = trio.Event()
        passes = 0
        async with trio.open_nursery() as nursery:

            async def compact() -> None:
                await bookie.collect_garbage("major")
                done.set()

            nursery.start_soon(compact)
            while not done.is_set():
                await _check(c, live, [2])
                passes += 1
        assert passes >= 2  # reads ran while entries moved (not only before or after)
        assert bookie.storage.stats.entry_logs_compacted == 3
        await _check(c, live, [2])


async def test_entries_written_during_compaction_and_recovery_rewrites_stay_right(
    tmp_path: Path,
) -> None:
    cfg = _cfg(tmp_path, compaction_max_rate=400_000, compaction_batch_bytes=16 * 1024)
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
        await _fill(c, bookie, _mixed([1, 2], 2))
        await bookie.forget_ledger(2)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(bookie.collect_garbage, "major")
            # Entries of ledger 1 stored again, and new ones, while compaction runs.
            await _fill(c, bookie, [([1], range(30, 60)), ([1, 6], range(60, 90))])
        expected = {1: list(range(90)), 6: list(range(60, 90)), 9: list(range(5))}
        await _check(c, expected, [2])
        # The usage still matches what the index points at: after another round (which
        # closes the log being written) a pass leaves no log below the threshold behind.
        await _fill(c, bookie, [([7], range(70))])
        await bookie.collect_garbage("major")
        current = bookie.storage.entry_log_usage()[-1].log_id
        assert all(u.ratio >= 0.8 for u in bookie.storage.entry_log_usage() if u.log_id != current)
        await _check(c, expected, [2])
        counted = _usage(bookie)
    # The usage kept up to date through all that equals a count from the index itself.
    _forget_usage(cfg)
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
        assert _usage(bookie) == counted
        await _check(c, expected, [2])


async def test_an_index_without_usage_gets_it_rebuilt(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path)
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
        await _fill(c, bookie, _mixed([1, 2], 3))
        await bookie.forget_ledger(2)
        counted = _usage(bookie)
    _forget_usage(cfg)  # as an index written before usage was tracked
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
        assert _usage(bookie) == counted
        await bookie.collect_garbage("major")
        # The three mixed logs, and ledger 9's small one: closed by the restart.
        assert bookie.storage.stats.entry_logs_compacted == 4
        await _check(c, {1: list(range(90)), 9: list(range(5))}, [2])


async def _admin_port(store: MetadataStore, bid: BookieId) -> tuple[str, int]:
    registration = json.loads((await store.get(registration_path(bid))).value)
    return bid.host, int(registration["http_port"])


async def _read_all(c: Client, live: list[int], gone: list[int], entries: int) -> None:
    reads = [ReadRequest(c.next_id(), lg, e) for lg in live + gone for e in range(entries)]
    for req, got in zip(reads, await c.call_many(reads), strict=True):
        assert isinstance(got, ReadResponse)
        if req.ledger_id in gone:
            assert got.status is StatusCode.NO_SUCH_LEDGER
        else:
            assert got.status is StatusCode.OK, (req.ledger_id, req.entry_id, got.status)
            assert got.packet == packet(
                req.ledger_id, req.entry_id, _payload(req.ledger_id, req.entry_id)
            )


@pytest.mark.processes
@pytest.mark.parametrize("kill_at", ["compaction_batch_moved", "entry_log_compacted"])
async def test_sigkill_in_the_middle_of_compaction_loses_no_live_entry(
    tmp_path: Path, kill_at: str
) -> None:
    # A short session: the restarted bookie waits for the killed one's registration to expire.
    url = f"sqlite://{tmp_path / 'metadata.db'}?session_timeout=1"
    dirs = [tmp_path / "journal", tmp_path / "ledgers"]
    options = (
        *("--metadata", url, "--http-port", "0", "--entrylog-max-size", "64KiB"),
        *("--admin-token", TOKEN.decode()),
        *("--write-cache-size", "96KiB", "--checkpoint-interval", "3600"),
    )
    # Slowed down (a real option: it spares the disk in production) so the kill lands inside.
    slow = ("--compaction-max-rate", "200KiB", "--compaction-batch-size", "16KiB")
    entries, live, gone = 100, [1, 3, 5], [2, 4, 6]
    proc = BookieProcess(dirs, *options, *slow)
    bid = await proc.start()
    try:
        async with await open_metadata_store(url) as store, connect(bid) as c:
            ledgers = LedgerManager(store)
            for lg in live + gone:
                await ledgers.create(
                    LedgerMetadata(
                        ledger_id=lg,
                        ensemble_size=1,
                        write_quorum=1,
                        ack_quorum=1,
                        fragments=((0, (bid,)),),
                    )
                )
            for first in range(0, entries, 10):  # interleaved; checkpoints every ~96 KiB
                reqs = [
                    c.add_request(lg, e, _payload(lg, e))
                    for e in range(first, first + 10)
                    for lg in live + gone
                ]
                assert all(a.status is StatusCode.OK for a in await c.call_many(reqs))  # type: ignore[union-attr]
            for lg in gone:
                await ledgers.delete(lg)
            before = sum(_log_files(config(dirs)).values())
            admin = await _admin_port(store, bid)
            async with trio.open_nursery() as nursery:

                async def gc() -> None:
                    with contextlib.suppress(trio.BrokenResourceError, OSError, IndexError):
                        await http_request(
                            admin,
                            b"POST /admin/gc?compact=major HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                            + TOKEN
                            + b"\r\n\r\n",
                        )

                nursery.start_soon(gc)
                with trio.fail_after(30):
                    while proc.stderr().count(kill_at) < 2:  # noqa: ASYNC110 (another process's log)
                        await trio.sleep(0.01)
                await _read_all(c, live, gone, entries)  # reads go on during compaction
                proc.kill()
        log_at_kill = proc.stderr()
        assert "compaction_started" in log_at_kill and "compaction_done" not in log_at_kill

        again = BookieProcess(dirs, *options)
        assert await again.start() == bid
        try:
            async with await open_metadata_store(url) as store, connect(bid) as c:
                await _read_all(c, live, gone, entries)
                admin = await _admin_port(store, bid)
                status, body = await http_request(
                    admin,
                    b"POST /admin/gc?compact=major HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                    + TOKEN
                    + b"\r\n\r\n",
                )
                assert status == 200 and json.loads(body)["entry_logs"]["logs_compacted"] > 0
                await _read_all(c, live, gone, entries)
                status, body = await http_request(
                    admin, b"GET /admin/gc HTTP/1.1\r\nHost: x\r\n\r\n"
                )
                info = json.loads(body)
                assert info["compaction_bytes_reclaimed"] > 0
                after = sum(_log_files(config(dirs)).values())
                assert info["entry_log_bytes"] == after
                assert after < 0.75 * before, (before, after)
                _, metrics = await http_request(admin, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                assert b"walkit_bookie_entry_logs_compacted_total" in metrics
        finally:
            assert again.terminate() == 0
    finally:
        proc.kill()
