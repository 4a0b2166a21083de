"""``walkit sandbox`` as a user runs it: it stays up, restarts a bookie that dies, and leaves no
bookie behind when it is killed. Real sandbox and bookie processes on loopback."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio

import walkit
from tests._sandbox import Sandbox, alive, running_sandbox
from walkit._cli._child import guarded_python
from walkit._cli.sandbox import restart_delay

pytestmark = pytest.mark.processes

# trio forks `open_process` children from worker threads that exit after this many idle seconds
# (trio._core._thread_cache.IDLE_TIMEOUT); a parent-death signal tied to such a thread fired then.
TRIO_THREAD_IDLE_TIMEOUT = 10


def test_restart_delay_backs_off_up_to_a_cap() -> None:
    assert [restart_delay(n) for n in range(8)] == [0.5, 1, 2, 4, 8, 16, 30, 30]
    assert restart_delay(10_000) == 30


def test_a_guarded_child_refuses_to_start_when_its_parent_is_gone() -> None:
    not_my_parent = os.getppid()  # the child's parent is this process, not that one
    result = subprocess.run(
        [*guarded_python("print('started')", parent=not_my_parent)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert "is gone; not starting" in result.stderr and "started" not in result.stdout
    ok = subprocess.run(
        guarded_python("print('started')", parent=os.getpid()),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert (ok.returncode, ok.stdout) == (0, "started\n")


def _bookies_die_after_sigkill(sandbox: Sandbox) -> None:
    bookies = sandbox.bookie_pids()
    assert bookies
    sandbox.stop(signal.SIGKILL)
    deadline = time.monotonic() + 15
    while any(alive(pid) for pid in bookies):
        assert time.monotonic() < deadline, f"bookies {bookies} outlived their sandbox"
        time.sleep(0.05)


async def _write_and_read(url: str, ensemble: int, payloads: list[bytes]) -> None:
    async with walkit.Client.connect(url) as client:
        writer = await client.create_ledger(ensemble, ensemble, ensemble, password=b"pw")
        await writer.append_batch(payloads)
        await writer.close()
        reader = await client.open_ledger(writer.id, password=b"pw")
        entries = await reader.read(0, reader.last_add_confirmed)
        assert [e.payload for e in entries] == payloads


@pytest.mark.skipif(sys.platform != "linux", reason="parent-death signal is Linux-only")
async def test_sandbox_serves_past_any_idle_timeout_then_dies_with_its_bookies(
    tmp_path: Path,
) -> None:
    """The one long test (~35 s): today's bug killed every bookie 10 s after the start."""
    with running_sandbox(tmp_path / "sandbox", bookies=3) as sandbox:
        bookies = sandbox.bookie_pids()
        assert len(bookies) == 3
        written: list[bytes] = []
        async with walkit.Client.connect(sandbox.metadata_url) as client:
            # E=Qw=Qa=3: every write needs every bookie, so one lost bookie fails the test.
            writer = await client.create_ledger(3, 3, 3, password=b"pw")
            started = trio.current_time()
            while trio.current_time() - started < 3 * TRIO_THREAD_IDLE_TIMEOUT + 2:
                payload = b"record %d" % len(written)
                await writer.append(payload)
                written.append(payload)
                await trio.sleep(1)  # the point is the time that passes, not a condition
            await writer.close()
            reader = await client.open_ledger(writer.id, password=b"pw")
            entries = await reader.read(0, reader.last_add_confirmed)
        assert [e.payload for e in entries] == written
        await _write_and_read(sandbox.metadata_url, 3, [b"at the end"] * 10)
        assert sandbox.bookie_pids() == bookies, sandbox.output
        assert "exited" not in sandbox.output
        _bookies_die_after_sigkill(sandbox)


@pytest.mark.skipif(sys.platform != "linux", reason="parent-death signal is Linux-only")
def test_bookies_do_not_outlive_a_sandbox_killed_at_once(tmp_path: Path) -> None:
    with running_sandbox(tmp_path / "my sandbox", bookies=2) as sandbox:
        # The export line pastes into a shell as is, even with a space in the path.
        export = sandbox.wait_for_line("export WALKIT_METADATA=")
        pasted = subprocess.run(
            ["bash", "-c", f'{export}\nprintf %s "$WALKIT_METADATA"'],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert pasted.stdout == sandbox.metadata_url
        assert sandbox.metadata_url.startswith("sqlite:///") and " " in sandbox.metadata_url
        _bookies_die_after_sigkill(sandbox)


async def test_a_killed_bookie_is_restarted_on_its_data_and_writes_go_on(
    tmp_path: Path,
) -> None:
    with running_sandbox(tmp_path / "sandbox", bookies=2) as sandbox:
        url = sandbox.metadata_url
        before = [b"before %d" % i for i in range(20)]
        async with walkit.Client.connect(url) as client:
            writer = await client.create_ledger(2, 2, 2, password=b"pw")
            await writer.append_batch(before)
            await writer.close()
        victim = sandbox.bookie_pids()[0]
        mark = len(sandbox.lines)
        os.kill(victim, signal.SIGKILL)
        said = sandbox.wait_for_line("exited unexpectedly with code -9", after=mark)
        assert "restarting it in 0.5 s on the same data dir" in said
        assert "[warning]" in sandbox.wait_for_line("bookie_exited", after=mark)
        sandbox.wait_for_line("is back", after=mark, timeout=60)
        assert victim not in sandbox.bookie_pids() and len(sandbox.bookie_pids()) == 2
        # E=Qw=Qa=2 of 2 bookies: only works with the restarted bookie serving again.
        await _write_and_read(url, 2, [b"after %d" % i for i in range(20)])
        async with walkit.Client.connect(url) as client:
            reader = await client.open_ledger(writer.id, password=b"pw")
            entries = await reader.read(0, reader.last_add_confirmed)
        assert [e.payload for e in entries] == before


def test_exit_on_bookie_failure_stops_the_sandbox_with_code_1(tmp_path: Path) -> None:
    with running_sandbox(
        tmp_path / "sandbox", bookies=2, extra=["--exit-on-bookie-failure"]
    ) as sandbox:
        victim, other = sandbox.bookie_pids()
        os.kill(victim, signal.SIGKILL)
        assert sandbox.process is not None
        assert sandbox.process.wait(timeout=60) == 1
        assert "exited unexpectedly with code -9; stopping the sandbox" in sandbox.output
        assert "restarting" not in sandbox.output
        assert not alive(other)


def test_a_bookie_that_cannot_start_is_one_clear_error(tmp_path: Path) -> None:
    data = tmp_path / "sandbox"
    data.mkdir()
    (data / "bookie-1").write_text("a file where the bookie's data dir should be")
    result = subprocess.run(
        [sys.executable, "-m", "walkit.cli", "sandbox", "--bookies", "2", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stderr.strip().splitlines()[-1] == (
        "walkit: error: ConfigurationError: bookie-1 failed to start (exit code 1); "
        "its output is above"
    )
    assert "[bookie-1] walkit-bookie: error:" in result.stdout
    (data / "sandbox.json").write_text("{not json")
    again = subprocess.run(
        [sys.executable, "-m", "walkit.cli", "sandbox", "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 1 and "sandbox.json is unreadable" in again.stderr
