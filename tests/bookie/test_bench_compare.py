"""bench/bookie.py --compare-tree as it is run: its arguments, and a tiny A/A run (this checkout
against itself) whose report gives both sides, their ratios and the client's CPU share."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "bookie.py"

pytestmark = pytest.mark.processes


def _bench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--no-append", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
    )


def test_a_tiny_run_against_a_tree_reports_both_sides_and_their_ratios(tmp_path: Path) -> None:
    args = ["--compare-tree", str(REPO), "--runs", "2", "--seconds", "0.02", "--latency-adds"]
    result = _bench(*args, "5", "--dir", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "## Bookie: this checkout against another tree" in out
    rows = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in row] for row in rows[2:]]  # (under the header and its rule)
    assert [row[0] for row in cells] == ["100 B", "1 KiB", "64 KiB"]
    ratio = r"\d+\.\d\d \(\d+\.\d\d to \d+\.\d\d\)"
    assert all(re.fullmatch(ratio, row[3]) and re.fullmatch(ratio, row[6]) for row in cells)
    assert re.search(r"client (stayed below one core|used up to)", out)
    # Each run measured both sides, and their data went with the run.
    assert len(re.findall(r"^  this: 100 B", out, re.M)) == 2
    assert len(re.findall(r"^  tree: 100 B", out, re.M)) == 2
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--compare-tree", "/nonexistent"], "not a checkout of walkit"),
        (["--compare-event-loop", "asyncio"], "--compare-event-loop needs --compare-tree"),
        (["--tls", "--compare-tree", str(REPO)], "one comparison at a time"),
        (["--bookie-event-loop", "gevent"], "invalid choice"),
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(
    args: list[str], message: str, tmp_path: Path
) -> None:
    result = _bench(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
