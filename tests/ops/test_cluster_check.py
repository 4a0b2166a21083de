"""``walkit cluster check``: an entry written and read through every writable bookie process,
each one's latency or error, exit status 1 when one fails (a paused bookie, a killed one
still registered), read-only bookies listed but not written to, nothing left behind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._cluster import ProcessCluster, process_cluster
from tests.cli._run import walkit
from tests.ops._ops import AdminBookie

pytestmark = pytest.mark.processes


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    with process_cluster(f"sqlite:///{tmp_path / 'metadata.db'}", tmp_path, 3) as c:
        yield c


def _check(url: str, *args: str) -> tuple[int, dict[str, Any]]:
    done = walkit("cluster", "check", "--metadata", url, "--json", *args)
    assert not done.stderr or "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def _ledgers(url: str) -> list[Any]:
    done = walkit("ledgers", "--metadata", url, "--json")
    assert done.returncode == 0, done.stderr
    listed: list[Any] = json.loads(done.stdout)
    return listed


def test_every_writable_bookie_passes_and_a_paused_one_fails_alone(
    cluster: ProcessCluster,
) -> None:
    url = cluster.metadata_url
    code, report = _check(url)
    assert code == 0, report
    assert report["ok"] is True and report["checked"] == 3 and report["failed"] == 0
    rows = {row["bookie"]: row for row in report["bookies"]}
    assert set(rows) == {str(b.address) for b in cluster.bookies}
    for row in rows.values():
        assert row["ok"] is True and row["error"] is None, row
        assert row["write_ms"] > 0 and row["read_ms"] > 0, row
    assert _ledgers(url) == []  # the check ledgers were deleted

    paused = cluster.bookies[1]
    paused.pause()  # SIGSTOP: the kernel takes its connections, nobody answers
    try:
        code, report = _check(url, "--timeout", "3")
    finally:
        paused.resume()
    assert code == 1, report
    assert report["ok"] is False and report["failed"] == 1
    rows = {row["bookie"]: row for row in report["bookies"]}
    failed = rows[str(paused.address)]
    assert failed["ok"] is False and failed["write_ms"] is None, failed
    assert "did not answer" in failed["error"] or "no answer" in failed["error"], failed
    assert all(row["ok"] for name, row in rows.items() if name != str(paused.address)), rows
    assert _ledgers(url) == []

    text = walkit("cluster", "check", "--metadata", url)  # resumed: all pass again
    assert text.returncode == 0, text.stdout + text.stderr
    assert "3 of 3 writable bookies passed" in text.stdout
    assert text.stdout.splitlines()[0].split() == [
        "BOOKIE",
        "STATE",
        "STATUS",
        "WRITE_MS",
        "READ_MS",
        "ERROR",
    ]


def test_a_dead_but_registered_bookie_fails_the_check_and_a_read_only_one_is_listed(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    healthy = AdminBookie(url, tmp_path / "healthy")
    dead = AdminBookie(url, tmp_path / "dead")
    full = AdminBookie(url, tmp_path / "full", extra_args=["--disk-usage-threshold", "0.001"])
    bookies = [healthy, dead, full]
    try:
        for bookie in bookies:
            bookie.start()
        dead.kill()  # SIGKILL: registered until its metadata session times out
        code, report = _check(url, "--timeout", "5")
        rows = {row["bookie"]: row for row in report["bookies"]}
        assert rows[str(full.address)] == {
            "bookie": str(full.address),
            "state": "read_only",
            "ok": None,
            "error": None,
        }
        assert rows[str(healthy.address)]["ok"] is True, rows
        assert code == 1 and report["checked"] == 2 and report["failed"] == 1, report
        assert rows[str(dead.address)]["ok"] is False, rows
        assert "cannot connect" in rows[str(dead.address)]["error"], rows
        assert _ledgers(url) == []
    finally:
        for bookie in bookies:
            bookie.stop()


def test_bad_options_are_refused_with_a_one_line_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    for bad in ("0", "-1", "abc", "inf"):
        done = walkit("cluster", "check", "--metadata", url, "--timeout", bad)
        assert done.returncode == 2, done
        assert "--timeout" in done.stderr and "Traceback" not in done.stderr, done.stderr
    done = walkit("cluster", "check", "--metadata", url)  # no bookie at all
    assert done.returncode == 1 and "no writable bookie is registered" in done.stdout, done
