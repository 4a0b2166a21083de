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


def test_an_append_pairs_with_its_own_adds_not_a_late_bookie_s_previous_one() -> None:
    # The third bookie (outside the ack quorum) receives entry 1 late, before entry 2 is
    # made, and answers it inside entry 2's window, after entry 2's quorum bookies. Paired by
    # time alone it would be entry 2's critical bookie, received before entry 2 was made.
    writer = [
        [0, "t0", -1], [10, "entry", 1], [20, "sent", 1], [290, "answer", -1],
        [300, "answer", -1], [310, "acknowledged", -1], [320, "woken", -1], [330, "t1", -1],
        [400, "t0", -1], [410, "entry", 2], [420, "sent", 2], [690, "answer", -1],
        [700, "answer", -1], [710, "acknowledged", -1], [720, "woken", -1], [730, "t1", -1],
    ]  # fmt: skip

    def add(received: int, entry_id: int, written: int) -> list[list[object]]:
        return [
            [received, "received", -1], [received + 10, "submitted", entry_id],
            [received + 20, "journal_write", -1], [written, "journal_written", -1],
            [written + 10, "wrote", -1],
        ]  # fmt: skip

    quick = [*add(30, 1, 230), *add(430, 2, 630)]
    late = [*add(395, 1, 655), *add(670, 2, 880)]
    timed = stages.timeline(writer, [quick, quick, late])
    assert timed["entry made → critical bookie received"] == [0.02, 0.02]
    assert timed["total"] == [0.33, 0.33]
