"""The pure recovery decisions against BookKeeper's protocol document and the TLA+ protocol guide."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walkit._core.distribution import (
    ensemble_coverage,
    quorum_coverage,
    stores_entry,
    write_set,
)
from walkit._core.recovery import (
    Answer,
    EntryDecision,
    FenceTracker,
    RecoveryReadTracker,
    RecoveryUndecidable,
    WriteBackTracker,
    recovery_fragment_start,
    recovery_outcome,
    recovery_start_lac,
)

# BookKeeper's protocol document, "Write Quorums": E=4, Qw=3, Qa=2, ensemble B1..B4.
SEED_000_TABLE = {
    0: ["B1", "B2", "B3"],
    1: ["B2", "B3", "B4"],
    2: ["B3", "B4", "B1"],
    3: ["B4", "B1", "B2"],
    4: ["B1", "B2", "B3"],
    5: ["B2", "B3", "B4"],
}


def test_write_quorum_table_of_seed_000() -> None:
    ensemble = ["B1", "B2", "B3", "B4"]
    for entry_id, expected in SEED_000_TABLE.items():
        assert [ensemble[i] for i in write_set(entry_id, 4, 3)] == expected
        for index, bookie in enumerate(ensemble):
            assert stores_entry(index, entry_id, 4, 3) == (bookie in expected)


def test_only_e_distinct_write_quorums_and_none_when_qw_equals_e() -> None:
    assert len({tuple(write_set(e, 4, 3)) for e in range(100)}) == 4
    assert {tuple(sorted(write_set(e, 3, 3))) for e in range(10)} == {(0, 1, 2)}


def test_coverage_formulas_of_seed_001() -> None:
    assert quorum_coverage(3, 2) == 2
    assert ensemble_coverage(3, 2) == 2
    assert ensemble_coverage(5, 2) == 4
    assert quorum_coverage(2, 2) == 1


# --- fencing -------------------------------------------------------------------------------


def test_fencing_needs_ensemble_coverage() -> None:
    tracker = FenceTracker(ensemble_size=3, write_quorum=3, ack_quorum=2)
    tracker.on_answer(0, Answer.OK, lac=7)
    assert not tracker.done
    tracker.on_answer(0, Answer.OK, lac=9)  # a duplicate answer does not count twice
    assert not tracker.done
    tracker.on_answer(2, Answer.OK, lac=5)
    assert tracker.done
    assert tracker.max_lac == 7


def test_fencing_fails_when_coverage_is_impossible() -> None:
    tracker = FenceTracker(ensemble_size=3, write_quorum=3, ack_quorum=2)
    tracker.on_answer(0, Answer.ERROR)
    assert not tracker.failed
    tracker.on_answer(1, Answer.ERROR)
    assert tracker.failed
    assert not tracker.done


def test_fencing_by_quorum_coverage_in_every_write_quorum() -> None:
    # E=5, Qw=2, Qa=2: EC is 4, but bookies 0, 2 and 4 cover every write quorum {i, i+1}.
    tracker = FenceTracker(ensemble_size=5, write_quorum=2, ack_quorum=2)
    tracker.on_answer(1, Answer.ERROR)
    tracker.on_answer(3, Answer.ERROR)
    assert not tracker.failed
    for index in (0, 2, 4):
        tracker.on_answer(index, Answer.OK, lac=3)
    assert tracker.done


def test_a_bookie_that_never_saw_the_ledger_is_fenced_with_lac_minus_one() -> None:
    tracker = FenceTracker(ensemble_size=2, write_quorum=2, ack_quorum=2)
    tracker.on_answer(1, Answer.MISSING)
    assert tracker.done
    assert tracker.max_lac == -1


@given(
    st.integers(1, 5).flatmap(
        lambda e: st.tuples(
            st.just(e),
            st.integers(1, e).flatmap(lambda qw: st.tuples(st.just(qw), st.integers(1, qw))),
            st.sets(st.integers(0, e - 1)),
        )
    )
)
def test_fencing_done_means_no_write_quorum_keeps_ack_quorum_unfenced(
    case: tuple[int, tuple[int, int], set[int]],
) -> None:
    """The safety property behind fencing: once done, the old writer cannot reach Qa anywhere."""
    e, (qw, qa), fenced = case
    tracker = FenceTracker(e, qw, qa)
    for index in fenced:
        tracker.on_answer(index, Answer.OK, lac=0)
    if tracker.done:
        for first in range(e):
            unfenced = [i for i in write_set(first, e, qw) if i not in fenced]
            assert len(unfenced) < qa


# --- recovery reads ------------------------------------------------------------------------


def test_entry_confirmed_with_ack_quorum_positive_answers() -> None:
    tracker = RecoveryReadTracker(entry_id=4, ensemble_size=3, write_quorum=3, ack_quorum=2)
    assert tracker.on_answer(1, Answer.OK, b"p") is EntryDecision.PENDING
    assert tracker.on_answer(2, Answer.OK, b"p") is EntryDecision.CONFIRMED
    assert tracker.packet == b"p"


def test_entry_absent_with_quorum_coverage_negative_answers() -> None:
    tracker = RecoveryReadTracker(entry_id=3, ensemble_size=3, write_quorum=3, ack_quorum=2)
    assert tracker.on_answer(0, Answer.MISSING) is EntryDecision.PENDING
    assert tracker.on_answer(1, Answer.MISSING) is EntryDecision.ABSENT


def test_entry_undecidable_when_all_answered_without_a_threshold() -> None:
    tracker = RecoveryReadTracker(entry_id=0, ensemble_size=3, write_quorum=3, ack_quorum=2)
    tracker.on_answer(0, Answer.OK, b"p")
    tracker.on_answer(1, Answer.MISSING)
    assert tracker.on_answer(2, Answer.ERROR) is EntryDecision.UNDECIDABLE


def test_answers_from_outside_the_write_set_are_refused() -> None:
    tracker = RecoveryReadTracker(entry_id=0, ensemble_size=4, write_quorum=2, ack_quorum=2)
    with pytest.raises(ValueError, match="write set"):
        tracker.on_answer(3, Answer.OK, b"p")


def test_figure_10_of_seed_001() -> None:
    """E=3 Qw=3 Qa=2. Fencing finds LAC 1; entry 2 is on two bookies, entry 3 on one only.

    Reading entry 3 gets two "no such entry" answers (QC = 2): it is unconfirmed, so the ledger
    ends at entry 2, which is written back to its whole write set.
    """
    fence = FenceTracker(3, 3, 2)
    fence.on_answer(0, Answer.OK, lac=1)
    fence.on_answer(1, Answer.OK, lac=0)
    assert fence.done and fence.max_lac == 1

    entry2 = RecoveryReadTracker(2, 3, 3, 2)
    entry2.on_answer(0, Answer.OK, b"two")
    entry2.on_answer(1, Answer.OK, b"two")
    entry3 = RecoveryReadTracker(3, 3, 3, 2)
    entry3.on_answer(0, Answer.OK, b"three")
    entry3.on_answer(1, Answer.MISSING)
    entry3.on_answer(2, Answer.MISSING)

    outcome = recovery_outcome(fence.max_lac, [(2, entry2.decision), (3, entry3.decision)])
    assert outcome.last_entry_id == 2
    assert outcome.confirmed == (2,)
    assert outcome.first_absent == 3

    write_back = WriteBackTracker(2, write_set(2, 3, 3), ack_quorum=2)
    write_back.on_answer(2, Answer.OK)
    assert not write_back.done
    write_back.on_answer(0, Answer.OK)
    assert write_back.done


def test_outcome_of_an_empty_ledger() -> None:
    outcome = recovery_outcome(-1, [(0, EntryDecision.ABSENT)])
    assert outcome.last_entry_id == -1
    assert outcome.confirmed == ()


def test_outcome_aborts_on_an_undecidable_entry_before_the_end() -> None:
    with pytest.raises(RecoveryUndecidable) as info:
        recovery_outcome(5, [(6, EntryDecision.CONFIRMED), (7, EntryDecision.UNDECIDABLE)])
    assert info.value.entry_id == 7


def test_outcome_refuses_out_of_order_decisions() -> None:
    with pytest.raises(ValueError, match="out of order"):
        recovery_outcome(5, [(7, EntryDecision.CONFIRMED)])


def test_write_back_fails_when_ack_quorum_is_unreachable() -> None:
    tracker = WriteBackTracker(0, [0, 1, 2], ack_quorum=2)
    tracker.on_answer(0, Answer.ERROR)
    assert not tracker.failed
    tracker.on_answer(1, Answer.ERROR)
    assert tracker.failed
    assert tracker.failed_bookies == [0, 1]


def test_recovery_fragment_starts_after_the_start_lac() -> None:
    assert recovery_fragment_start(9) == 10


def test_recovery_never_starts_below_the_last_fragment() -> None:
    """apache/bookkeeper#2615: ensembles 0:{b1,b2}, 1000:{b2,b3}, 2000:{b4,b5}; b4 and b5 never
    got an entry and answer LAC -1. Recovery must start at entry 2000, not at entry 0."""
    assert recovery_start_lac(fenced_lac=-1, last_fragment_first_entry=2000) == 1999
    assert recovery_fragment_start(recovery_start_lac(-1, 2000)) == 2000
    assert recovery_start_lac(fenced_lac=2500, last_fragment_first_entry=2000) == 2500
    assert recovery_start_lac(fenced_lac=-1, last_fragment_first_entry=0) == -1


@given(st.integers(1, 5), st.data())
def test_confirmed_and_absent_are_exclusive(e: int, data: st.DataObject) -> None:
    """No answer pattern makes an entry both confirmed and absent (Qa + QC > Qw)."""
    qw = data.draw(st.integers(1, e))
    qa = data.draw(st.integers(1, qw))
    for answers in itertools.product([Answer.OK, Answer.MISSING, Answer.ERROR], repeat=qw):
        tracker = RecoveryReadTracker(0, e, qw, qa)
        for index, answer in zip(write_set(0, e, qw), answers, strict=True):
            tracker.on_answer(index, answer, b"x" if answer is Answer.OK else None)
        oks = answers.count(Answer.OK)
        missing = answers.count(Answer.MISSING)
        assert not (oks >= qa and missing >= quorum_coverage(qw, qa))
        if tracker.decision is EntryDecision.ABSENT:
            # Absent means fewer than Qa bookies can hold it: it was never acknowledged.
            assert qw - missing < qa


def test_ensemble_changes_back_off_only_without_progress() -> None:
    from walkit._core.ensemble_change import (
        CHANGE_BACKOFF_CAP,
        CHANGE_BACKOFF_FIRST,
        change_backoff,
    )

    assert change_backoff(0.0, progressed=True) == 0.0
    pause = change_backoff(0.0, progressed=False)
    assert pause == CHANGE_BACKOFF_FIRST
    for _ in range(20):
        pause = change_backoff(pause, progressed=False)
    assert pause == CHANGE_BACKOFF_CAP
    assert change_backoff(pause, progressed=True) == 0.0
