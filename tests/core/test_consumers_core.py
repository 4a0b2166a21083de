"""The pure decisions of durable consumers (walkit._core.consumers): the node's format, commits
that only move forward, what consumers hold back from retention, lags, commit lags."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walkit._core.consumers import (
    BacklogQuota,
    ConsumerState,
    DeliveryCount,
    LedgerCounts,
    backlog,
    consumer_hold,
    lag,
    resume_after,
)
from walkit._core.log_metadata import LogLedger, LogMetadata
from walkit._core.log_position import LogPosition
from walkit._core.retention import LedgerStats, RetentionLimits, retention_point
from walkit.errors import InvalidArgumentError, InvalidMetadataError

P = LogPosition


def test_the_node_round_trips_and_is_versioned() -> None:
    state = ConsumerState("indexer", P(3, 17, 2), 1_700_000_000_000, 1_700_000_004_200)
    data = state.to_bytes()
    assert json.loads(data) == {
        "format": 1,
        "name": "indexer",
        "position": "3:17:2",
        "ctime_ms": 1_700_000_000_000,
        "mtime_ms": 1_700_000_004_200,
    }
    assert ConsumerState.from_bytes("indexer", data) == state
    assert ConsumerState.from_bytes("x", b'{"format": 1, "name": "x", "position": "earliest"}') == (
        ConsumerState("x")
    )


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]",
        b"\xff",
        b'{"format": 2, "name": "x", "position": "earliest"}',
        b'{"format": 1, "name": "y", "position": "earliest"}',
        b'{"format": 1, "name": "x"}',
        b'{"format": 1, "name": "x", "position": 7}',
        b'{"format": 1, "name": "x", "position": "latest"}',
        b'{"format": 1, "name": "x", "position": "1:2:3", "ctime_ms": -1}',
        b'{"format": 1, "name": "x", "position": "1:2:3", "mtime_ms": true}',
    ],
)
def test_malformed_nodes_are_refused(data: bytes) -> None:
    with pytest.raises(InvalidMetadataError):
        ConsumerState.from_bytes("x", data)


def test_a_newer_format_is_named() -> None:
    with pytest.raises(InvalidMetadataError, match="format 2; this walkit reads"):
        ConsumerState.from_bytes("x", b'{"format": 2, "name": "x", "position": "earliest"}')


def test_commits_only_move_forward() -> None:
    state = ConsumerState("c", P(2, 5, 1))
    assert state.committed(P(2, 5, 1), 10) is None
    assert state.committed(P(1, 9, 0), 10) is None
    moved = state.committed(P(2, 5, 2), 10)
    assert moved is not None and moved.position == P(2, 5, 2) and moved.mtime_ms == 10
    assert resume_after(P(2, 5, 1)) == P(2, 5, 2)
    for sentinel in (LogPosition.EARLIEST, LogPosition.LATEST):
        with pytest.raises(InvalidArgumentError):
            resume_after(sentinel)


def _stats() -> list[LedgerStats]:
    # Four closed ledgers of 10 entries, 20 records, 1000 bytes each, then an open one.
    closed = [LedgerStats(s, 100 + s, True, 20, 1000, 0, 10) for s in (1, 2, 3, 4)]
    return [*closed, LedgerStats(5, 105, False)]


def test_backlog_counts_closed_ledgers_and_its_own_pro_rata() -> None:
    stats = _stats()
    assert backlog(LogPosition.EARLIEST, stats) == (80, 4000)
    assert backlog(P(3, 0), stats) == (40, 2000)
    assert backlog(P(3, 5), stats) == (30, 1500)  # half of ledger 3 is left
    assert backlog(P(5, 0), stats) == (0, 0)  # the open ledger is not counted


def test_consumers_hold_retention_unless_over_the_quota() -> None:
    stats = _stats()
    consumers = [ConsumerState("fast", P(4, 2)), ConsumerState("slow", P(2, 1))]
    hold = consumer_hold(consumers, stats, BacklogQuota())
    assert hold.keep_from == 2 and hold.released == ()
    hold = consumer_hold(consumers, stats, BacklogQuota(records=50))
    assert hold.keep_from == 4
    assert hold.released == (("slow", 58, 2900),)
    assert consumer_hold(consumers, stats, BacklogQuota(size=100)).keep_from is None
    assert consumer_hold([], stats, BacklogQuota()).keep_from is None
    md = LogMetadata("log", next_seq=6, ledgers=tuple(LogLedger(s.seq, s.ledger_id) for s in stats))
    limits = RetentionLimits(records=0)
    assert retention_point(md, stats, limits, None) == P(5, 0)
    assert retention_point(md, stats, limits, None, keep_from=2) == P(2, 0)
    assert retention_point(md, stats, limits, None, keep_from=1) is None
    assert retention_point(md, stats, limits, None, keep_from=0) is None


def test_lag_is_exact_where_counted_and_estimated_beyond() -> None:
    ledgers = [
        LedgerCounts(1, 4, records=8, size=400),  # closed, with its totals
        LedgerCounts(2, 3, scanned_records=(1, 5, 2), scanned_sizes=(10, 50, 20)),  # open
    ]
    assert lag(LogPosition.EARLIEST, ledgers) == lag(P(1, 0), ledgers)
    whole = lag(P(1, 0), ledgers)
    assert (whole.entries, whole.records, whole.size, whole.exact) == (7, 16, 480, True)
    inside = lag(P(2, 1, 3), ledgers)
    assert (inside.entries, inside.records, inside.size, inside.exact) == (2, 4, 40, True)
    assert lag(P(3, 0), ledgers) == lag(P(2, 3), ledgers)
    assert lag(P(3, 0), ledgers).records == 0
    # A closed ledger read from entry 2 on (a consumer's own ledger), and one read only in part.
    partial = [
        LedgerCounts(1, 4, 8, 400, scan_from=2, scanned_records=(3, 1), scanned_sizes=(90, 40)),
        LedgerCounts(2, 10, scanned_records=(2, 2), scanned_sizes=(30, 30)),
    ]
    own = lag(P(1, 2, 1), partial)
    assert (own.records, own.size) == (2 + 1 + 20, 60 + 40 + 300)
    assert not own.exact
    assert lag(P(1, 2, 1), partial[:1]).exact


@given(st.lists(st.integers(1, 5), min_size=1, max_size=30), st.data())
def test_commit_lag_counts_what_was_handed_out_and_not_committed(
    sizes: list[int], data: st.DataObject
) -> None:
    positions = [P(1, e, s) for e, n in enumerate(sizes) for s in range(n)]
    count = DeliveryCount()
    handed = data.draw(st.integers(0, len(positions)))
    for pos in positions[:handed]:
        count.handed_out(pos.ledger_seq, pos.entry_id, pos.slot)
    committed = 0
    for _ in range(data.draw(st.integers(0, 4))):
        upto = data.draw(st.integers(0, len(positions) - 1))
        resume = positions[upto].next()
        count.commit(resume)
        committed = max(committed, min(upto + 1, handed))
        assert count.lag == handed - committed
