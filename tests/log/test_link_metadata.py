"""The pure decision of linking staged ledgers into a log (``LogMetadata.after_link``) and the
sink marks that make a streaming batch count once."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walkit import LogPosition
from walkit._core.log_metadata import LogLedger, LogMetadata, SinkMark
from walkit.errors import InvalidArgumentError, InvalidMetadataError

P = LogPosition.parse


def log_with(*ledgers: tuple[int, int], next_seq: int | None = None) -> LogMetadata:
    listed = tuple(LogLedger(seq, lid) for seq, lid in ledgers)
    return LogMetadata(
        name="events",
        next_seq=next_seq if next_seq is not None else (listed[-1].seq + 1 if listed else 1),
        ledgers=listed,
    )


def test_link_lists_the_ledgers_last_in_order_after_fencing_the_last_two() -> None:
    md = log_with((1, 10), (2, 20), (3, 30))
    link = md.after_link({20: 5, 30: 7}, [101, 100, 102])
    assert link.linked == (LogLedger(4, 101), LogLedger(5, 100), LogLedger(6, 102))
    assert link.metadata.ledgers == (*md.ledgers, *link.linked)
    assert link.metadata.next_seq == 7
    assert link.dropped == ()
    assert not link.replayed and not link.done_before
    # The next takeover recovers the last two linked ledgers and writes after them.
    takeover = link.metadata.after_takeover({100: 3, 102: 0}, 200)
    assert takeover.ledger == LogLedger(7, 200)
    assert takeover.dropped == ()


def test_link_needs_the_last_two_ledgers_recovered() -> None:
    md = log_with((1, 10), (2, 20))
    with pytest.raises(InvalidArgumentError, match="ledger 10 was not recovered"):
        md.after_link({20: 3}, [100])
    # An empty log has nothing to fence.
    empty = log_with()
    assert empty.after_link({}, [100]).linked == (LogLedger(1, 100),)


def test_recovered_empty_ledgers_leave_the_list() -> None:
    md = log_with((1, 10), (2, 20))  # 20: a writer that took over and wrote nothing
    link = md.after_link({10: 4, 20: -1}, [100])
    assert link.dropped == (LogLedger(2, 20),)
    assert link.metadata.ledgers == (LogLedger(1, 10), LogLedger(3, 100))


def test_a_link_that_got_through_before_changes_nothing() -> None:
    md = log_with((1, 10)).after_link({10: 0}, [100, 101], SinkMark("q", 3)).metadata
    again = md.after_link({}, [100, 101], SinkMark("q", 3))
    assert again.done_before
    assert again.metadata == md
    assert again.linked == (LogLedger(2, 100), LogLedger(3, 101))


def test_sink_marks_make_a_replayed_batch_a_no_op() -> None:
    md = log_with((1, 10))
    first = md.after_link({10: 0}, [100], SinkMark("q1", 0)).metadata
    assert first.sink_batch("q1") == 0
    assert first.sink_batch("q2") is None
    replay = first.after_link({}, [200], SinkMark("q1", 0))
    assert replay.replayed and replay.linked == () and replay.metadata == first
    older = first.after_link({}, [200], SinkMark("q1", 0))
    assert older.replayed
    # Another query has its own mark; the next batch of q1 links.
    other = first.after_link({10: 0, 100: 0}, [300], SinkMark("q2", 0)).metadata
    nxt = other.after_link({100: 0, 300: 0}, [400], SinkMark("q1", 1))
    assert not nxt.replayed
    assert nxt.metadata.sinks == (SinkMark("q1", 1), SinkMark("q2", 0))


def test_an_empty_batch_moves_only_the_mark_and_fences_nothing() -> None:
    md = log_with((1, 10), (2, 20))
    link = md.after_link({}, [], SinkMark("q", 5))
    assert link.metadata.ledgers == md.ledgers
    assert link.metadata.sink_batch("q") == 5
    assert md.after_link({}, []).metadata == md


def test_link_refuses_bad_requests() -> None:
    md = log_with((1, 10))
    with pytest.raises(InvalidArgumentError, match="repeated"):
        md.after_link({10: 0}, [100, 100])
    with pytest.raises(InvalidArgumentError, match="belong to the log already"):
        md.after_link({10: 0}, [100, 10])
    with pytest.raises(InvalidArgumentError, match="batch ids are >= 0"):
        md.after_link({10: 0}, [100], SinkMark("q", -1))


def test_sink_marks_round_trip_and_are_validated() -> None:
    md = log_with((1, 10)).after_link({10: 0}, [], SinkMark("b", 2)).metadata
    md = md.after_link({10: 0}, [], SinkMark("a", 7)).metadata
    raw = md.to_bytes()
    assert json.loads(raw)["sinks"] == {"a": 7, "b": 2}
    assert LogMetadata.from_bytes("events", raw) == md
    # A log without sinks serializes as before (no key).
    assert "sinks" not in json.loads(log_with((1, 10)).to_bytes())
    doc = json.loads(raw)
    for bad in ({"a": -1}, {"a": "x"}, ["a"], {"": 1}):
        doc["sinks"] = bad
        with pytest.raises(InvalidMetadataError):
            LogMetadata.from_bytes("events", json.dumps(doc).encode())
    with pytest.raises(InvalidMetadataError, match="out of order"):
        LogMetadata(name="x", sinks=(SinkMark("b", 1), SinkMark("a", 1)))


@given(
    existing=st.integers(min_value=0, max_value=4),
    staged=st.lists(st.integers(min_value=1, max_value=3), min_size=0, max_size=5),
    empty_last=st.booleans(),
)
def test_linked_records_read_in_link_order_after_the_existing_ones(
    existing: int, staged: list[int], empty_last: bool
) -> None:
    """Model the records of every ledger and check that reading the linked log in seq order
    gives the old records, then each staged ledger's, in the order given."""
    ledgers = tuple((i + 1, 10 + i) for i in range(existing))
    md = log_with(*ledgers)
    content = {10 + i: [f"old{i}.{e}" for e in range(2)] for i in range(existing)}
    if empty_last and existing:
        content[10 + existing - 1] = []
    ids = [100 + n for n in range(len(staged))]
    for n, count in enumerate(staged):
        content[100 + n] = [f"new{n}.{e}" for e in range(count)]
    recovered = {lg.ledger_id: len(content[lg.ledger_id]) - 1 for lg in md.to_recover()}
    link = md.after_link(recovered, ids)
    read = [rec for lg in link.metadata.ledgers for rec in content[lg.ledger_id]]
    expected = [rec for lid in sorted(content) for rec in content[lid]]
    assert read == expected
    seqs = [lg.seq for lg in link.metadata.ledgers]
    assert seqs == sorted(set(seqs))
    if ids:
        assert link.metadata.last == LogLedger(link.metadata.next_seq - 1, ids[-1])


def test_what_a_link_must_fence_first() -> None:
    md = log_with((1, 10), (2, 20), (3, 30))
    assert md.to_recover_for_link([100]) == (LogLedger(2, 20), LogLedger(3, 30))
    assert md.to_recover_for_link([]) == ()
    assert md.to_recover_for_link([20, 30]) == ()  # linked before
    marked = md.after_link({20: 1, 30: 1}, [], SinkMark("q", 4)).metadata
    assert marked.to_recover_for_link([100], SinkMark("q", 4)) == ()  # a replay
    assert marked.to_recover_for_link([100], SinkMark("q", 5)) == md.to_recover()
