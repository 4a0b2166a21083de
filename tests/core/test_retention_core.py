"""The pure decisions of retention, orphans, stalled ledgers and a writer's old-ledger close."""

from __future__ import annotations

import random

import pytest

from walkit._core.log_metadata import LogLedger, LogMetadata, SnapshotRecord
from walkit._core.log_position import LogPosition
from walkit._core.log_tail import CloseOutcome, TailAction, check_tail, close_outcome
from walkit._core.retention import (
    LedgerStats,
    RetentionLimits,
    is_orphan,
    ledger_records,
    retention_point,
)
from walkit.errors import InvalidArgumentError


def _log(n: int, snapshot_at: LogPosition | None = None, truncated: int = 0) -> LogMetadata:
    ledgers = tuple(LogLedger(seq, 100 + seq) for seq in range(1 + truncated, n + 1))
    snaps: tuple[SnapshotRecord, ...] = ()
    if snapshot_at is not None:
        snaps = (SnapshotRecord(position=snapshot_at, ledger_id=999, size=1, crc32c=0),)
    trunc = (
        LogPosition.EARLIEST
        if truncated == 0
        else LogPosition(ledger_seq=truncated + 1, entry_id=0)
    )
    return LogMetadata(name="t", next_seq=n + 1, ledgers=ledgers, snapshots=snaps, truncated=trunc)


def _stats(
    md: LogMetadata, records: int = 10, size: int = 100, open_last: bool = True
) -> list[LedgerStats]:
    out = []
    for i, lg in enumerate(md.ledgers):
        last = i == len(md.ledgers) - 1
        closed = not (last and open_last)
        out.append(
            LedgerStats(
                lg.seq,
                lg.ledger_id,
                closed=closed,
                records=records if closed else 0,
                size=size if closed else 0,
                ctime_ms=1000 * lg.seq,
            )
        )
    return out


def test_ledger_records_prefers_the_tag() -> None:
    assert ledger_records(9, {}) == 10
    assert ledger_records(-1, {}) == 0
    assert ledger_records(9, {"walkit.records": b"123"}) == 123
    assert ledger_records(9, {"walkit.records": b"junk"}) == 10
    assert ledger_records(9, {"walkit.records": b"-4"}) == 10


def test_no_limits_no_truncation() -> None:
    md = _log(5)
    assert retention_point(md, _stats(md), RetentionLimits(), 10**9) is None


def test_records_limit_keeps_at_least_that_many() -> None:
    md = _log(5)  # ledgers 1..4 closed with 10 records each, 5 open
    stats = _stats(md)
    # Keep >= 15: ledgers 3 and 4 hold 20, so 1 and 2 go.
    assert retention_point(md, stats, RetentionLimits(records=15), None) == LogPosition(
        ledger_seq=3, entry_id=0
    )
    assert retention_point(md, stats, RetentionLimits(records=20), None) == LogPosition(
        ledger_seq=3, entry_id=0
    )
    assert retention_point(md, stats, RetentionLimits(records=21), None) == LogPosition(
        ledger_seq=2, entry_id=0
    )
    assert retention_point(md, stats, RetentionLimits(records=1000), None) is None
    # Zero: every closed ledger but the last listed goes.
    assert retention_point(md, stats, RetentionLimits(records=0), None) == LogPosition(
        ledger_seq=5, entry_id=0
    )


def test_bytes_and_records_any_limit_drops() -> None:
    md = _log(5)
    stats = _stats(md)
    both = RetentionLimits(records=1000, size=150)
    assert retention_point(md, stats, both, None) == LogPosition(ledger_seq=3, entry_id=0)


def test_the_last_ledger_and_open_ones_stay() -> None:
    md = _log(3)
    stats = _stats(md, open_last=False)  # even closed, the last listed one stays
    assert retention_point(md, stats, RetentionLimits(records=0), None) == LogPosition(
        ledger_seq=3, entry_id=0
    )
    # An open ledger in the middle (a writer died mid-roll): it and what follows stay.
    md = _log(4)
    stats = _stats(md)
    stats[1] = LedgerStats(2, 102, closed=False, ctime_ms=2000)
    assert retention_point(md, stats, RetentionLimits(records=0), None) == LogPosition(
        ledger_seq=2, entry_id=0
    )
    # Stats stopping early: only what they cover can go.
    assert retention_point(md, stats[:1], RetentionLimits(records=5), None) is None


def test_the_latest_snapshot_stays_readable() -> None:
    md = _log(6, snapshot_at=LogPosition(ledger_seq=3, entry_id=4))
    point = retention_point(md, _stats(md), RetentionLimits(records=0), None)
    assert point == LogPosition(ledger_seq=3, entry_id=0)


def test_age_uses_the_next_ledgers_creation_time() -> None:
    md = _log(5)  # ledger seq s created at 1000*s ms
    stats = _stats(md)
    # Ledger 1's newest record is older than 2000 ms (ledger 2's creation).
    limits = RetentionLimits(age=1.0)
    assert retention_point(md, stats, limits, now_ms=2999) is None
    assert retention_point(md, stats, limits, now_ms=3000) == LogPosition(ledger_seq=2, entry_id=0)
    assert retention_point(md, stats, limits, now_ms=10**9) == LogPosition(ledger_seq=5, entry_id=0)
    assert retention_point(md, stats, limits, now_ms=None) is None
    # Unknown creation times never count as old.
    unknown = [LedgerStats(s.seq, s.ledger_id, s.closed, s.records, s.size, 0) for s in stats]
    assert retention_point(md, unknown, limits, now_ms=10**9) is None


def test_never_behind_the_truncation_point() -> None:
    md = _log(5, truncated=2)  # ledgers 3..5 listed, truncated at 3:0
    stats = _stats(md)
    assert retention_point(md, stats, RetentionLimits(records=0), None) == LogPosition(
        ledger_seq=5, entry_id=0
    )
    assert retention_point(md, stats, RetentionLimits(records=10), None) == LogPosition(
        ledger_seq=4, entry_id=0
    )


def test_stats_must_follow_the_list() -> None:
    md = _log(3)
    with pytest.raises(InvalidArgumentError):
        retention_point(md, list(reversed(_stats(md))), RetentionLimits(records=0), None)


@pytest.mark.parametrize("bad", [-1, True, "3", float("inf"), float("nan")])
def test_bad_limits(bad: object) -> None:
    with pytest.raises(InvalidArgumentError):
        RetentionLimits(records=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        RetentionLimits(age=bad)  # type: ignore[arg-type]


def test_retention_property_random() -> None:
    """Whatever the limits: only a prefix of closed ledgers goes, never the last listed one nor
    the snapshot's, and what stays satisfies every limit that is set."""
    rng = random.Random(7)
    for _ in range(2000):
        n = rng.randint(1, 8)
        snap = None
        if rng.random() < 0.3:
            snap = LogPosition(ledger_seq=rng.randint(1, n), entry_id=rng.randint(0, 5))
        md = _log(n, snapshot_at=snap)
        stats = [
            LedgerStats(
                lg.seq,
                lg.ledger_id,
                closed=rng.random() < 0.9 or lg.seq < n - 1,
                records=rng.randint(0, 20),
                size=rng.randint(0, 200),
                ctime_ms=1000 * lg.seq,
            )
            for lg in md.ledgers
        ]
        limits = RetentionLimits(
            records=rng.choice([None, rng.randint(0, 60)]),
            size=rng.choice([None, rng.randint(0, 600)]),
            age=rng.choice([None, rng.uniform(0, 8)]),
        )
        now = 1000 * (n + 2)
        point = retention_point(md, stats, limits, now)
        if point is None:
            continue
        dropped = [s for s in stats if s.seq < point.ledger_seq]
        kept = [s for s in stats if s.seq >= point.ledger_seq]
        assert dropped and kept
        assert all(s.closed for s in dropped)
        assert point.ledger_seq <= md.ledgers[-1].seq
        if snap is not None:
            assert point.ledger_seq <= snap.ledger_seq
        # The newest dropped ledger was dropped for a reason.
        newest = dropped[-1]
        after = [s for s in kept if s.closed]
        nxt = kept[0]
        reasons = [
            limits.records is not None and sum(s.records for s in after) >= limits.records,
            limits.size is not None and sum(s.size for s in after) >= limits.size,
            limits.age is not None and 0 < nxt.ctime_ms <= now - int(limits.age * 1000),
        ]
        assert any(reasons), (limits, stats, point, newest)


def test_orphans() -> None:
    md = _log(2, snapshot_at=LogPosition(ledger_seq=1, entry_id=0))
    assert not is_orphan(101, 1, md, now_ms=10**9, grace_ms=0)  # listed
    assert not is_orphan(999, 1, md, now_ms=10**9, grace_ms=0)  # a snapshot
    assert is_orphan(500, 1000, md, now_ms=2000, grace_ms=1000)
    assert not is_orphan(500, 1001, md, now_ms=2000, grace_ms=1000)  # too young
    assert not is_orphan(500, 0, md, now_ms=10**9, grace_ms=0)  # age unknown
    assert is_orphan(101, 1000, None, now_ms=2000, grace_ms=0)  # the log is gone


def test_check_tail() -> None:
    wait = check_tail(
        now=10.0, still_listed=True, later_listed=False, later_seen_at=None, stalled_timeout=3.0
    )
    assert wait.action is TailAction.WAIT and wait.later_seen_at is None
    gone = check_tail(
        now=10.0, still_listed=False, later_listed=True, later_seen_at=5.0, stalled_timeout=3.0
    )
    assert gone.action is TailAction.RELOCATE
    first = check_tail(
        now=10.0, still_listed=True, later_listed=True, later_seen_at=None, stalled_timeout=3.0
    )
    assert first == check_tail(
        now=10.0, still_listed=True, later_listed=True, later_seen_at=10.0, stalled_timeout=3.0
    )
    assert first.action is TailAction.WAIT and first.later_seen_at == 10.0
    soon = check_tail(
        now=12.9, still_listed=True, later_listed=True, later_seen_at=10.0, stalled_timeout=3.0
    )
    assert soon.action is TailAction.WAIT and soon.later_seen_at == 10.0
    due = check_tail(
        now=13.0, still_listed=True, later_listed=True, later_seen_at=10.0, stalled_timeout=3.0
    )
    assert due.action is TailAction.RECOVER
    never = check_tail(
        now=1e9, still_listed=True, later_listed=True, later_seen_at=0.0, stalled_timeout=None
    )
    assert never.action is TailAction.WAIT


def test_close_outcome() -> None:
    assert close_outcome(acknowledged=9, closed_at=9, still_owner=True) is CloseOutcome.CLOSED
    assert close_outcome(acknowledged=9, closed_at=12, still_owner=True) is CloseOutcome.CLOSED
    assert close_outcome(acknowledged=-1, closed_at=-1, still_owner=True) is CloseOutcome.CLOSED
    assert close_outcome(acknowledged=9, closed_at=8, still_owner=True) is CloseOutcome.SHORT
    assert close_outcome(acknowledged=9, closed_at=9, still_owner=False) is CloseOutcome.FENCED
    assert close_outcome(acknowledged=9, closed_at=None, still_owner=True) is CloseOutcome.FENCED
