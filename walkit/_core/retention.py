"""Retention and orphan decisions of a log: which whole ledgers may go. Pure and synchronous.

Retention (Kafka's ``retention.bytes`` / ``retention.ms``, DistributedLog's retention period):
a log keeps at least ``retain_records`` records, ``retain_bytes`` payload bytes, and every record
younger than ``retain_age`` seconds; a ledger is dropped when one of the limits that are set
puts it wholly behind the retention point. Only whole, closed ledgers at the front of the list
ever go; the last listed ledger (the current writer's), any ledger after an open one, and the
ledger holding the latest snapshot's position (and every later one) always stay, and so do the
ledgers the log's consumers have not committed past (``keep_from``).

A ledger's age is that of its newest record, which is at most the creation time of the next
ledger (a roll creates the next ledger before the old one takes no more records): a ledger goes
by age when the ledger after it was created more than ``retain_age`` ago.

Orphans: ledgers tagged with a log's name that the log does not list, created more than a grace
period ago (:func:`is_orphan`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Final, final

import attrs

from walkit._core.log_metadata import LogMetadata
from walkit._core.log_position import LogPosition
from walkit.errors import InvalidArgumentError

__all__ = [
    "RECORDS_KEY",
    "LedgerStats",
    "RetentionLimits",
    "is_orphan",
    "ledger_records",
    "retention_point",
]

#: Custom metadata key a log writer may set when it closes a ledger: how many records the
#: ledger holds (with record sets, several per entry). Without it, a ledger holds one record
#: per entry.
RECORDS_KEY: Final = "walkit.records"


def ledger_records(last_entry_id: int, custom_metadata: Mapping[str, bytes]) -> int:
    """How many records a closed ledger holds: its ``walkit.records`` tag if present and
    valid, else its entry count."""
    tag = custom_metadata.get(RECORDS_KEY)
    if tag is not None:
        try:
            count = int(tag.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            count = -1
        if count >= 0:
            return count
    return max(last_entry_id + 1, 0)


@final
@attrs.frozen
class LedgerStats:
    """What retention needs to know about one listed ledger."""

    seq: int
    ledger_id: int
    #: Whether it is closed (open ledgers, and every later one, always stay).
    closed: bool
    records: int = 0
    #: Payload bytes (the ledger's length).
    size: int = 0
    #: Wall-clock milliseconds at creation (0: unknown).
    ctime_ms: int = 0
    #: Entries (of a closed ledger).
    entries: int = 0


def _limit(name: str, value: object, *, whole: bool) -> None:
    if value is None:
        return
    number = isinstance(value, int) if whole else isinstance(value, int | float)
    if isinstance(value, bool) or not number or not 0 <= float(value) < math.inf:  # type: ignore[arg-type]
        what = "an int" if whole else "a number"
        raise InvalidArgumentError(f"{name} must be {what} >= 0 or None, not {value!r}")


@final
@attrs.frozen
class RetentionLimits:
    """The limits that are set (None: no limit of that kind)."""

    records: int | None = None
    size: int | None = None
    #: Seconds.
    age: float | None = None

    def __attrs_post_init__(self) -> None:
        _limit("retain_records", self.records, whole=True)
        _limit("retain_bytes", self.size, whole=True)
        _limit("retain_age", self.age, whole=False)

    @property
    def any(self) -> bool:
        return self.records is not None or self.size is not None or self.age is not None


def retention_point(
    md: LogMetadata,
    stats: Sequence[LedgerStats],
    limits: RetentionLimits,
    now_ms: int | None,
    keep_from: int | None = None,
) -> LogPosition | None:
    """Where to truncate the log for ``limits`` (None: nothing to drop).

    ``stats`` describe a prefix of ``md.ledgers`` in order (the caller may stop at the first
    open ledger). The answer is the start of the first ledger kept, never past the last listed
    ledger or the latest snapshot's ledger, and never behind the current truncation point.
    ``now_ms`` (wall-clock ms) is needed for ``limits.age``; None skips the age limit.
    ``keep_from``: the ledger with this sequence number and every later one stay (what the
    log's consumers have not committed: :func:`walkit._core.consumers.consumer_hold`).
    """
    if not limits.any or not md.ledgers:
        return None
    listed = [lg.seq for lg in md.ledgers]
    if [s.seq for s in stats] != listed[: len(stats)]:
        raise InvalidArgumentError("ledger stats do not follow the log's ledger list")
    # Candidates: closed ledgers at the front, never the last listed one.
    candidates: list[LedgerStats] = []
    for s in stats[: len(listed) - 1]:
        if not s.closed:
            break
        candidates.append(s)
    snapshot = md.latest_snapshot
    if snapshot is not None:
        candidates = [s for s in candidates if s.seq < snapshot.position.ledger_seq]
    if keep_from is not None:
        candidates = [s for s in candidates if s.seq < keep_from]
    if not candidates:
        return None
    drop = 0  # how many candidates at the front go
    if limits.records is not None or limits.size is not None:
        # Walk from the newest candidate back; everything newer than it is kept anyway.
        newer_records = sum(s.records for s in stats[len(candidates) :] if s.closed)
        newer_size = sum(s.size for s in stats[len(candidates) :] if s.closed)
        for i in range(len(candidates) - 1, -1, -1):
            if (limits.records is not None and newer_records >= limits.records) or (
                limits.size is not None and newer_size >= limits.size
            ):
                drop = max(drop, i + 1)
                break
            newer_records += candidates[i].records
            newer_size += candidates[i].size
    if limits.age is not None and now_ms is not None:
        cutoff = now_ms - int(limits.age * 1000)
        following = {s.seq: t.ctime_ms for s, t in itertools.pairwise(stats)}
        for i, s in enumerate(candidates):
            nxt = following.get(s.seq, 0)
            if nxt <= 0 or nxt > cutoff:
                break
            drop = max(drop, i + 1)
    if drop == 0:
        return None
    keep = stats[drop] if drop < len(stats) else md.ledgers[drop]
    point = LogPosition(ledger_seq=keep.seq, entry_id=0)
    return point if point > md.truncated else None


def is_orphan(
    ledger_id: int,
    ctime_ms: int,
    md: LogMetadata | None,
    *,
    now_ms: int,
    grace_ms: int,
) -> bool:
    """Whether a ledger tagged with a log's name is garbage: the log (``md``; None: it does not
    exist) does not list it (as data or snapshot) and it was created over ``grace_ms`` ago.
    Ledgers of unknown age (``ctime_ms`` 0) are never orphans."""
    if md is not None and ledger_id in md.ledger_ids():
        return False
    if ctime_ms <= 0:
        return False
    return now_ms - ctime_ms >= grace_ms
