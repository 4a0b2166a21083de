"""A quiet library, logs the application controls, and the commands' log options: real programs
run as subprocesses against a real sandbox (``walkit_sandbox``, shared by the session)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests._sandbox import Sandbox

pytestmark = pytest.mark.processes

REPO = Path(__file__).resolve().parents[2]
CONSOLE_LINE = re.compile(
    r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} \[(debug|info|warning|error) *\] "
    r"(walkit|walkit_bookie)(\.\w+)*: [\w.]+( \w+=.*)?$"
)


def _run(args: list[str], url: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, WALKIT_METADATA=url),
    )


def _readme_log_snippet(marker: str) -> str:
    """The README's log example for one front: the block that opens a log and has ``marker``."""
    text = (REPO / "README.md").read_text()
    blocks: list[str] = re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
    (snippet,) = [b for b in blocks if "Log.open" in b and marker in b]
    return snippet


@pytest.mark.parametrize(
    ("marker", "records"),
    [
        ("trio.run(main)", ["b'order 1'", "b'order 2'", "b'order 3'"]),
        ("asyncio.run(main())", ["b'order 4'"]),
        ("walkit.sync.Client", ["b'order 5'"]),
    ],
    ids=["trio", "asyncio", "sync"],
)
def test_the_readme_log_snippets_print_only_their_records(
    walkit_sandbox: Sandbox, marker: str, records: list[str]
) -> None:
    """Nothing configured: the program's stdout is its own, its stderr is empty, whichever
    front it runs on."""
    snippet = _readme_log_snippet(marker)
    result = _run([sys.executable, "-c", snippet], walkit_sandbox.metadata_url)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    lines = result.stdout.splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == records


def test_closing_the_client_under_an_open_ledger_writer_is_quiet(walkit_sandbox: Sandbox) -> None:
    """The application's own shutdown is no warning: nothing on stderr."""
    program = """
import os, trio, walkit
async def main():
    async with walkit.Client.connect(os.environ["WALKIT_METADATA"]) as client:
        writer = await client.create_ledger(3, 3, 2, password=b"pw")
        await writer.append(b"x")
        print("appended", writer.last_add_confirmed)
trio.run(main)
"""
    result = _run([sys.executable, "-c", program], walkit_sandbox.metadata_url)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "appended 0\n"
    assert result.stderr == ""


def test_an_application_that_configures_logging_gets_walkits_events(
    walkit_sandbox: Sandbox,
) -> None:
    program = """
import logging, os, sys, trio, walkit
logging.basicConfig(level=logging.DEBUG, stream=sys.stdout, format="%(name)s|%(levelname)s|%(message)s")

async def main():
    async with walkit.Client.connect(os.environ["WALKIT_METADATA"]) as client:
        ledger = await client.create_ledger(3, 2, 2)
        await ledger.append(b"x")
        await ledger.close()

trio.run(main)
print("app|INFO|done")
"""
    result = _run([sys.executable, "-c", program], walkit_sandbox.metadata_url)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    records = [line.split("|", 2) for line in result.stdout.splitlines()]
    walkit_records = [r for r in records if r[0].startswith("walkit.")]
    assert {r[0] for r in walkit_records} >= {"walkit.ledger._writer"}
    closed = [r for r in walkit_records if r[2].startswith("ledger_closed ")]
    assert closed and closed[0][1] == "DEBUG" and "ledger_id=" in closed[0][2]
    assert records[-1] == ["app", "INFO", "done"]


def test_walkit_log_options_console_and_json(walkit_sandbox: Sandbox) -> None:
    url = walkit_sandbox.metadata_url
    walkit = [sys.executable, "-m", "walkit.cli"]
    quiet = _run([*walkit, "simpletest", "--entries", "10", "--json"], url)
    assert quiet.returncode == 0 and quiet.stderr == ""
    assert json.loads(quiet.stdout)["read_back"] == "ok"

    for args in (
        ["--log-level", "debug", "simpletest", "--entries", "10"],
        ["simpletest", "--entries", "10", "--log-level", "debug"],  # after the command too
        ["-v", "simpletest", "--entries", "10"],
    ):
        console = _run([*walkit, *args], url)
        assert console.returncode == 0, console.stderr
        lines = console.stderr.splitlines()
        assert lines and all(CONSOLE_LINE.match(line) for line in lines), console.stderr
        assert any("[debug  ] walkit.ledger._writer: ledger_closed" in line for line in lines)

    for args in (
        ["--log-level", "debug", "--log-format", "json", "simpletest", "--entries", "10"],
        ["--log-json", "-v", "simpletest", "--entries", "10"],
    ):
        as_json = _run([*walkit, *args], url)
        assert as_json.returncode == 0, as_json.stderr
        events = [json.loads(line) for line in as_json.stderr.splitlines()]
        assert events and all({"timestamp", "level", "logger", "event"} <= e.keys() for e in events)
        closed = [e for e in events if e["event"] == "ledger_closed"]
        assert closed[0]["level"] == "debug" and closed[0]["logger"] == "walkit.ledger._writer"
        assert isinstance(closed[0]["ledger_id"], int)

    bad = _run([*walkit, "--log-level", "loud", "bookies"], url)
    assert bad.returncode == 2 and "invalid choice: 'loud'" in bad.stderr
    bad = _run([*walkit, "bookies", "--log-format", "xml"], url)
    assert bad.returncode == 2 and "invalid choice: 'xml'" in bad.stderr


def test_walkit_runs_on_asyncio_with_uvloop_when_it_is_installed(tmp_path: Path) -> None:
    # The bookie's `--event-loop auto` rule; the debug log names the loop that ran the command.
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    result = _run([sys.executable, "-m", "walkit.cli", "--log-json", "-v", "bookies"], url)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in result.stderr.splitlines()]
    started = [e for e in events if e["event"] == "command_started"]
    loop = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    assert [(e["command"], e["event_loop"]) for e in started] == [("bookies", loop)]


def _bookie_stderr(tmp_path: Path, *log_args: str) -> list[str]:
    """Start a bookie with ``log_args``, stop it once it serves; its stderr lines."""
    data = tmp_path / f"bookie{len(list(tmp_path.iterdir()))}"
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "walkit_bookie.cli", "--data-dir", str(data), *log_args),
            *("--metadata", f"sqlite:///{tmp_path / 'metadata.db'}"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    try:
        assert process.stdout is not None
        assert "listening on" in process.stdout.readline()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, stderr
    return stderr.splitlines()


def test_walkit_bookie_log_options_console_and_json(tmp_path: Path) -> None:
    console = _bookie_stderr(tmp_path)  # default: info, console
    assert console and all(CONSOLE_LINE.match(line) for line in console), console
    assert any(
        "[info   ] walkit_bookie.lifecycle._bookie: bookie_started" in line for line in console
    )
    assert not any("[debug" in line for line in console)

    for args in (["--log-format", "json"], ["--log-json"]):
        events = [
            json.loads(line) for line in _bookie_stderr(tmp_path, "--log-level", "debug", *args)
        ]
        started = [e for e in events if e["event"] == "bookie_started"]
        assert started and started[0]["logger"] == "walkit_bookie.lifecycle._bookie"
        assert started[0]["level"] == "info" and "bookie_id" in started[0]

    assert _bookie_stderr(tmp_path, "--log-level", "error") == []


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_zookeeper_is_one_clear_error(tmp_path: Path) -> None:
    url = f"zk://127.0.0.1:{_closed_port()}/walkit"
    cli = _run([sys.executable, "-m", "walkit.cli", "bookies", "--metadata", url], "")
    assert cli.returncode == 1
    assert cli.stderr.splitlines() == [
        f"walkit: error: MetadataStoreError: cannot reach ZooKeeper at {url[5:-7]} within 5 s "
        f"(is it running? metadata URL {url})"
    ]
    bookie = _run(
        [
            sys.executable,
            "-m",
            "walkit_bookie.cli",
            "--data-dir",
            str(tmp_path / "b"),
            "--metadata",
            url,
        ],
        "",
    )
    assert bookie.returncode == 1
    assert bookie.stderr.splitlines() == [
        f"walkit-bookie: error: cannot reach ZooKeeper at {url[5:-7]} within 5 s "
        f"(is it running? metadata URL {url})"
    ]
    program = """
import sys, trio, walkit
async def main():
    async with walkit.Client.connect(sys.argv[1]):
        pass
try:
    trio.run(main)
except walkit.MetadataStoreError as exc:
    print(type(exc).__name__, exc.retryable, exc)
"""
    library = _run([sys.executable, "-c", program, url], "")
    assert library.returncode == 0, library.stderr
    assert library.stderr == ""  # none of kazoo's "Connection dropped" warnings
    assert library.stdout.startswith("MetadataStoreError True cannot reach ZooKeeper")
    assert url in library.stdout
