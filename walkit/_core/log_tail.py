"""Decisions of a log reader tailing an open ledger, and of a writer whose old ledger was closed
by someone else. Pure and synchronous.

A writer that dies in the middle of a roll (the next ledger listed, the old one never closed)
leaves the old ledger open with its last acknowledged entries beyond the LAC the bookies know.
A reader tailing that ledger would wait for a close that never comes (until the next writer's
takeover recovers it). Instead, once a later ledger is listed and the reader's ledger has shown
no progress for ``stalled_ledger_timeout`` seconds, the reader recovers the ledger itself
(fences and closes it, as a takeover does) and reads it to its true end.

A live writer whose background close of its old ledger is slow may then find that ledger
already recovered: :func:`close_outcome` tells a harmless recovery (the ledger closed at or
after every entry the writer acknowledged, and the writer still owns the log) from a takeover.
"""

from __future__ import annotations

import enum
from typing import final

import attrs

__all__ = ["CloseOutcome", "TailAction", "TailCheck", "check_tail", "close_outcome"]


class TailAction(enum.Enum):
    #: Keep waiting for the next entry.
    WAIT = "wait"
    #: The ledger left the log (truncated, dropped): look the position up again.
    RELOCATE = "relocate"
    #: A later ledger is listed and this one made no progress for the bound: recover it.
    RECOVER = "recover"


@final
@attrs.frozen
class TailCheck:
    """What to do, and since when a later ledger has been seen (None: not seen; keep it for
    the next check, and forget it when the ledger makes progress)."""

    action: TailAction
    later_seen_at: float | None


def check_tail(
    *,
    now: float,
    still_listed: bool,
    later_listed: bool,
    later_seen_at: float | None,
    stalled_timeout: float | None,
) -> TailCheck:
    """The reader waited in vain for the next entry of its open ledger: what now?

    ``still_listed``: the log still lists the ledger; ``later_listed``: it lists a later one;
    ``later_seen_at``: when the reader first saw a later ledger listed with no progress since
    (from the previous check's answer); ``stalled_timeout``: the bound (None: never recover,
    wait for a writer's takeover).
    """
    if not still_listed:
        return TailCheck(TailAction.RELOCATE, None)
    if not later_listed:
        return TailCheck(TailAction.WAIT, None)
    seen = now if later_seen_at is None else later_seen_at
    if stalled_timeout is not None and now - seen >= stalled_timeout:
        return TailCheck(TailAction.RECOVER, seen)
    return TailCheck(TailAction.WAIT, seen)


class CloseOutcome(enum.Enum):
    #: The ledger is closed with every acknowledged entry: nothing lost, the writer goes on.
    CLOSED = "closed"
    #: Another writer took the log over: this writer is fenced.
    FENCED = "fenced"
    #: The ledger closed before entries the writer acknowledged: never expected (a bug or a
    #: broken quorum); the writer stops.
    SHORT = "short"


def close_outcome(*, acknowledged: int, closed_at: int | None, still_owner: bool) -> CloseOutcome:
    """A writer's close of its old ledger (after a roll) found it fenced or in recovery.

    ``acknowledged``: the last entry id the writer acknowledged in it (-1: none);
    ``closed_at``: the last entry id the ledger was closed at (None: not closed yet);
    ``still_owner``: whether the log still lists the writer's current ledger last.
    """
    if not still_owner:
        return CloseOutcome.FENCED
    if closed_at is None:
        return CloseOutcome.FENCED
    if closed_at < acknowledged:
        return CloseOutcome.SHORT
    return CloseOutcome.CLOSED
