"""Retention, deletion, orphan collection and stalled-ledger recovery with real processes: three
bookie processes on loopback (sqlite metadata) shared by this module, writers in this process
or in a subprocess that is SIGKILLed in the middle of a roll."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import walkit
from tests._cluster import ProcessCluster, process_cluster
from tests.log._history import LogHistory
from walkit import Log, LogPosition, LogRecord
from walkit.errors import NoSuchLedgerError, NoSuchLogError

pytestmark = pytest.mark.processes

MIDROLL = Path(__file__).with_name("_midroll_writer.py")
#: The reader's bound in these tests (seconds).
STALLED = 1.0


@pytest.fixture(scope="module")
def bookies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("retention")
    with process_cluster(f"sqlite:///{root / 'metadata.db'}", root, 3) as c:
        yield c


async def walkit_cli(url: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(120):
        return await trio.run_process(
            [sys.executable, "-m", "walkit.cli", *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=dict(os.environ, WALKIT_METADATA=url),
        )


class MidRollWriter:
    """_midroll_writer.py in a subprocess; collects what it acknowledged."""

    def __init__(self, url: str, name: str, count: int) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(MIDROLL), url, name, str(count)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        self.acked: list[tuple[LogPosition, bytes]] = []
        self.rolled = threading.Event()
        #: Set once all of its output is read (it exited).
        self.ended = threading.Event()
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").strip()
            self.output.append(line)
            parts = line.split()
            if parts[:1] == ["ACK"]:
                self.acked.append((LogPosition.parse(parts[1]), parts[2].encode()))
            elif parts[:1] == ["ROLLED"]:
                self.rolled.set()
        self.ended.set()

    async def wait_rolled(self) -> None:
        with trio.fail_after(60):
            while not self.rolled.is_set():
                if self.process.poll() is not None:
                    await trio.to_thread.run_sync(self.ended.wait, 10)  # its last words
                    raise AssertionError("writer exited:\n" + "\n".join(self.output[-20:]))
                await trio.sleep(0.01)

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)


async def test_tailing_reader_gets_through_a_writer_killed_mid_roll(
    bookies: ProcessCluster,
) -> None:
    url = bookies.metadata_url
    name = "midroll"
    tailed: list[LogRecord] = []
    got_all = trio.Event()
    got_more = trio.Event()
    async with walkit.Client.connect(url) as client:
        log = await Log.open(client, name, stalled_ledger_timeout=STALLED)
        writer = MidRollWriter(url, name, 30)

        async def tail() -> None:
            async for rec in log.reader(LogPosition.EARLIEST):
                tailed.append(rec)
                if len(tailed) == 30:
                    got_all.set()
                if len(tailed) == 40:
                    got_more.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(tail)
            try:
                await writer.wait_rolled()
            finally:
                writer.kill()
            assert len(writer.acked) == 30
            old = writer.acked[-1][0].ledger_seq
            md = await log.metadata()
            old_ledger = md.ledger_with_seq(old)
            assert old_ledger is not None
            old_id = old_ledger.ledger_id
            # The writer died mid-roll: its old ledger is open, a later one is listed.
            assert not (await client.ledger_metadata(old_id)).is_closed
            assert md.last is not None and md.last.seq > old
            # Nothing else happens (no takeover): the reader must get every acknowledged
            # record by itself, within its bound (plus a recovery and some slack for 2 cores).
            started = trio.current_time()
            with trio.fail_after(STALLED * 2 + 20):
                await got_all.wait()
            waited = trio.current_time() - started
            closed = await client.ledger_metadata(old_id)
            assert closed.is_closed and closed.last_entry_id == writer.acked[-1][0].entry_id
            # A new writer takes over; the tailing reader goes on with its records.
            async with log.writer() as w:
                history = LogHistory()
                for payload, pos in writer_acked(writer):
                    history.acked.append(("a", payload, pos))
                for n in range(10):
                    await history.append("b", w, b"b-%d" % n)
            with trio.fail_after(60):
                await got_more.wait()
            nursery.cancel_scope.cancel()
        final = [rec async for rec in log.reader(follow=False)]
        history.check(final, tailed)
        assert len(final) == 40
    print(f"reader got the stalled ledger's records {waited:.2f} s after the writer died")


def writer_acked(writer: MidRollWriter) -> list[tuple[bytes, LogPosition]]:
    return [(payload, pos) for pos, payload in writer.acked]


async def test_readers_recovering_eagerly_never_fence_a_live_writer(
    bookies: ProcessCluster,
) -> None:
    """Readers with a tiny bound recover the old ledger while the live writer's close of it
    may still be under way, roll after roll: the writer must go on (not fenced) and nothing
    acknowledged is lost."""
    url = bookies.metadata_url
    name = "eager"
    async with walkit.Client.connect(url) as client:
        log = await Log.open(client, name, roll_entries=5, stalled_ledger_timeout=0.001)
        history = LogHistory()
        reads: list[list[LogRecord]] = [[], []]
        caught_up = [trio.Event(), trio.Event()]
        async with log.writer() as w:

            async def tail(into: list[LogRecord], done: trio.Event) -> None:
                async for rec in log.reader(LogPosition.EARLIEST):
                    into.append(rec)
                    if len(into) == 119:  # the last one may wait for the writer's close
                        done.set()

            async with trio.open_nursery() as nursery:
                for into, done in zip(reads, caught_up, strict=True):
                    nursery.start_soon(tail, into, done)
                for n in range(120):
                    await history.append("w", w, b"w-%d" % n)
                    if n % 7 == 0:
                        await trio.sleep(0.02)  # let the readers stall now and then
                with trio.fail_after(60):
                    for done in caught_up:
                        await done.wait()
                nursery.cancel_scope.cancel()
        assert w.is_closed
        final = [rec async for rec in log.reader(follow=False)]
        assert len(final) == 120
        history.check(final, *reads)


async def test_retention_drops_only_whole_ledgers_behind_the_point(
    bookies: ProcessCluster,
) -> None:
    url = bookies.metadata_url
    name = "retained"
    async with walkit.Client.connect(url, wall_clock=time.time) as client:
        log = await Log.open(client, name, roll_entries=10, retain_records=25)
        history = LogHistory()
        async with log.writer() as w:
            for n in range(100):
                await history.append("w", w, b"r-%d" % n)
            # Retention runs in the background after each roll: wait until it caught up.
            with trio.fail_after(60):
                while (await log.metadata()).truncated.ledger_seq < 7:  # noqa: ASYNC110 (store)
                    await trio.sleep(0.05)
            md = await log.metadata()
            # Ledgers 1-9 are closed with 10 records each, 10 is the current one (whose records
            # do not count until it is closed): 7, 8 and 9 hold the 25 records to keep.
            assert md.truncated == LogPosition(ledger_seq=7, entry_id=0)
            acked = [(payload, pos) for _w, payload, pos in history.acked]
            # A reader that does not follow stops at the LAC the bookies know, which may lag
            # the last acknowledged add by one until the explicit LAC reaches them: follow
            # up to the last acknowledged record instead.
            kept = []
            with trio.fail_after(30):
                async for rec in log.reader():
                    kept.append(rec)
                    if rec.position == acked[-1][1]:
                        break
            # What a reader sees is exactly a suffix of what was acknowledged, starting at the
            # first record of a ledger, holding at least retain_records records.
            assert [(r.payload, r.position) for r in kept] == acked[len(acked) - len(kept) :]
            assert len(kept) >= 25
            assert kept[0].position == md.truncated
            assert kept[0].position.entry_id == 0
            # Every ledger behind the point is gone from the bookies' metadata too.
            behind = {pos.ledger_seq for _p, pos in acked if pos < md.truncated}
            assert behind
            dropped_positions = [pos for _p, pos in acked if pos.ledger_seq in behind]
            assert all(pos < md.truncated for pos in dropped_positions)
            ids = await client.list_ledgers()
            assert all(lg.ledger_id in ids for lg in md.ledgers)
            # A snapshot pins its ledger: retention never drops it, however low the limit.
            snap_at = kept[3].position
            await log.save_snapshot(snap_at, b"state")
            await w.append(b"after-snapshot")
        result = await log.apply_retention(retain_records=0)
        md = await log.metadata()
        assert md.truncated <= LogPosition(ledger_seq=snap_at.ledger_seq, entry_id=0)
        assert md.ledger_with_seq(snap_at.ledger_seq) is not None
        after = [rec async for rec in log.reader(follow=False)]
        assert snap_at in {r.position for r in after}
        for lg in result.dropped:
            with pytest.raises(NoSuchLedgerError):
                await client.ledger_metadata(lg.ledger_id)

        # The operator's command: a dry run changes nothing, then the real thing.
        log2 = await Log.open(client, "retained-cli", roll_entries=4)
        async with log2.writer() as w2:
            positions = [await w2.append(b"c-%d" % n) for n in range(20)]
        before = await log2.metadata()
        dry = await walkit_cli(
            url, "log", "retain", "retained-cli", "--records", "6", "--dry-run", "--json"
        )
        assert dry.returncode == 0, dry.stderr
        planned = json.loads(dry.stdout)
        assert planned["dry_run"] and planned["truncated"] is not None
        assert await log2.metadata() == before
        done = await walkit_cli(url, "log", "retain", "retained-cli", "--records", "6", "--json")
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert doc["truncated"] == planned["truncated"] and doc["ledgers"] == planned["ledgers"]
        rest = [r.position async for r in log2.reader(follow=False)]
        assert rest == positions[len(positions) - len(rest) :] and len(rest) >= 6
        assert str(rest[0]) == doc["truncated"]
        # Bad input: a clear error, nothing changed.
        none = await walkit_cli(url, "log", "retain", "retained-cli")
        assert none.returncode == 1 and b"at least one of" in none.stderr
        bad = await walkit_cli(url, "log", "retain", "retained-cli", "--records", "-3")
        assert bad.returncode == 2 and b"-3 must be an int >= 0" in bad.stderr
        missing = await walkit_cli(url, "log", "retain", "nope", "--records", "3")
        assert missing.returncode == 1 and b"NoSuchLogError" in missing.stderr


async def test_delete_stops_writers_and_readers_with_no_such_log(
    bookies: ProcessCluster,
) -> None:
    url = bookies.metadata_url
    name = "doomed"
    async with walkit.Client.connect(url, wall_clock=time.time) as client:
        log = await Log.open(client, name, roll_entries=8, stalled_ledger_timeout=STALLED)
        writer_error: list[BaseException] = []
        reader_error: list[BaseException] = []
        appended = trio.Event()
        async with log.writer() as w:
            await w.append(b"first")
            await log.save_snapshot(LogPosition(ledger_seq=w.ledger_seq, entry_id=0), b"s")
            ids = {lg.ledger_id for lg in (await log.metadata()).ledgers}
            ids |= {s.ledger_id for s in (await log.metadata()).snapshots}

            async def write() -> None:
                try:
                    for n in itertools.count():
                        await w.append(b"w-%d" % n)
                        if n == 20:
                            appended.set()
                except walkit.errors.WalkitError as exc:
                    writer_error.append(exc)

            async def read() -> None:
                try:
                    async for _rec in log.reader(LogPosition.EARLIEST):
                        pass
                except walkit.errors.WalkitError as exc:
                    reader_error.append(exc)

            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(write)
                    nursery.start_soon(read)
                    await appended.wait()
                    ids |= {lg.ledger_id for lg in (await log.metadata()).ledgers}
                    deleted = await Log.delete(client, name)
            with pytest.raises(NoSuchLogError):
                await w.append(b"later")
            await w.close()  # quiet: the append said so
        assert set(deleted) <= ids
        assert [type(e) for e in writer_error] == [NoSuchLogError]
        assert [type(e) for e in reader_error] == [NoSuchLogError]
        remaining = set(await client.list_ledgers())
        assert not set(deleted) & remaining
        with pytest.raises(NoSuchLogError):
            await Log.open(client, name, create=False)
        with pytest.raises(NoSuchLogError):
            await Log.delete(client, name)

        # The command: without --yes nothing happens.
        log = await Log.open(client, "doomed-cli")
        async with log.writer() as w:
            await w.append(b"x")
        kept = await walkit_cli(url, "log", "delete", "doomed-cli")
        assert kept.returncode == 1 and b"--yes" in kept.stderr
        assert (await log.metadata()).ledgers
        gone = await walkit_cli(url, "log", "delete", "doomed-cli", "--yes", "--json")
        assert gone.returncode == 0, gone.stderr
        assert json.loads(gone.stdout)["deleted"] is True
        with pytest.raises(NoSuchLogError):
            await log.metadata()
        again = await walkit_cli(url, "log", "delete", "doomed-cli", "--yes")
        assert again.returncode == 1 and b"NoSuchLogError" in again.stderr


async def test_orphans_are_collected_after_the_grace_period(bookies: ProcessCluster) -> None:
    url = bookies.metadata_url
    now = [1_000_000.0]
    async with walkit.Client.connect(url, wall_clock=lambda: now[0]) as client:
        log = await Log.open(client, "tidy", orphan_gc_grace=None)
        async with log.writer() as w:
            await w.append(b"kept")
        await log.save_snapshot(LogPosition(ledger_seq=1, entry_id=0), b"snap")
        # A writer killed between creating a ledger and listing it; a staged ledger never
        # linked; a ledger of a log deleted half-way; an untagged ledger (not ours).
        lost = await log._create_ledger("data")
        staged = await log.stage_ledger("job-1", 0)
        gone_log = await Log.open(client, "tidy-gone")
        leftover = await gone_log._create_ledger("data")
        await client.metadata_store.delete("/logs/tidy-gone")
        untagged = await client.create_ledger(3, 2, 2)
        md = await log.metadata()
        listed = md.ledger_ids()

        now[0] += 50
        young = await Log.collect_orphans(client, "tidy", grace=100)
        assert young == []
        found = await Log.collect_orphans(client, grace=10, dry_run=True)
        assert {o.ledger_id for o in found} == {lost.id, staged.id, leftover.id}
        assert {o.kind for o in found if o.log == "tidy"} == {"data", "staged"}
        assert all(not o.deleted for o in found)
        done = await Log.collect_orphans(client, "tidy", grace=10)
        assert {o.ledger_id for o in done if o.deleted} == {lost.id, staged.id}
        remaining = set(await client.list_ledgers())
        assert listed <= remaining and untagged.id in remaining and leftover.id in remaining
        assert not {lost.id, staged.id} & remaining
        assert [r.payload async for r in log.reader(follow=False)] == [b"kept"]
        snapshot = await log.latest_snapshot()
        assert snapshot is not None and await snapshot.read() == b"snap"

        # A ledger of an earlier log of the same name (deleted half-way, then created again
        # with another password): deleted at the metadata level.
        reborn = await Log.open(client, "tidy-reborn")
        ancient = await reborn._create_ledger("data")
        await client.metadata_store.delete("/logs/tidy-reborn")
        now[0] += 1
        reborn = await Log.open(client, "tidy-reborn")
        now[0] += 50
        [swept_old] = await Log.collect_orphans(client, "tidy-reborn", grace=10)
        assert swept_old.ledger_id == ancient.id and swept_old.deleted, swept_old
        assert ancient.id not in await client.list_ledgers()

        # A writer's takeover collects the log's orphans in the background.
        lost2 = await log._create_ledger("data")
        now[0] += 50
        log = await Log.open(client, "tidy", orphan_gc_grace=10)
        async with log.writer() as w:
            with trio.fail_after(30):
                while lost2.id in await client.list_ledgers():  # noqa: ASYNC110 (store)
                    await trio.sleep(0.05)
            await w.append(b"more")

    # The command (real wall clock): the half-deleted log's ledger is old enough only with
    # a grace shorter than its age.
    listing = await walkit_cli(url, "log", "gc", "--json", "--dry-run", "--grace", "0")
    assert listing.returncode == 0, listing.stderr
    rows = json.loads(listing.stdout)
    assert leftover.id in {r["ledger_id"] for r in rows}
    assert not any(r["deleted"] for r in rows)
    swept = await walkit_cli(url, "log", "gc", "tidy-gone", "--grace", "0", "--json")
    assert swept.returncode == 0, swept.stderr
    assert [(r["ledger_id"], r["deleted"]) for r in json.loads(swept.stdout)] == [
        (leftover.id, True)
    ]
    bad = await walkit_cli(url, "log", "gc", "--grace", "soon")
    assert bad.returncode == 2 and b"'soon' is not a number" in bad.stderr
    bad_name = await walkit_cli(url, "log", "gc", "-bad")
    assert bad_name.returncode != 0
