"""Disk storage: journal format and replay, checkpoints, cookies, bad dirs, read-only mode."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.bookie._helpers import config, connect, packet, payload_for, running_bookie
from walkit._core.wire import StatusCode
from walkit.errors import BookieIOError, CookieError
from walkit_bookie import Bookie
from walkit_bookie.storage._directio import BLOCK
from walkit_bookie.storage._journal import JournalWriter, LogMark, replay


def test_journal_replay_skips_padding_and_stops_at_a_torn_tail(tmp_path: Path) -> None:
    writer = JournalWriter(tmp_path, 1, max_size=1 << 30)
    groups = [[b"a" * 10, b"b" * 5000], [b"c"], [b"d" * (BLOCK - 8)]]
    marks = [writer.write(g) for g in groups]
    writer.close()
    assert all(m.offset % BLOCK == 0 for m in marks)
    bodies = [body for body, _ in replay(tmp_path, LogMark(0, 0))]
    assert bodies == [b for g in groups for b in g]
    # From a mark: only what follows it.
    assert [b for b, _ in replay(tmp_path, marks[0])] == [b"c", b"d" * (BLOCK - 8)]
    # A torn write at the end (a crash mid-write): a record cut short, then garbage.
    path = next(tmp_path.glob("*.jnl"))
    with path.open("ab") as f:
        f.write(b"\x00\x00\x10\x00" + b"\x12\x34\x56\x78" + b"partial")
    assert [b for b, _ in replay(tmp_path, LogMark(0, 0))] == bodies
    # A newer journal file after the torn one is still read (the bookie restarted).
    writer = JournalWriter(tmp_path, 2, max_size=1 << 30)
    writer.write([b"after restart"])
    writer.close()
    assert [b for b, _ in replay(tmp_path, LogMark(0, 0))][-1] == b"after restart"


@given(
    st.lists(
        st.lists(
            # Sizes that make a record end 0-9 bytes before a block boundary are the risky ones.
            st.one_of(st.integers(1, 9000), st.sampled_from([BLOCK - 8 - g for g in range(10)])),
            min_size=1,
            max_size=6,
        ),
        min_size=1,
        max_size=8,
    ),
    st.integers(0, 3),
)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_journal_round_trips_any_group_sizes(
    tmp_path: Path, groups: list[list[int]], torn: int
) -> None:
    """Records of any size, ending anywhere in a block (right before a boundary too)."""
    directory = tmp_path / f"j{uuid.uuid4().hex}"
    directory.mkdir()
    writer = JournalWriter(directory, 1, max_size=1 << 30)
    bodies = [[bytes([i % 251 + 1]) * n for i, n in enumerate(g)] for g in groups]
    # Sizes that end a group 0-8 bytes before a block boundary are the interesting ones.
    marks = [writer.write(g) for g in bodies]
    writer.close()
    flat = [b for g in bodies for b in g]
    assert [b for b, _ in replay(directory, LogMark(0, 0))] == flat
    assert [b for b, _ in replay(directory, marks[0])] == flat[len(bodies[0]) :]
    # Every position replay reports is a valid place to resume from.
    positions = [m for _, m in replay(directory, LogMark(0, 0))]
    for i, mark in enumerate(positions):
        assert [b for b, _ in replay(directory, mark)] == flat[i + 1 :]
    if torn:  # a torn write after the last group: cut garbage, then zeros
        with next(directory.glob("*.jnl")).open("ab") as f:
            f.write(b"\x00\x00\x01\x00" + b"\x99" * 7 * torn + bytes(torn * 100))
        assert [b for b, _ in replay(directory, LogMark(0, 0))] == flat


def test_journal_writes_over_preallocated_zeros_and_replay_skips_them(tmp_path: Path) -> None:
    writer = JournalWriter(tmp_path, 1, max_size=1 << 30, preallocate=16 * BLOCK)
    assert writer.wants_preallocation
    writer.preallocate(*writer.start_preallocation())
    path = next(tmp_path.glob("*.jnl"))
    # (after the file's header block)
    assert path.stat().st_size == 17 * BLOCK and writer.offset == BLOCK
    assert not writer.wants_preallocation
    groups = [[b"a" * 100], [b"b" * 5000, b"c"], [b"d" * 25000]]
    for group in groups:
        writer.write(group)
    assert path.stat().st_size == 17 * BLOCK  # written in place, over the zeros
    assert writer.wants_preallocation  # fewer than half of the zeros are left
    assert [b for b, _ in replay(tmp_path, LogMark(0, 0))] == [b for g in groups for b in g]
    # A torn write inside the preallocated zeros ends the file's replay there.
    torn_at = writer.offset
    writer.close()
    with path.open("r+b") as f:
        f.seek(torn_at)
        f.write(b"\x00\x00\x10\x00" + b"\x12\x34\x56\x78" + b"partial")
    assert [b for b, _ in replay(tmp_path, LogMark(0, 0))] == [b for g in groups for b in g]


def test_journal_preallocation_on_a_thread_never_overwrites_records(tmp_path: Path) -> None:
    """Zeros are written on a worker thread while the writer goes on: writes that reach the
    claimed range wait for them, so every record replays (a race would zero some)."""
    import threading

    writer = JournalWriter(tmp_path, 1, max_size=1 << 30, preallocate=8 * BLOCK)
    expected: list[bytes] = []
    for round_ in range(40):
        worker = None
        if writer.wants_preallocation:
            claim = writer.start_preallocation()
            worker = threading.Thread(target=writer.preallocate, args=claim)
            worker.start()
        for i in range(6):  # ~6 blocks: into the claimed range, often while it is written
            body = b"%d-%d-" % (round_, i) + bytes([round_ % 250 + 1]) * 3000
            writer.write([body])
            expected.append(body)
        if worker is not None:
            worker.join()
    writer.close()
    assert [b for b, _ in replay(tmp_path, LogMark(0, 0))] == expected


def test_journal_records_ending_just_before_a_block_boundary(tmp_path: Path) -> None:
    for gap in range(10):  # a record ends ``gap`` bytes before a boundary, inside a group
        directory = tmp_path / f"gap{gap}"
        directory.mkdir()
        writer = JournalWriter(directory, 1, max_size=1 << 30)
        first = b"a" * (BLOCK - 8 - gap)
        writer.write([first, b"same group"])
        writer.write([first])  # and at a group's end
        writer.write([b"next group"])
        writer.close()
        expected = [first, b"same group", first, b"next group"]
        assert [b for b, _ in replay(directory, LogMark(0, 0))] == expected


def test_entry_log_round_trips_entries_larger_than_a_write_chunk(tmp_path: Path) -> None:
    from walkit_bookie.storage._entrylog import ENTRYLOG_DIR, EntryLogger

    (tmp_path / ENTRYLOG_DIR).mkdir()
    logger = EntryLogger([tmp_path], max_size=1 << 30)
    sizes = [10, 4 << 20, 3, (4 << 20) - 19, 5 << 20, 1, 4096]
    entries = [(7, i, bytes([i + 1]) * n) for i, n in enumerate(sizes)]
    locations = logger.append(entries[:4]) + logger.append(entries[4:])
    for (ledger, entry, packet_bytes), (_, location) in zip(entries, locations, strict=True):
        assert logger.read(location, ledger, entry) == packet_bytes
    assert logger.read(locations[0][1], 7, 99) is None  # a location for another entry
    assert logger.read(locations[1][1], 7, 99) is None  # (large: read in two parts)
    assert logger.read(locations[1][1], 8, 1) is None
    logger.close()


def test_entry_log_reads_of_cut_records_find_nothing(tmp_path: Path) -> None:
    # A record whose file ends early (cut short, or a location past the end) reads as absent,
    # small or large (read in two parts), with its packet or its header cut.
    import os

    from walkit_bookie.storage._entrylog import _SPLIT_READ, ENTRYLOG_DIR, LOCATION, EntryLogger

    for size in (100, _SPLIT_READ * 4):
        for keep in (size - 1, 0, -5):  # bytes of the packet left (-5: into its header)
            directory = tmp_path / f"{size}-{keep}"
            (directory / ENTRYLOG_DIR).mkdir(parents=True)
            logger = EntryLogger([directory], max_size=1 << 30)
            [(_, location)] = logger.append([(1, 0, b"z" * size)])
            assert logger.read(location, 1, 0) == b"z" * size
            _, offset, _ = LOCATION.unpack(location)
            [path] = (directory / ENTRYLOG_DIR).iterdir()
            os.truncate(path, offset + keep)
            assert logger.read(location, 1, 0) is None
            logger.close()


def test_entry_logs_are_written_through_the_page_cache(tmp_path: Path) -> None:
    # Big writes and one fdatasync each: the page cache lets the sync hand the whole write to
    # the disk at once (O_DIRECT waited for each chunk), and entries just checkpointed stay
    # cached for readers; the journal keeps O_DIRECT, and so do rereplication copies.
    from walkit_bookie.storage._entrylog import ENTRYLOG_DIR, EntryLogger

    (tmp_path / ENTRYLOG_DIR).mkdir()
    logger = EntryLogger([tmp_path], max_size=1 << 30)
    [(_, location)] = logger.append([(1, 0, b"x" * 5000)])
    assert logger._file is not None and not logger._file.direct
    assert logger.read(location, 1, 0) == b"x" * 5000
    logger.close()


def test_direct_writes_of_copies_round_trip_between_page_cache_writes(tmp_path: Path) -> None:
    # Copies go around the page cache (O_DIRECT on a second descriptor) into the same log as
    # the checkpoints' writes; both kinds of write must read back, whatever their sizes.
    from walkit_bookie.storage._entrylog import _DIRECT_CHUNK, ENTRYLOG_DIR, EntryLogger

    (tmp_path / ENTRYLOG_DIR).mkdir()
    logger = EntryLogger([tmp_path], max_size=1 << 30)
    sizes = [10, 65_536, _DIRECT_CHUNK + 5, 3, _DIRECT_CHUNK - 19, 4096, 1]
    entries = [(3, i, bytes([i + 1]) * n) for i, n in enumerate(sizes)]
    located = logger.write(entries[:1]).locations  # through the page cache
    located += logger.write(entries[1:4], direct=True).locations
    located += logger.write(entries[4:5]).locations
    located += logger.write(entries[5:], direct=True).locations
    assert logger._file is not None and logger._file._direct_fd >= 0  # ext4 takes O_DIRECT
    for (ledger, entry, data), (_, location) in zip(entries, located, strict=True):
        assert logger.read(location, ledger, entry) == data
    logger.close()
    reopened = EntryLogger([tmp_path], max_size=1 << 30)  # read back by a new process
    for (ledger, entry, data), (_, location) in zip(entries, located, strict=True):
        assert reopened.read(location, ledger, entry) == data
    reopened.close()


def test_direct_writes_fall_back_where_o_direct_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from walkit_bookie.storage._entrylog import ENTRYLOG_DIR, EntryLogger

    real_open = os.open

    def refusing_open(path: str, flags: int, *args: int) -> int:
        if flags & os.O_DIRECT:
            raise OSError(22, "Invalid argument")  # as tmpfs and some overlays answer
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", refusing_open)
    (tmp_path / ENTRYLOG_DIR).mkdir()
    logger = EntryLogger([tmp_path], max_size=1 << 30)
    [(_, first)] = logger.write([(1, 0, b"a" * 5000)], direct=True).locations
    [(_, second)] = logger.write([(1, 1, b"b" * 70_000)], direct=True).locations
    assert logger._file is not None and logger._file._direct_fd == -2
    assert logger.read(first, 1, 0) == b"a" * 5000
    assert logger.read(second, 1, 1) == b"b" * 70_000
    logger.close()


async def test_checkpoint_moves_entries_to_entry_logs_and_reads_come_from_disk(
    tmp_path: Path,
) -> None:
    cfg = config([tmp_path / "j", tmp_path / "l1", tmp_path / "l2"], entrylog_max_size=64 * 1024)
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
        for round_ in range(3):  # three checkpoints, several entry logs (tiny roll size)
            reqs = [
                c.add_request(1, e, payload_for(1, e, 3000))
                for e in range(round_ * 40, round_ * 40 + 40)
            ]
            assert all(a.status is StatusCode.OK for a in await c.call_many(reqs))  # type: ignore[union-attr]
            await bookie.storage.checkpoint()
        assert bookie.storage.cached_entry(1, 0) is None  # not in memory any more
        for e in (0, 39, 40, 119):
            assert (await c.read(1, e)).packet == packet(1, e, payload_for(1, e, 3000))
        assert (await c.read(1, 120)).status is StatusCode.NO_SUCH_ENTRY
        assert bookie.storage.stats.checkpoints == 3
    logs = list((tmp_path / "l1").glob("entrylogs/*.log")) + list(
        (tmp_path / "l2").glob("entrylogs/*.log")
    )
    assert len(logs) >= 3
    assert {p.parent.parent for p in logs} == {tmp_path / "l1", tmp_path / "l2"}
    # Journals before the last checkpoint's mark are gone.
    assert len(list((tmp_path / "j" / "journal").glob("*.jnl"))) == 1
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
        assert bookie.storage.stats.replayed_records == 0
        assert (await c.read(1, 77)).packet == packet(1, 77, payload_for(1, 77, 3000))
        assert (await c.read_lac(1)).status is StatusCode.OK


async def _start(cfg: object) -> None:
    async with running_bookie(cfg):  # type: ignore[arg-type]
        pass


async def _init(dirs: list[Path], port: int = 0) -> int:
    async with running_bookie(config(dirs, port=port)) as (_, bid), connect(bid) as c:
        assert (await c.add(1, 0, b"data")).status is StatusCode.OK
        return bid.port


async def test_cookie_refuses_a_wiped_directory(tmp_path: Path) -> None:
    dirs = [tmp_path / "j", tmp_path / "l"]
    await _init(dirs)
    shutil.rmtree(dirs[1])
    dirs[1].mkdir()
    with pytest.raises(CookieError, match=r"l has no cookie.*wiped or replaced"):
        await _start(config(dirs))


async def test_cookie_refuses_a_directory_whose_contents_were_wiped(tmp_path: Path) -> None:
    dirs = [tmp_path / "j", tmp_path / "l"]
    await _init(dirs)
    shutil.rmtree(dirs[1] / "index")
    with pytest.raises(CookieError, match="has a cookie but no 'index'"):
        await _start(config(dirs))


async def test_cookie_refuses_foreign_directories(tmp_path: Path) -> None:
    a = [tmp_path / "a-j", tmp_path / "a-l"]
    b = [tmp_path / "b-j", tmp_path / "b-l"]
    port_a = await _init(a)
    await _init(b)
    with pytest.raises(CookieError, match="different cookies"):
        await _start(config([a[0], b[1]]))
    # All of b's dirs, but started as bookie a (its address): they belong to another bookie.
    with pytest.raises(CookieError, match="belong to bookie"):
        await _start(config(b, port=port_a))


async def test_cookie_refuses_a_missing_or_added_directory(tmp_path: Path) -> None:
    dirs = [tmp_path / "j", tmp_path / "l"]
    await _init(dirs)
    with pytest.raises(CookieError, match="lists data dirs"):
        await _start(config(dirs[:1]))
    with pytest.raises(CookieError, match="has no cookie"):
        await _start(config([*dirs, tmp_path / "new"]))
    with pytest.raises(CookieError, match="reordered"):
        await _start(config(dirs[::-1]))


async def test_a_non_empty_directory_without_cookie_is_refused(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "precious.txt").write_text("someone else's data")
    with pytest.raises(CookieError, match="not empty but has no cookie"):
        await _start(config([tmp_path / "d"]))


async def test_unwritable_data_dir_gives_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("a regular file where the dir should be")
    with pytest.raises(BookieIOError, match="exists and is not a directory"):
        await _start(config([tmp_path / "file"]))
    with pytest.raises(BookieIOError, match="not a writable directory"):
        await _start(config([tmp_path / "ok", tmp_path / "file" / "sub"]))
    # Nothing was half-initialized in the good dir: once the bad one is fixed, it starts.
    await _start(config([tmp_path / "ok", tmp_path / "good"]))


async def test_usage_above_threshold_makes_the_bookie_read_only(tmp_path: Path) -> None:
    dirs = [tmp_path / "j", tmp_path / "l"]
    await _init(dirs)
    low = config(dirs, disk_usage_threshold=0.001, disk_check_interval=0.05)
    async with running_bookie(low) as (bookie, bid), connect(bid) as c:
        assert bookie.read_only
        assert (await c.add(1, 1, b"more")).status is StatusCode.BOOKIE_READ_ONLY
        assert (await c.write_lac(1, 0)).status is StatusCode.BOOKIE_READ_ONLY
        assert (await c.read(1, 0)).packet == packet(1, 0, b"data")
        assert (await c.read_lac(1)).lac == -1


@contextlib.contextmanager
def small_filesystem(path: Path, size: str) -> Iterator[Path]:
    path.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


async def test_disk_full_while_running_turns_read_only_and_keeps_serving(tmp_path: Path) -> None:
    with small_filesystem(tmp_path / "small", "3m") as small:
        cfg = config(
            [small / "j", small / "l"],
            disk_usage_threshold=1.0,
            checkpoint_interval=3600,
            journal_max_size=64 * 1024,  # rolls (new files) while the disk fills, too
        )
        async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
            acked = []
            status = StatusCode.OK
            for e in range(20_000):
                status = (await c.add(1, e, payload_for(1, e, 2000))).status
                if status is not StatusCode.OK:
                    break
                acked.append(e)
            assert status is StatusCode.BOOKIE_READ_ONLY
            assert acked and bookie.read_only
            assert (await c.add(2, 0, b"x")).status is StatusCode.BOOKIE_READ_ONLY
            for e in (acked[0], acked[-1]):
                assert (await c.read(1, e)).packet == packet(1, e, payload_for(1, e, 2000))
            assert (await c.read_lac(1)).status is StatusCode.OK


def test_bookie_object_runs_once(tmp_path: Path) -> None:
    bookie = Bookie(config([tmp_path / "d"]))
    assert bookie.bookie_id is None
    assert not bookie.read_only


async def test_forget_ledger_removes_its_index_and_state(tmp_path: Path) -> None:
    cfg = config([tmp_path / "j", tmp_path / "l"])
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
        for ledger in (1, 2):
            reqs = [c.add_request(ledger, e, payload_for(ledger, e)) for e in range(50)]
            await c.call_many(reqs)
        await bookie.storage.checkpoint()
        await c.add(1, 50, b"still in the write cache")
        await bookie.forget_ledger(1)
        assert (await c.read(1, 10)).status is StatusCode.NO_SUCH_LEDGER
        assert (await c.read(2, 10)).status is StatusCode.OK
        await bookie.storage.checkpoint()
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
        assert bookie.ledger_info(1) is None
        assert (await c.read(1, 10)).status is StatusCode.NO_SUCH_LEDGER
        assert (await c.read(2, 49)).packet == packet(2, 49, payload_for(2, 49))


def test_index_grows_its_map_once_then_reports_a_full_disk(tmp_path: Path) -> None:
    from walkit_bookie.storage._index import Index, entry_key
    from walkit_bookie.storage._ledger import LedgerInfo

    index = Index(tmp_path / "index", map_size=1 << 20)
    try:
        batch = [(entry_key(1, e), b"v" * 20) for e in range(15_000)]  # ~1.2 MiB of pages
        index.commit(batch, [(1, LedgerInfo(b"k"))], LogMark(3, 4096))
        assert index.get_many([entry_key(1, 14_999), entry_key(1, 15_000)]) == [b"v" * 20, None]
        huge = [(entry_key(2, e), b"v" * 20) for e in range(200_000)]
        with pytest.raises(OSError, match="index store"):
            index.commit(huge, [], LogMark(3, 8192))
        ledgers, mark = index.load()
        assert mark == LogMark(3, 4096) and ledgers[1].master_key == b"k"
    finally:
        index.close()
