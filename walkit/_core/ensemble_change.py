"""Writer-side metadata decisions (BookKeeper's protocol document): the new fragment of an ensemble
change, what a lost compare-and-set means, and closing as the writer.

Pure functions over :class:`LedgerMetadata`; the trio writer reads, CASes and retries.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

import attrs

from walkit._core.ledger_metadata import LedgerMetadata, LedgerState
from walkit._core.types import BookieId
from walkit.errors import (
    ClientClosedError,
    InvalidArgumentError,
    LedgerFencedError,
    LedgerInRecoveryError,
    WalkitError,
    WriterFencedError,
)

__all__ = [
    "CHANGE_BACKOFF_CAP",
    "CHANGE_BACKOFF_FIRST",
    "AddFailure",
    "CloseDecision",
    "change_backoff",
    "check_still_ours",
    "decide_close",
    "ensemble_with_replacements",
    "new_fragment",
    "on_add_failure",
]


class AddFailure(enum.Enum):
    """What the writer does when one bookie fails an add."""

    #: Another client fenced the ledger: every pending add fails with WriterFencedError.
    WRITER_FENCED = "writer_fenced"
    #: The client is closing: every pending add fails with that error.
    STOP = "stop"
    #: The bookie failed: replace it (ensemble change) and re-send to the replacement.
    REPLACE_BOOKIE = "replace_bookie"


def on_add_failure(error: WalkitError) -> AddFailure:
    """Decide what one failed add means for the writer.

    UnauthorizedAccessError is a bookie failure, not the writer's end: the writer created the
    ledger with its own key, so a bookie that refuses that key has had the ledger id claimed
    (fenced or written) with another key before the writer got there. That bookie will never
    take this ledger's adds; every other bookie still can, so the ledger goes on without it.
    """
    if isinstance(error, LedgerFencedError):
        return AddFailure.WRITER_FENCED
    if isinstance(error, ClientClosedError):
        return AddFailure.STOP
    return AddFailure.REPLACE_BOOKIE


def ensemble_with_replacements(
    ensemble: tuple[BookieId, ...], replacements: Mapping[int, BookieId]
) -> tuple[BookieId, ...]:
    """``ensemble`` with the bookies at the given slots replaced."""
    for slot, bookie in replacements.items():
        if not 0 <= slot < len(ensemble):
            raise InvalidArgumentError(f"slot {slot} out of range for {len(ensemble)} bookies")
        if bookie in ensemble:
            raise InvalidArgumentError(f"replacement {bookie} is already in the ensemble")
    if len(set(replacements.values())) != len(replacements):
        raise InvalidArgumentError("the same bookie replaces two slots")
    return tuple(replacements.get(i, b) for i, b in enumerate(ensemble))


def check_still_ours(current: LedgerMetadata, expected_ensemble: tuple[BookieId, ...]) -> None:
    """After a lost CAS: may the writer go on? Raise the error its pending adds get if not.

    The writer may go on only while the ledger is OPEN and its current ensemble is still the
    one the writer knows (nobody else changes an open ledger's last fragment).
    """
    if current.state is LedgerState.IN_RECOVERY:
        raise WriterFencedError(f"ledger {current.ledger_id} is being recovered by another client")
    if current.state is LedgerState.CLOSED:
        # Closed by someone else (a recovery): our pending adds may or may not be in it.
        raise WriterFencedError(
            f"ledger {current.ledger_id} was closed by another client at entry "
            f"{current.last_entry_id}"
        )
    if current.current_ensemble != expected_ensemble:
        raise WriterFencedError(
            f"ledger {current.ledger_id}: its ensemble was changed by another client"
        )


def new_fragment(
    current: LedgerMetadata,
    expected_ensemble: tuple[BookieId, ...],
    first_entry: int,
    replacements: Mapping[int, BookieId],
) -> LedgerMetadata:
    """The metadata to CAS for an ensemble change starting at ``first_entry``.

    Raises the writer's error if the ledger is no longer ours (see :func:`check_still_ours`).
    """
    check_still_ours(current, expected_ensemble)
    if first_entry < current.last_fragment_first_entry:
        raise InvalidArgumentError(
            f"ledger {current.ledger_id}: new fragment at {first_entry} would start before the "
            f"current one at {current.last_fragment_first_entry}"
        )
    ensemble = ensemble_with_replacements(expected_ensemble, replacements)
    return current.with_fragment(first_entry, ensemble)


@attrs.frozen
class CloseDecision:
    """What a closing writer does with the metadata it just read.

    Exactly one of: ``write`` (CAS this), ``done`` (already closed the same way), or ``error``.
    """

    write: LedgerMetadata | None = None
    done: bool = False
    error: WalkitError | None = None


def decide_close(
    current: LedgerMetadata,
    last_entry_id: int,
    length: int,
    custom: Mapping[str, bytes] | None = None,
) -> CloseDecision:
    """BookKeeper's protocol document, "Closing a ledger as a writer": CAS to CLOSED with the last
    acknowledged entry (and ``custom`` merged into the custom metadata, e.g. a log's record count);
    already CLOSED at the same entry is success; IN_RECOVERY or CLOSED elsewhere is an error."""
    if current.state is LedgerState.OPEN:
        closed = current.closed(last_entry_id, length)
        if custom:
            closed = attrs.evolve(closed, custom_metadata={**closed.custom_metadata, **custom})
        return CloseDecision(write=closed)
    if current.state is LedgerState.IN_RECOVERY:
        return CloseDecision(
            error=LedgerInRecoveryError(
                f"ledger {current.ledger_id} is being recovered by another client; "
                "the writer cannot close it"
            )
        )
    if current.last_entry_id == last_entry_id:
        return CloseDecision(done=True)
    return CloseDecision(
        error=WriterFencedError(
            f"ledger {current.ledger_id} was closed by another client at entry "
            f"{current.last_entry_id}, but this writer acknowledged up to {last_entry_id}"
        )
    )


#: First pause between ensemble changes that make no progress, and the longest.
CHANGE_BACKOFF_FIRST = 0.01
CHANGE_BACKOFF_CAP = 2.0


def change_backoff(previous: float, progressed: bool) -> float:
    """How long to wait before the next ensemble change (before jitter).

    None after progress (an entry was acknowledged since the last change): a failure then is a
    new failure. Without progress the replacements are failing too (every bookie's disk is
    bad, say): doubling pauses up to a cap keep the writer from spinning through metadata
    compare-and-sets, while it still finds a healthy bookie within the cap once one is back.
    """
    if progressed:
        return 0.0
    return min(CHANGE_BACKOFF_CAP, CHANGE_BACKOFF_FIRST if previous <= 0 else previous * 2)
