"""Finding a log's first record at or after a time (``Log.position_at``), by bisection.

Records carry timestamps (ms since the epoch: :mod:`walkit._core.record`). The search looks
at as few ledgers and entries as it can:

1. over the log's ledgers, for the first whose greatest timestamp is at or after the time. A
   ledger closed by its writer says its range in its custom metadata (``walkit.timestamps =
   "MIN,MAX"``, :func:`time_range_tag`); for any other (open, recovered by a takeover, or
   written before timestamps) the greatest timestamp of its last entry stands for it;
2. within that ledger, over its entries, for the first whose greatest timestamp is at or
   after the time (one entry read per step);
3. within that entry, the first record whose timestamp is at or after the time.

Like Kafka's time index, the search assumes that timestamps do not decrease along the log,
which holds for the writer's own (the writer never stamps an entry before the one it stamped
last). With timestamps given out of order, it finds a record at or after the time, not
necessarily the first. Records without a timestamp count as older than any time.

Pure code: :class:`Bisection` says which index to look at next and is told what was there;
the log layer reads the ledger metadata and entries it asks for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, TypeAlias, final

from walkit._core.record import Extras
from walkit._core.record_set import RecordSet

__all__ = [
    "TIMESTAMPS_KEY",
    "Bisection",
    "TimeRange",
    "entry_time_range",
    "first_slot_at",
    "ledger_time_range",
    "max_timestamp",
    "time_range_tag",
    "widen",
]

#: Custom metadata key of a ledger closed by its writer: "MIN,MAX" of its records' timestamps
#: (absent when none of its records has one).
TIMESTAMPS_KEY: Final = "walkit.timestamps"

#: (min, max) of some records' timestamps.
TimeRange: TypeAlias = tuple[int, int]


def entry_time_range(
    timestamp: int | None, extras: Sequence[Extras | None] | None
) -> TimeRange | None:
    """(min, max) of the timestamps of an entry stamped ``timestamp`` whose records carry
    ``extras`` (what :func:`walkit._core.record_set.encode_record_set` was given)."""
    if extras is None:
        return None if timestamp is None else (timestamp, timestamp)
    times = [e[2] for e in extras if e is not None and e[2] is not None]
    if timestamp is not None and len(times) < len(extras):
        times.append(timestamp)  # some record takes the entry's
    return (min(times), max(times)) if times else None


def widen(current: TimeRange | None, more: TimeRange | None) -> TimeRange | None:
    """The range that covers both."""
    if current is None:
        return more
    if more is None:
        return current
    return min(current[0], more[0]), max(current[1], more[1])


def time_range_tag(time_range: TimeRange | None) -> dict[str, bytes]:
    """The custom metadata that records a ledger's range at its close (empty: none)."""
    if time_range is None:
        return {}
    return {TIMESTAMPS_KEY: f"{time_range[0]},{time_range[1]}".encode()}


def ledger_time_range(custom_metadata: Mapping[str, bytes]) -> TimeRange | None:
    """The range a ledger's close recorded (None: none recorded, or not readable, in which
    case the search reads the ledger's last entry instead)."""
    raw = custom_metadata.get(TIMESTAMPS_KEY)
    if raw is None:
        return None
    try:
        low, high = (int(part) for part in raw.decode("ascii").split(","))
    except (UnicodeDecodeError, ValueError):
        return None
    if not 0 <= low <= high:
        return None
    return low, high


def max_timestamp(record_set: RecordSet) -> int | None:
    """The greatest timestamp of an entry's records (None: none has one)."""
    if record_set.timestamps is None:
        return record_set.timestamp
    present = [t for t in record_set.timestamps if t is not None]
    return max(present) if present else None


def first_slot_at(record_set: RecordSet, at: int, start: int = 0) -> int | None:
    """The slot of the first record from ``start`` whose timestamp is ``at`` or later."""
    if record_set.timestamps is None:
        ts = record_set.timestamp
        return start if ts is not None and ts >= at and start < len(record_set.records) else None
    for slot in range(start, len(record_set.timestamps)):
        ts = record_set.timestamps[slot]
        if ts is not None and ts >= at:
            return slot
    return None


@final
class Bisection:
    """The first index in ``[low, high)`` where a monotone condition holds (``high`` when it
    holds nowhere): ask :attr:`probe`, look there, then :meth:`tell` what was found."""

    __slots__ = ("high", "low")

    def __init__(self, low: int, high: int) -> None:
        if low > high:
            raise ValueError(f"empty range [{low}, {high})")
        self.low = low
        self.high = high

    @property
    def done(self) -> bool:
        return self.low >= self.high

    @property
    def probe(self) -> int:
        """The index to look at next (only while not :attr:`done`)."""
        return (self.low + self.high) // 2

    def tell(self, holds: bool) -> None:
        """Whether the condition holds at :attr:`probe`."""
        mid = self.probe
        if holds:
            self.high = mid
        else:
            self.low = mid + 1

    @property
    def result(self) -> int:
        return self.low
