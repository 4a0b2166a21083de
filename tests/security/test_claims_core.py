"""The pure decisions about bookies that refuse a ledger's key (junk-key claims)."""

from __future__ import annotations

import pytest

from walkit._core.ensemble_change import AddFailure, on_add_failure
from walkit._core.recovery import (
    Answer,
    EntryDecision,
    FenceTracker,
    RecoveryReadTracker,
    WriteBackTracker,
    refused_answer,
)
from walkit.errors import (
    BookieTimeoutError,
    ClientClosedError,
    LedgerFencedError,
    UnauthorizedAccessError,
    WalkitError,
    WriterFencedError,
)


@pytest.mark.parametrize(
    ("error", "action"),
    [
        (UnauthorizedAccessError("x"), AddFailure.REPLACE_BOOKIE),
        (BookieTimeoutError("x"), AddFailure.REPLACE_BOOKIE),
        (LedgerFencedError("x"), AddFailure.WRITER_FENCED),
        (WriterFencedError("x"), AddFailure.WRITER_FENCED),
        (ClientClosedError("x"), AddFailure.STOP),
    ],
)
def test_a_refused_key_is_a_bookie_failure_for_the_writer(
    error: WalkitError, action: AddFailure
) -> None:
    assert on_add_failure(error) is action


def test_with_a_verified_password_a_refusing_bookie_is_fenced_and_holds_nothing() -> None:
    answer = refused_answer(password_verified=True)
    fence = FenceTracker(ensemble_size=3, write_quorum=3, ack_quorum=2)
    fence.on_answer(0, answer)
    fence.on_answer(1, answer)
    assert fence.done and fence.max_lac == -1
    read = RecoveryReadTracker(0, 3, 3, 2)
    read.on_answer(0, answer)
    assert read.on_answer(1, answer) is EntryDecision.ABSENT


def test_with_a_verified_password_refusals_never_outvote_the_entries() -> None:
    # One bookie refuses, two hold the entry: confirmed (Qa), and the LAC comes from the others.
    answer = refused_answer(password_verified=True)
    fence = FenceTracker(ensemble_size=3, write_quorum=3, ack_quorum=2)
    fence.on_answer(2, answer)
    fence.on_answer(0, Answer.OK, lac=41)
    assert fence.done and fence.max_lac == 41
    read = RecoveryReadTracker(42, 3, 3, 2)
    read.on_answer(2, answer)
    read.on_answer(0, Answer.OK, b"p")
    assert read.on_answer(1, Answer.OK, b"p") is EntryDecision.CONFIRMED


def test_without_a_verified_password_a_refusal_is_a_failed_bookie() -> None:
    answer = refused_answer(password_verified=False)
    assert answer is Answer.REFUSED
    fence = FenceTracker(ensemble_size=3, write_quorum=3, ack_quorum=2)
    fence.on_answer(0, answer)
    assert not fence.failed and fence.refused == 1
    fence.on_answer(1, answer)
    assert fence.failed and not fence.done
    read = RecoveryReadTracker(0, 3, 3, 2)
    read.on_answer(0, answer)
    read.on_answer(1, answer)
    assert read.on_answer(2, Answer.MISSING) is EntryDecision.UNDECIDABLE


def test_a_refusing_bookie_fails_a_write_back() -> None:
    tracker = WriteBackTracker(5, [0, 1, 2], ack_quorum=2)
    tracker.on_answer(0, Answer.REFUSED)
    tracker.on_answer(1, Answer.ERROR)
    assert tracker.failed_bookies == [0, 1] and tracker.failed
