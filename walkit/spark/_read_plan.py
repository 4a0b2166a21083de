"""Planning a read of a log: which entries of which ledgers, split into Spark partitions.

Pure and synchronous: the driver reads the log's metadata and each ledger's state, and this
module decides. The rules keep a Spark read equal to a plain ``log.reader()``:

- a closed ledger is read to its last entry, then the read goes on with the next listed ledger;
- an open ledger is read up to its LAC as a non-fencing reader sees it, and the read STOPS
  there, even when later ledgers are listed: during a roll the new ledger is listed before the
  old one is closed, and the old one's last entries may still be on their way to a quorum. The
  next read (the next micro-batch) resumes at that ledger's LAC + 1;
- nothing before the log's truncation point is read.

Positions are ``(ledger_seq, entry_id, slot)``: entries of a record-set ledger hold several
records. The planner works on entries (it does not see inside them before they are read); a
start or end position with a slot cuts the first or last entry of a range at that slot
(``first_slot`` inclusive, ``end_slot`` exclusive), which the executor applies after decoding
the entry. The position a plan ends at is where the next plan starts (exclusive end here,
inclusive start there).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, final

import attrs

from walkit._core.lake import LakeLedger
from walkit._core.log_position import LogPosition

__all__ = [
    "LAKE_SPLIT_BYTES",
    "LedgerView",
    "LogPlan",
    "Range",
    "cut_at_records",
    "pack",
    "plan_log",
    "resolve_latest",
]


@final
@attrs.frozen
class LedgerView:
    """A listed ledger as the planner sees it: ``last`` is its last entry if closed, else its
    LAC (-1 when it has no readable entry); ``record_sets``: its entries are record sets."""

    seq: int
    ledger_id: int
    closed: bool
    last: int
    record_sets: bool = False
    #: The schema version its records were written with (0: none; a typed log's).
    schema: int = 0
    #: Its offload record when it was offloaded (its records are read from the lake's files).
    lake: LakeLedger | None = None


@final
@attrs.frozen
class Range:
    """Entries ``first..last`` (inclusive) of one ledger; of entry ``first`` only the records
    from slot ``first_slot`` on, of entry ``last`` only those before slot ``end_slot`` (None:
    all of them). ``record_sets``: the ledger's entries are record sets (else one record
    each)."""

    seq: int
    ledger_id: int
    first: int
    last: int
    record_sets: bool = False
    first_slot: int = 0
    end_slot: int | None = None
    #: The schema version of the ledger's records (0: none).
    schema: int = 0
    #: The ledger's offload record: read from these data files, not from the bookies.
    lake: LakeLedger | None = None

    @property
    def count(self) -> int:
        """Entries (not records: an entry of a record-set ledger holds several)."""
        return self.last - self.first + 1

    def part(self, first: int, last: int) -> Range:
        """Entries ``first..last`` of this range, with the slot cuts that still apply."""
        return Range(
            self.seq,
            self.ledger_id,
            first,
            last,
            self.record_sets,
            self.first_slot if first == self.first else 0,
            self.end_slot if last == self.last else None,
            self.schema,
            self.lake,
        )


@final
@attrs.frozen
class LogPlan:
    """The ranges to read, in log order, and the position after them (``count``: entries)."""

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
    max_entries: int | None = None,
) -> LogPlan:
    """The records from ``start`` (inclusive) up to ``end`` (exclusive; None: as far as is
    readable now), in at most ``max_entries`` entries (a budget counts whole entries: the
    planner does not know how many records an entry holds). ``ledgers`` are the log's listed
    ledgers in order; ``start`` must not be a sentinel other than EARLIEST (resolve LATEST
    first) and must already be at or after the truncation point."""
    ranges: list[Range] = []
    pos = start
    budget = max_entries
    if end is not None and end <= start:
        return LogPlan((), start)
    for ledger in ledgers:
        if ledger.seq < pos.ledger_seq:
            continue
        if end is not None and ledger.seq > end.ledger_seq:
            break
        here = ledger.seq == pos.ledger_seq
        first = pos.entry_id if here else 0
        first_slot = pos.slot if here else 0
        last = ledger.last
        end_slot: int | None = None
        limited = False
        if end is not None and ledger.seq == end.ledger_seq:
            # The end cuts this ledger: before entry end.entry_id, or inside it at its slot.
            end_last = end.entry_id if end.slot > 0 else end.entry_id - 1
            if end_last <= last:
                last = end_last
                end_slot = end.slot if end.slot > 0 else None
                limited = True
        if budget is not None and last - first + 1 > budget:
            last = first + budget - 1
            end_slot = None
            limited = True
        if first <= last:
            ranges.append(
                Range(
                    ledger.seq,
                    ledger.ledger_id,
                    first,
                    last,
                    ledger.record_sets,
                    first_slot,
                    end_slot if limited else None,
                    ledger.schema,
                    ledger.lake,
                )
            )
            if budget is not None:
                budget -= last - first + 1
            if limited and end_slot is not None:
                assert end is not None
                pos = end
            else:
                pos = LogPosition(ledger.seq, last + 1)
        elif not here:
            pos = LogPosition(ledger.seq, 0)
        if limited or not ledger.closed or budget == 0:
            break
    return LogPlan(tuple(ranges), pos)


def cut_at_records(
    plan: LogPlan, counts: Sequence[Sequence[int] | None], max_records: int
) -> LogPosition:
    """Where a plan holding at most ``max_records`` records ends (exclusive), with a slot when
    the limit falls inside an entry. ``counts[i]`` gives the records of each entry of
    ``plan.ranges[i]``, from its first entry on (None: one record per entry). A list shorter
    than its range, or fewer lists than ranges, means the count stopped there (the budget ran
    out, or a ledger was gone): the plan is cut at the first entry not counted."""
    budget = max_records
    for index, rng in enumerate(plan.ranges):
        if index >= len(counts):
            return LogPosition(rng.seq, rng.first, rng.first_slot)
        entry_counts = counts[index]
        if entry_counts is None:
            first = rng.first if rng.first_slot == 0 else rng.first + 1
            entries = rng.last - first + 1
            if entries >= budget:
                return LogPosition(rng.seq, first + budget)
            budget -= entries
            continue
        for offset, total in enumerate(entry_counts[: rng.count]):
            entry_id = rng.first + offset
            low = rng.first_slot if offset == 0 else 0
            high = total
            if entry_id == rng.last and rng.end_slot is not None:
                high = min(high, rng.end_slot)
            records = max(0, high - low)
            if records >= budget:
                slot = low + budget
                if slot >= total:
                    return LogPosition(rng.seq, entry_id + 1)
                return LogPosition(rng.seq, entry_id, slot)
            budget -= records
        if len(entry_counts) < rng.count:
            done = len(entry_counts)
            if done == 0:
                return LogPosition(rng.seq, rng.first, rng.first_slot)
            return LogPosition(rng.seq, rng.first + done)
    return plan.end


#: Bytes of data files (compressed, as the lake holds them) one Spark partition reads at most.
LAKE_SPLIT_BYTES: Final = 64 * 1024 * 1024


def pack(
    ranges: Sequence[Range],
    split_entries: int,
    split_record_sets: int | None = None,
    lake_split_bytes: int = LAKE_SPLIT_BYTES,
) -> list[tuple[Range, ...]]:
    """Ranges grouped into Spark partitions of at most ``split_entries`` entries of one record
    each, or ``split_record_sets`` entries of record-set ledgers (default: the same number),
    or a mix in proportion: big ranges are cut, small neighbours share a partition; log order
    is kept across partitions. Ranges of offloaded ledgers (read from the lake's files) have
    partitions of their own, of about ``lake_split_bytes`` of data files each (a ledger's
    files are not cut: its rows are read by row group)."""
    per_set = split_entries if split_record_sets is None else split_record_sets
    capacity = split_entries * per_set
    partitions: list[tuple[Range, ...]] = []
    current: list[Range] = []
    room = capacity
    lake_part: list[Range] = []
    lake_room = lake_split_bytes

    def flush_lake() -> None:
        nonlocal lake_part, lake_room
        if lake_part:
            partitions.append(tuple(lake_part))
        lake_part, lake_room = [], lake_split_bytes

    for rng in ranges:
        if rng.lake is not None:
            if current:
                partitions.append(tuple(current))
                current, room = [], capacity
            size = rng.lake.lake_bytes * rng.count // max(1, rng.lake.entries)
            if lake_part and size > lake_room:
                flush_lake()
            lake_part.append(rng)
            lake_room -= size
            continue
        flush_lake()
        cost = split_entries if rng.record_sets else per_set  # of one entry, in capacity units
        first = rng.first
        while first <= rng.last:
            take = min(room // cost, rng.last - first + 1)
            if take == 0:
                partitions.append(tuple(current))
                current = []
                room = capacity
                continue
            current.append(rng.part(first, first + take - 1))
            first += take
            room -= take * cost
            if room < min(split_entries, per_set):
                partitions.append(tuple(current))
                current = []
                room = capacity
    flush_lake()
    if current:
        partitions.append(tuple(current))
    return partitions
