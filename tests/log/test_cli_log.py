"""``walkit log list | show | tail``, run as a user would (a subprocess) against in-process
bookies on sqlite metadata."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import trio

from tests.client.conftest import cluster, connect
from walkit import Log, LogPosition
from walkit.log import log_path


async def walkit(url: str | None, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, WALKIT_METADATA=url or "")
    with trio.fail_after(120):
        return await trio.run_process(
            [sys.executable, "-m", "walkit.cli", *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )


async def test_log_commands(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'metadata.db'}"
    async with cluster(url, tmp_path, 3), connect(url) as client:
        log = await Log.open(client, "orders", roll_entries=4, password=b"pw")
        async with log.writer() as w:
            positions = [await w.append(b"order-%d" % i) for i in range(10)]
            await w.append(b"\x00\xffbinary")
            await w.truncate(positions[4])
        await log.save_snapshot(positions[6], b"state")
        await Log.open(client, "empty")

        listed = await walkit(url, "log", "list", "--json")
        assert listed.returncode == 0, listed.stderr
        rows = {r["name"]: r for r in json.loads(listed.stdout)}
        assert set(rows) == {"orders", "empty"}
        assert rows["orders"]["truncated"] == str(positions[4])
        assert rows["orders"]["snapshots"] == 1
        assert rows["orders"]["latest_snapshot"] == str(positions[6])
        assert rows["empty"]["ledgers"] == 0
        table = await walkit(None, "log", "list", "--metadata", url)
        assert table.returncode == 0 and b"orders" in table.stdout and b"TRUNCATED" in table.stdout

        shown = await walkit(url, "log", "show", "orders", "--json")
        assert shown.returncode == 0, shown.stderr
        doc = json.loads(shown.stdout)
        assert doc["truncated"] == str(positions[4])
        assert [lg["state"] for lg in doc["ledgers"]] == ["CLOSED"] * len(doc["ledgers"])
        assert doc["ledgers"][0]["seq"] == positions[4].ledger_seq
        assert doc["snapshots"][0]["position"] == str(positions[6])
        human = await walkit(url, "log", "show", "orders")
        assert human.returncode == 0
        assert b"ledgers:" in human.stdout and b"E=3 Qw=2 Qa=2 crc32c" in human.stdout

        tail = await walkit(url, "log", "tail", "orders", "--json", "--password", "pw")
        assert tail.returncode == 0, tail.stderr
        records = [json.loads(line) for line in tail.stdout.splitlines()]
        assert [r["position"] for r in records[:-1]] == [str(p) for p in positions[4:]]
        assert records[0]["payload"] == "order-4"
        assert records[-1]["payload"].startswith("base64:")
        start = await walkit(
            url, "log", "tail", "orders", "--from", str(positions[8]), "--password", "pw"
        )
        assert start.returncode == 0
        lines = start.stdout.decode().splitlines()
        assert lines[0].split() == ["POSITION", "TIME", "KEY", "SIZE", "PAYLOAD"]
        fields = lines[1].split()  # stamped by the client's wall clock, the default
        assert fields[0] == str(positions[8]) and fields[2:] == ["-", "7", "order-8"]
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", fields[1]), fields

        # Errors: a clear message, a non-zero status.
        missing = await walkit(url, "log", "show", "nope")
        assert missing.returncode == 1 and b"NoSuchLogError" in missing.stderr
        bad_pos = await walkit(url, "log", "tail", "orders", "--from", "x:y")
        assert bad_pos.returncode == 2 and b"bad log position" in bad_pos.stderr
        wrong_pw = await walkit(url, "log", "tail", "orders")
        assert wrong_pw.returncode == 1 and b"UnauthorizedAccessError" in wrong_pw.stderr
        await client.metadata_store.create(log_path("broken"), b"{}")
        listed = await walkit(url, "log", "list", "--json")
        assert listed.returncode == 0
        broken = next(r for r in json.loads(listed.stdout) if r["name"] == "broken")
        assert "unsupported metadata format" in broken["error"]
        shown = await walkit(url, "log", "show", "broken")
        assert shown.returncode == 1 and b"InvalidMetadataError" in shown.stderr


async def test_log_tail_shows_timestamps_keys_and_headers(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'metadata.db'}"
    t0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z
    now = [t0 / 1000]
    async with cluster(url, tmp_path, 3), connect(url, wall_clock=lambda: now[0]) as client:
        log = await Log.open(client, "events", roll_entries=3)
        async with log.writer() as w:
            first = await w.append(b"created", key=b"user-7", headers={"kind": b"signup"})
            now[0] += 60
            later = [await w.append(b"e%d" % i, key=b"\xff\x00") for i in range(5)]
            dated = await w.append(b"dated", timestamp=t0 + 3_600_000)

        table = await walkit(url, "log", "tail", "events")
        assert table.returncode == 0, table.stderr
        lines = table.stdout.decode().splitlines()
        assert lines[0].split() == ["POSITION", "TIME", "KEY", "SIZE", "PAYLOAD"]
        assert lines[1].split() == [
            str(first),
            "2023-11-14T22:13:20.000Z",
            "user-7",
            "7",
            "created",
        ]
        assert lines[2].split()[1:3] == ["2023-11-14T22:14:20.000Z", "base64:/wA="]
        assert lines[-1].split()[:2] == [str(dated), "2023-11-14T23:13:20.000Z"]

        doc = await walkit(url, "log", "tail", "events", "--json")
        records = [json.loads(line) for line in doc.stdout.splitlines()]
        assert records[0] == {
            "position": str(first),
            "timestamp": t0,
            "time": "2023-11-14T22:13:20.000Z",
            "key": "user-7",
            "headers": [["kind", "signup"]],
            "size": 7,
            "payload": "created",
        }
        assert records[1]["headers"] is None and records[1]["timestamp"] == t0 + 60_000

        # --since: the first record at or after a time (ISO 8601 or milliseconds).
        for since in ("2023-11-14T22:14:00Z", "2023-11-14T22:14:00", str(t0 + 40_000)):
            found = await walkit(url, "log", "tail", "events", "--json", "--since", since)
            assert found.returncode == 0, found.stderr
            got = [json.loads(line)["position"] for line in found.stdout.splitlines()]
            assert got == [str(p) for p in [*later, dated]]
        bad = await walkit(url, "log", "tail", "events", "--since", "yesterday")
        assert bad.returncode == 2 and b"bad time" in bad.stderr
        both = await walkit(url, "log", "tail", "events", "--since", "1", "--from", "1:0")
        assert both.returncode == 2


async def test_log_tail_follow(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'metadata.db'}"
    async with cluster(url, tmp_path, 3), connect(url) as client:
        log = await Log.open(client, "live", roll_entries=3)
        async with log.writer() as w:
            await w.append(b"first")
            proc = await trio.lowlevel.open_process(
                [sys.executable, "-m", "walkit.cli", "log", "tail", "live", "--follow", "--json"],
                stdout=subprocess.PIPE,
                env=dict(os.environ, WALKIT_METADATA=url),
            )
            assert proc.stdout is not None
            got: list[dict[str, str]] = []
            buffer = b""
            try:
                with trio.fail_after(60):
                    for i in range(8):
                        await w.append(b"live-%d" % i)  # rolls, as the tail follows
                    while len(got) < 9:
                        chunk = await proc.stdout.receive_some()
                        assert chunk, "the tail ended"
                        buffer += chunk
                        *lines, buffer = buffer.split(b"\n")
                        got += [json.loads(line) for line in lines if line]
            finally:
                proc.send_signal(signal.SIGINT)
                with trio.fail_after(30):
                    code = await proc.wait()
        assert [g["payload"] for g in got] == ["first"] + [f"live-{i}" for i in range(8)]
        positions = [LogPosition.parse(g["position"]) for g in got]
        assert positions == sorted(positions) and positions[-1].ledger_seq == 3
        assert code == 130
        # Ctrl-C cancels the command, and its client closed: its metadata session is gone.
        with sqlite3.connect(tmp_path / "metadata.db") as db:
            left = db.execute("SELECT id FROM sessions WHERE pid = ?", (proc.pid,)).fetchall()
        assert left == []
