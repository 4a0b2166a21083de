"""bench/lake.py as it is run: its arguments, and a tiny run (3 bookie processes, a file://
lake, no Spark) whose report gives every figure with its ratio and target."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "lake.py"

pytestmark = pytest.mark.processes


def _bench(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=cwd,
    )


def test_a_tiny_run_reports_every_figure_against_its_target(tmp_path: Path) -> None:
    args = ("--records", "2000", "--runs", "1", "--no-spark", "--no-append", "--dir")
    result = _bench(*args, str(tmp_path), cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "## Lake: 2,000 order events" in out
    table = [line.split("|")[1:-1] for line in out.splitlines() if line.startswith("| ")]
    cells = [[c.strip() for c in row] for row in table[1:]]  # (under the header)
    assert [row[0] for row in cells] == [
        "plain reader, bookies, before the offload",
        "`log.offload()`, the same ledgers",
        "1: plain reader, bookies (the other log)",
        "1: plain reader, lake",
    ]
    assert [row[7] for row in cells] == ["", ">= 0.8x", "", ">= 1x"]
    assert re.fullmatch(r"\d+\.\d\dx", cells[1][6]) and re.fullmatch(r"\d+\.\d\dx", cells[3][6])
    assert "target <= 0.5x" in out and "Load average" in out
    # The bookies' data and the lake went with the run's temporary directory.
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--records", "10"], "--records must be >= 100"),
        (["--runs", "0"], "--runs >= 1"),
        (["--records", "many"], "invalid int value"),
    ],
)
def test_bad_arguments_are_refused_before_anything_starts(
    args: list[str], message: str, tmp_path: Path
) -> None:
    result = _bench(*args, "--no-append", "--dir", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 2 and message in result.stderr
    assert "Traceback" not in result.stderr
