"""bench/_floor.py as bench/log.py runs it: three server processes doing the journal's write
and a client waiting for two answers of three, one message at a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench._floor import one_in_flight_floor

pytestmark = pytest.mark.processes

pytest.importorskip("uvloop")


def test_the_floor_is_measured_and_its_files_removed(tmp_path: Path) -> None:
    figures = one_in_flight_floor(tmp_path, seconds=0.3)
    assert figures["floor_per_s"] > 0
    # Each message waits for two O_DSYNC writes and two loopback round trips: not nothing,
    # and well under the second a stuck server would take.
    assert 0.01 < figures["floor_p50_ms"] < 1000
    assert list(tmp_path.iterdir()) == []
