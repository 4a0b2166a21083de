"""The README's first command: ``scripts/demo.sh`` starts a sandbox and shows the log's promise
(a writer SIGKILLed mid-stream, a successor taking the log over, every acknowledged record read
back), in its own printout."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.processes
@pytest.mark.skipif(
    Path(sys.executable).parent != ROOT / ".venv" / "bin",
    reason="scripts/demo.sh runs the repository's .venv",
)
def test_the_demo_shows_a_takeover_that_loses_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "WALKIT_DEMO_NO_SETUP": "1", "WALKIT_DEMO_DIR": str(tmp_path / "demo")}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    acked = re.search(r"SIGKILLed it after (\d+) acknowledged records", out)
    assert acked is not None and int(acked.group(1)) >= 3000, out
    assert re.search(r"took the log over \d+\.\d\d s after the kill: it fenced ledger \d+", out)
    assert "acknowledged records lost: 0\n" in out, out
    assert "acknowledged records at another position: 0\n" in out, out
    assert "in order: True" in out, out
    assert out.rstrip().endswith("the log kept every acknowledged record."), out
