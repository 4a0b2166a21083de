"""Real `walkit-bookie` processes: SIGKILL during adds, restarts, journal replay, the CLI."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from tests.bookie._helpers import BookieProcess, Client, connect, packet, payload_for
from walkit._core.types import BookieId
from walkit._core.wire import AddFlag, AddResponse, ReadLacFlag, StatusCode, encode_frame

pytestmark = pytest.mark.processes


async def _stream_until_killed(
    proc: BookieProcess, bid: BookieId, *, kill_after: int, ledgers: int = 4
) -> dict[tuple[int, int], bytes]:
    """Pipelined adds on several connections; SIGKILL the bookie once ``kill_after`` are acked.

    Returns every acknowledged (ledger, entry) -> payload.
    """
    acked: dict[tuple[int, int], bytes] = {}
    killed = trio.Event()

    async def writer(ledger: int) -> None:
        async with connect(bid) as c:
            window = trio.Semaphore(400)
            entry = 0

            async def send_batch(first: int) -> None:
                reqs = []
                for e in range(first, first + 40):
                    reqs.append(c.add_request(ledger, e, payload_for(ledger, e, 700 + e % 300)))
                try:
                    answers = await c.call_many(reqs)
                except (ConnectionError, trio.BrokenResourceError, trio.ClosedResourceError):
                    return
                finally:
                    for _ in reqs:
                        window.release()
                for req, answer in zip(reqs, answers, strict=True):
                    assert isinstance(answer, AddResponse)
                    assert answer.status is StatusCode.OK
                    acked[(ledger, req.entry_id)] = payload_for(
                        ledger, req.entry_id, 700 + req.entry_id % 300
                    )
                if len(acked) >= kill_after and not killed.is_set():
                    proc.kill()  # SIGKILL, with adds in flight on every connection
                    killed.set()

            async with trio.open_nursery() as nursery:
                while not killed.is_set() and not c.closed.is_set():
                    for _ in range(40):
                        await window.acquire()
                    nursery.start_soon(send_batch, entry)
                    entry += 40
                    await trio.lowlevel.checkpoint()

    with trio.move_on_after(60):
        async with trio.open_nursery() as nursery:
            for ledger in range(1, ledgers + 1):
                nursery.start_soon(writer, ledger)
    assert killed.is_set(), f"only {len(acked)} adds were acknowledged in 60 s"
    return acked


async def _check_all_readable(client: Client, acked: dict[tuple[int, int], bytes]) -> None:
    for (ledger, entry), payload in sorted(acked.items()):
        got = await client.read(ledger, entry)
        assert got.status is StatusCode.OK, (ledger, entry, got.status)
        assert got.packet == packet(ledger, entry, payload), (ledger, entry)


async def test_sigkill_during_adds_loses_no_acknowledged_entry(tmp_path: Path) -> None:
    dirs = [tmp_path / "journal", tmp_path / "ledgers"]
    proc = BookieProcess(dirs)
    bid = await proc.start()
    try:
        acked = await _stream_until_killed(proc, bid, kill_after=4000)
        assert len(acked) >= 4000
        again = BookieProcess(dirs)
        assert await again.start() == bid  # same address, from the cookie
        try:
            async with connect(bid) as c:
                await _check_all_readable(c, acked)
        finally:
            assert again.terminate() == 0
    finally:
        proc.kill()
    assert "bookie_stopped" in again.stderr()


def _replayed(log: str) -> list[int]:
    return [int(n) for n in re.findall(r"storage_opened .*?replayed=(\d+)", log)]


async def test_journal_replay_after_checkpoint_then_more_adds_then_sigkill(tmp_path: Path) -> None:
    dirs = [tmp_path / "journal", tmp_path / "ledgers"]
    # A checkpoint only when 200 KiB of entries are in memory (during the first batch, not
    # during the second), none on a timer; small journal files so replay spans several.
    options = ("--write-cache-size", "200KiB", "--checkpoint-interval", "3600")
    proc = BookieProcess(dirs, *options, "--journal-max-size", "64KiB")
    bid = await proc.start()
    acked: dict[tuple[int, int], bytes] = {}
    try:
        async with connect(bid) as c:
            first = [c.add_request(1, e, payload_for(1, e, 900)) for e in range(300)]
            assert all(a.status is StatusCode.OK for a in await c.call_many(first))  # type: ignore[union-attr]
            acked.update({(1, e): payload_for(1, e, 900) for e in range(300)})
            with trio.fail_after(20):
                # polling another process's log: there is no event to wait on
                while "checkpoint" not in proc.stderr():  # noqa: ASYNC110
                    await trio.sleep(0.05)
            for first_entry in range(0, 200, 25):  # several groups, so journal files roll
                entries = range(first_entry, first_entry + 25)
                second = [c.add_request(2, e, payload_for(2, e, 900)) for e in entries]
                assert all(a.status is StatusCode.OK for a in await c.call_many(second))  # type: ignore[union-attr]
                acked.update({(2, e): payload_for(2, e, 900) for e in entries})
            assert len(list((dirs[0] / "journal").glob("*.jnl"))) >= 3
            proc.kill()
        log_before = proc.stderr()
        again = BookieProcess(dirs, *options)
        assert await again.start() == bid
        try:
            async with connect(bid) as c:
                await _check_all_readable(c, acked)
                assert (await c.read_lac(1)).status is StatusCode.OK
        finally:
            assert again.terminate() == 0
    finally:
        proc.kill()
    assert log_before.count(" checkpoint entries=") == 1
    replayed = _replayed(again.stderr()[len(log_before) :])
    # Replay started at the checkpoint's LastLogMark: the whole second batch, and only the
    # part of the first one that came after the mark.
    assert replayed and 200 <= replayed[0] < 500


async def test_fencing_survives_sigkill(tmp_path: Path) -> None:
    dirs = [tmp_path / "d"]
    proc = BookieProcess(dirs)
    bid = await proc.start()
    try:
        async with connect(bid) as c:
            for e in range(3):
                assert (await c.add(7, e, b"e%d" % e, lac=e - 1)).status is StatusCode.OK
            fenced = await c.read_lac(7, flags=ReadLacFlag.FENCE)
            assert (fenced.status, fenced.lac) == (StatusCode.OK, 1)
            proc.kill()  # right after the fence was answered
        again = BookieProcess(dirs)
        assert await again.start() == bid
        try:
            async with connect(bid) as c:
                assert (await c.add(7, 3, b"late")).status is StatusCode.LEDGER_FENCED
                rec = await c.add(7, 3, b"recovered", lac=1, flags=AddFlag.RECOVERY)
                assert rec.status is StatusCode.OK
                assert (await c.read(7, 2)).packet == packet(7, 2, b"e2", 1)
        finally:
            assert again.terminate() == 0
    finally:
        proc.kill()


async def test_sigterm_shuts_down_cleanly_with_adds_in_flight(tmp_path: Path) -> None:
    proc = BookieProcess([tmp_path / "d"])
    bid = await proc.start()
    async with connect(bid) as c:
        assert (await c.add(1, 0, b"x")).status is StatusCode.OK
        await c.stream.send_all(
            b"".join(encode_frame(c.add_request(1, e, b"y")) for e in range(1, 500))
        )
        assert proc.terminate() == 0
    log = proc.stderr()
    assert "bookie_stopping" in log and "bookie_stopped" in log
    assert "Traceback" not in log


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--port", "70000", "--data-dir", "x"], "70000 must be in 0..65535"),
        (["--port", "3181"], "--data-dir"),
        (["--data-dir", "x", "--network-location", "rack1"], "network location"),
        (["--data-dir", "x", "--data-dir", "x"], "listed twice"),
        (["--data-dir", "x", "--disk-usage-threshold", "2"], "must be in (0, 1]"),
        (["--data-dir", "x", "--max-frame-size", "lots"], "is not a size"),
        (["--data-dir", "x", "--max-frame-size", "inf"], "not a size"),
        (["--data-dir", "x", "--rereplication-bytes-per-second", "fast"], "not a size"),
        (["--data-dir", "x", "--rereplication-entries-per-second", "-1"], "must be a finite"),
        (["--data-dir", "x", "--rereplication-entries-per-second", "inf"], "must be a finite"),
        (["--data-dir", "x", "--metadata", "foo://bar"], "bad metadata URL"),
        (["--data-dir", "x", "--major-compaction-threshold", "1.5"], "must be in [0, 1]"),
        (
            ["--data-dir", "x", "--minor-compaction-threshold", "0.9"],
            "must not be above major_compaction_threshold",
        ),
    ],
)
def test_bad_arguments_exit_2_with_a_message(tmp_path: Path, args: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "walkit_bookie.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert message in done.stderr


def test_refusal_to_start_exits_1_with_a_clear_message(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a directory")
    code, out, err = BookieProcess([tmp_path / "file"]).run_to_exit()
    assert code == 1
    assert "walkit-bookie: error: data dir" in err and "is not a directory" in err
    assert "listening" not in out


async def test_cli_with_metadata_registers_and_unregisters(tmp_path: Path) -> None:
    from walkit.metadata import list_bookies, open_metadata_store, read_cookie

    url = f"sqlite://{tmp_path / 'metadata.db'}"
    proc = BookieProcess([tmp_path / "d"], "--metadata", url, "--network-location", "/r1/rack2")
    bid = await proc.start()
    try:
        async with await open_metadata_store(url) as store:
            bookies = await list_bookies(store)
            assert list(bookies.writable) == [bid]
            assert bookies.writable[bid].network_location == "/r1/rack2"
            assert await read_cookie(store, bid) is not None
            assert proc.terminate() == 0
            assert (await list_bookies(store)).writable == {}
    finally:
        proc.kill()


def test_rereplication_rate_limits_reach_the_config() -> None:
    from walkit_bookie.cli import build_parser, config_from_args

    def config(*args: str) -> tuple[float | None, int | None]:
        c = config_from_args(build_parser().parse_args(["--data-dir", "x", *args]))
        return c.rereplication_entries_per_second, c.rereplication_bytes_per_second

    assert config() == (None, None)  # autorecovery's defaults
    assert config(
        "--rereplication-entries-per-second",
        "0",
        "--rereplication-bytes-per-second",
        "64MiB/s",
    ) == (0.0, 64 << 20)
    assert config("--rereplication-bytes-per-second", "0") == (None, 0)
