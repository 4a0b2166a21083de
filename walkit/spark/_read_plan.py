"""Planning a read of a log: which entries of which ledgers, split into Spark partitions.

Pure and synchronous: the driver reads the log's metadata and each ledger's state, and this
module decides. The rules keep a Spark read equal to a plain ``log.reader()``:

- a closed ledger is read to its last entry, then the read goes on with the next listed ledger;
- an open ledger is read up to its LAC as a non-fencing reader sees it, and the read STOPS
  there, even when later ledgers are listed: during a roll the new ledger is listed before the
  old one is closed, and the old one's last entries may still be on their way to a quorum. The
  next read (the next micro-batch) resumes at that ledger's LAC + 1;
- nothing before the log's truncation point is read.

Positions are ``(ledger_seq, entry_id)``; the position a plan ends at is where the next plan
starts (exclusive end here, inclusive start there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import attrs

from walkit._core.log_position import LogPosition

__all__ = ["LedgerView", "LogPlan", "Range", "pack", "plan_log", "resolve_latest"]


@final
@attrs.frozen
class LedgerView:
    """A listed ledger as the planner sees it: ``last`` is its last entry if closed, else its
    LAC (-1 when it has no readable entry)."""

    seq: int
    ledger_id: int
    closed: bool
    last: int


@final
@attrs.frozen
class Range:
    """Entries ``first..last`` (inclusive) of one ledger."""

    seq: int
    ledger_id: int
    first: int
    last: int

    @property
    def count(self) -> int:
        return self.last - self.first + 1


@final
@attrs.frozen
class LogPlan:
    """The ranges to read, in log order, and the position after them."""

    ranges: tuple[Range, ...]
    end: LogPosition

    @property
    def count(self) -> int:
        return sum(r.count for r in self.ranges)


def resolve_latest(ledgers: Sequence[LedgerView], next_seq: int) -> LogPosition:
    """The position after the last readable record (what ``latest`` means as a start): the
    last listed ledger's LAC + 1, as a plain reader started at LATEST resolves it."""
    if not ledgers:
        return LogPosition(next_seq, 0)
    last = ledgers[-1]
    return LogPosition(last.seq, last.last + 1)


def plan_log(
    ledgers: Sequence[LedgerView],
    start: LogPosition,
    end: LogPosition | None = None,
    max_records: int | None = None,
) -> LogPlan:
    """The entries from ``start`` (inclusive) up to ``end`` (exclusive; None: as far as is
    readable now), at most ``max_records`` of them. ``ledgers`` are the log's listed ledgers in
    order; ``start`` must not be a sentinel other than EARLIEST (resolve LATEST first) and
    must already be at or after the truncation point."""
    ranges: list[Range] = []
    pos = start
    budget = max_records
    for ledger in ledgers:
        if ledger.seq < pos.ledger_seq:
            continue
        if end is not None and ledger.seq > end.ledger_seq:
            break
        first = pos.entry_id if ledger.seq == pos.ledger_seq else 0
        last = ledger.last
        limited = False
        if end is not None and ledger.seq == end.ledger_seq and end.entry_id - 1 < last:
            last = end.entry_id - 1
            limited = True
        if budget is not None and last - first + 1 > budget:
            last = first + budget - 1
            limited = True
        if first <= last:
            ranges.append(Range(ledger.seq, ledger.ledger_id, first, last))
            if budget is not None:
                budget -= last - first + 1
        pos = LogPosition(ledger.seq, max(first, last + 1))
        if limited or not ledger.closed or budget == 0:
            break
    return LogPlan(tuple(ranges), pos)


def pack(ranges: Sequence[Range], split_entries: int) -> list[tuple[Range, ...]]:
    """Ranges grouped into Spark partitions of at most ``split_entries`` entries: big ranges
    are cut, small neighbours share a partition; log order is kept across partitions."""
    partitions: list[tuple[Range, ...]] = []
    current: list[Range] = []
    room = split_entries
    for rng in ranges:
        first = rng.first
        while first <= rng.last:
            take = min(room, rng.last - first + 1)
            current.append(Range(rng.seq, rng.ledger_id, first, first + take - 1))
            first += take
            room -= take
            if room == 0:
                partitions.append(tuple(current))
                current = []
                room = split_entries
    if current:
        partitions.append(tuple(current))
    return partitions
