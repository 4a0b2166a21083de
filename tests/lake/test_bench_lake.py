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
    rows = [line for line in out.splitlines() if line.startswith("| 1 |")]
    assert [row.split("|")[2].strip() for row in rows] == [
        "plain reader, bookies (before offload)",
        "`log.offload()`",
        "plain reader, bookies (other log)",
        "plain reader, lake",
    ]
    ratios = [row.split("|")[8].strip() for row in rows]
    assert re.fullmatch(r"\d+\.\d\dx", ratios[1]) and re.fullmatch(r"\d+\.\d\dx", ratios[3])
    assert rows[1].rstrip(" |").endswith(">= 0.8x") and rows[3].rstrip(" |").endswith(">= 1x")
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
