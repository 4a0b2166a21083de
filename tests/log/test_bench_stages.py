"""bench/stages.py as it is run: its probe still finds the steps it stamps (it wraps private
functions of walkit and the bookie, which a rename would leave unstamped), and the report has
every stage."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import stages

pytestmark = pytest.mark.processes

pytest.importorskip("uvloop")


def test_every_stage_of_an_append_in_flight_is_timed(tmp_path: Path) -> None:
    measured = stages.measure(1.0, str(tmp_path))
    timed = measured["stages"]
    assert len(timed["total"]) > 10  # most appends have every step stamped
    assert all(len(timed[name]) == len(timed["total"]) for name, *_ in stages.STAGES)
    # The journal write is a real O_DSYNC write, no stage is longer than the append, and
    # none is negative (a step stamped no more would pair with an older stamp).
    assert min(timed["journal write (O_DSYNC)"]) > 0
    assert all(min(timed[name]) >= 0 for name, *_ in stages.STAGES), {
        name: min(timed[name]) for name, *_ in stages.STAGES
    }
    assert all(
        timed[name][i] <= timed["total"][i]
        for name, *_ in stages.STAGES
        for i in range(len(timed["total"]))
    )
    text = stages.report(measured)
    assert all(f"| {name} |" in text for name, *_ in stages.STAGES)
    assert list(tmp_path.iterdir()) == []


def test_the_probe_puts_back_what_it_wrapped() -> None:
    from bench import _stage_probe
    from walkit.ledger import _writer
    from walkit.net import _direct, _outbox

    # (the outbox imported write_now by name: the probe rebinds it there too)
    before = (_writer.LedgerWriter._add, _direct.write_now, vars(_outbox)["write_now"])
    _stage_probe.install()
    assert _direct.write_now is not before[1] and vars(_outbox)["write_now"] is _direct.write_now
    _stage_probe.uninstall()
    assert (_writer.LedgerWriter._add, _direct.write_now, vars(_outbox)["write_now"]) == before
