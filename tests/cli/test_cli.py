"""The `walkit` command, run as a user would: subprocesses against real bookie processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests._cluster import ProcessCluster
from tests.cli._run import walkit

pytestmark = pytest.mark.processes


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "required: COMMAND"),
        (["nope"], "invalid choice"),
        (["simpletest", "--entries", "0", "--metadata", "memory://x"], "must be an int >= 1"),
        (["ledger", "show", "abc", "--metadata", "memory://x"], "is not an integer"),
        (["ledger", "show", "-5", "--metadata", "memory://x"], "ledger id -5 must be an int >= 0"),
        (["sandbox", "--bookies", "0"], "must be an int >= 1"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(args: list[str], message: str) -> None:
    result = walkit(*args)
    assert result.returncode == 2
    assert message in result.stderr


def test_missing_metadata_url_is_explained() -> None:
    result = walkit("bookies")
    assert result.returncode != 0
    assert "no metadata URL" in result.stderr


def test_bad_metadata_url_is_a_clear_error() -> None:
    result = walkit("ledgers", "--metadata", "ftp://somewhere")
    assert result.returncode == 1
    assert "ConfigurationError" in result.stderr and "Traceback" not in result.stderr


def test_simpletest_bookies_ledgers_and_ledger_show(cluster: ProcessCluster) -> None:
    url = cluster.metadata_url
    result = walkit("simpletest", "--metadata", url, "--entries", "500", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["read_back"] == "ok" and record["entries"] == 500

    bookies = json.loads(walkit("bookies", "--metadata", url, "--json").stdout)
    assert sorted(b["bookie"] for b in bookies) == sorted(str(b.address) for b in cluster.bookies)
    assert {b["state"] for b in bookies} == {"writable"}
    table = walkit("bookies", "--metadata", url).stdout
    assert table.splitlines()[0].split() == ["BOOKIE", "STATE", "LOCATION"]

    # simpletest deletes its ledger; write one to inspect.
    script = (
        "import sys, trio, walkit\n"
        "async def main():\n"
        "    async with walkit.Client.connect(sys.argv[1]) as c:\n"
        "        custom = {'owner': b'team a', 'blob': b'\\xff\\x00ok'}\n"
        "        w = await c.create_ledger(3, 2, 2, password=b'pw', custom_metadata=custom)\n"
        "        await w.append_batch([b'alpha', b'beta', bytes(range(200))])\n"
        "        await w.close(); print(w.id)\n"
        "trio.run(main)\n"
    )
    ledger_id = subprocess.run(
        [sys.executable, "-c", script, url], capture_output=True, text=True, check=True, timeout=60
    ).stdout.strip()
    listed = json.loads(walkit("ledgers", "--metadata", url, "--json").stdout)
    assert ledger_id in [str(row["ledger_id"]) for row in listed]
    shown = json.loads(walkit("ledger", "show", ledger_id, "--metadata", url, "--json").stdout)
    assert shown["state"] == "CLOSED" and shown["last_entry_id"] == 2
    assert shown["password_stored"] is True  # that it is kept, never the password itself
    assert list(shown["fragments"]) == ["0"]
    assert shown["custom_metadata"] == {"owner": "team a", "blob": "\\xff\\x00ok"}
    text = walkit("ledger", "show", ledger_id, "--metadata", url).stdout.splitlines()
    assert ["password_stored", "True"] in [line.split() for line in text]
    assert not any("pw" in line.split() for line in text)
    assert text[text.index("custom metadata:") + 1].split() == ["KEY", "VALUE"]
    assert ["blob", "\\xff\\x00ok"] in [line.split() for line in text]
    assert ["owner", "team", "a"] in [line.split() for line in text]
    fragments = text[text.index("fragments:") + 1 :]
    assert fragments[0].split() == ["FIRST_ENTRY", "LAST_ENTRY", "BOOKIES"]
    first, last, bookies = fragments[1].split()
    assert (first, last, len(bookies.split(","))) == ("0", "2", 3)
    assert set(bookies.split(",")) == set(shown["fragments"]["0"])
    read = json.loads(
        walkit("ledger", "read", ledger_id, "--metadata", url, "--password", "pw", "--json").stdout
    )
    assert [r["payload"] for r in read[:2]] == ["alpha", "beta"]
    assert read[2]["payload"].startswith("base64:")

    missing = walkit("ledger", "show", "987654", "--metadata", url)
    assert missing.returncode == 1 and "NoSuchLedgerError" in missing.stderr
    wrong = walkit("ledger", "read", ledger_id, "--metadata", url, "--password", "bad")
    assert wrong.returncode == 1 and "UnauthorizedAccessError" in wrong.stderr


def _start_sandbox(data_dir: Path) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "walkit.cli",
            "sandbox",
            "--bookies",
            "2",
            "--data-dir",
            str(data_dir),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    for line in process.stdout:
        if line.startswith("metadata URL: "):
            return process, line.split(": ", 1)[1].strip()
        if time.monotonic() > deadline:
            break
    process.kill()
    raise AssertionError("sandbox did not print its metadata URL")


def test_sandbox_stops_on_sigterm_and_keeps_its_data(tmp_path: Path) -> None:
    process, url = _start_sandbox(tmp_path / "sandbox")
    try:
        assert url.startswith("sqlite:///")
        result = walkit(
            "simpletest",
            "--metadata",
            url,
            "--entries",
            "50",
            "--ensemble",
            "2",
            "--write-quorum",
            "2",
            "--ack-quorum",
            "2",
        )
        assert result.returncode == 0, result.stderr
        before = json.loads(walkit("bookies", "--metadata", url, "--json").stdout)
        assert len(before) == 2
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    again, url_again = _start_sandbox(tmp_path / "sandbox")
    try:
        assert url_again == url
        after = json.loads(walkit("bookies", "--metadata", url, "--json").stdout)
        assert sorted(b["bookie"] for b in after) == sorted(b["bookie"] for b in before)
    finally:
        again.send_signal(signal.SIGINT)
        assert again.wait(timeout=60) == 0


def test_sandbox_help_shows_the_defaults() -> None:
    result = walkit("sandbox", "--help")
    assert result.returncode == 0
    text = " ".join(result.stdout.split())
    for expected in (
        "number of bookies (default: 3)",
        "(default: .walkit/sandbox)",
        "(default: 127.0.0.1)",
        "--exit-on-bookie-failure",
        "--log-level {debug,info,warning,error}",
    ):
        assert expected in text
