"""The reader's pure decisions: next replica, speculation, final errors, LAC reads."""

from __future__ import annotations

from walkit._core.read_tracker import WAIT, LacRead, ReplicaRead, pick_read_error
from walkit.errors import (
    BookieTimeoutError,
    BookieUnavailableError,
    DigestMismatchError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedAccessError,
)


def test_next_replica_on_each_error() -> None:
    r = ReplicaRead([2, 0, 1])
    assert r.start() == 2
    assert r.on_error(BookieTimeoutError("slow")) == 0
    assert r.on_error(DigestMismatchError("bad")) == 1
    assert not r.failed
    assert r.on_error(NoSuchEntryError("gone")) == WAIT
    assert r.failed
    assert isinstance(r.final_error(5), DigestMismatchError)


def test_speculative_read_then_first_error_waits_for_the_other() -> None:
    r = ReplicaRead([0, 1])
    assert r.start() == 0
    assert r.speculate() == 1
    assert r.speculate() == WAIT  # nothing left to ask
    assert r.on_error(BookieUnavailableError("down")) == WAIT
    assert not r.failed  # slot 1 is still out
    r.on_success()
    assert not r.failed


def test_final_error_choice() -> None:
    assert isinstance(
        pick_read_error(1, [NoSuchEntryError(""), NoSuchLedgerError("")]), NoSuchEntryError
    )
    assert isinstance(
        pick_read_error(1, [NoSuchEntryError(""), BookieUnavailableError("")]),
        BookieUnavailableError,
    )
    assert isinstance(
        pick_read_error(1, [BookieTimeoutError(""), UnauthorizedAccessError("")]),
        UnauthorizedAccessError,
    )
    assert isinstance(pick_read_error(1, []), BookieUnavailableError)


def test_lac_read_done_at_ensemble_coverage() -> None:
    lac = LacRead(ensemble_size=3, ack_quorum=2)  # EC = 2
    lac.on_response(4)
    assert not lac.done
    lac.on_response(6)
    assert lac.done and lac.lac == 6


def test_lac_read_done_when_all_answered_with_errors() -> None:
    lac = LacRead(ensemble_size=3, ack_quorum=1)  # EC = 3
    lac.on_error(BookieUnavailableError("down"))
    lac.on_response(2)
    assert not lac.done
    lac.on_error(NoSuchLedgerError("nothing yet"))  # knows no LAC: an answer
    assert lac.done and lac.ok and lac.lac == 2


def test_lac_read_all_failed() -> None:
    lac = LacRead(ensemble_size=2, ack_quorum=2, floor=-1)
    lac.on_error(BookieUnavailableError("down"))
    lac.on_error(BookieTimeoutError("slow"))
    assert lac.done and not lac.ok
    assert isinstance(lac.error(3), BookieUnavailableError | BookieTimeoutError)
