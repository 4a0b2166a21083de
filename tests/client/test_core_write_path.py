"""The writer's pure state machine: write sets (the protocol document's table), ordered acks, LAC, failures."""

from __future__ import annotations

import random
from typing import Any

import pytest

from walkit._core.add_tracker import AddTracker, EnsembleChangeMode
from walkit._core.ensemble_change import decide_close, new_fragment
from walkit._core.ledger_metadata import LedgerMetadata, LedgerState
from walkit._core.types import BookieId
from walkit.errors import (
    InvalidArgumentError,
    LedgerInRecoveryError,
    WriterFencedError,
)

B1, B2, B3, B4, B5 = (BookieId("10.0.0.1", 3181 + i) for i in range(5))

# BookKeeper's protocol document, "Write Quorums": E=4, Qw=3, Qa=2 with ensemble B1..B4.
SEED_000_TABLE = {
    0: (B1, B2, B3),
    1: (B2, B3, B4),
    2: (B3, B4, B1),
    3: (B4, B1, B2),
    4: (B1, B2, B3),
    5: (B2, B3, B4),
}


def test_seed_000_write_quorum_table() -> None:
    ensemble = (B1, B2, B3, B4)
    tracker = AddTracker(4, 3, 2)
    for entry_id, expected in SEED_000_TABLE.items():
        pa = tracker.add(10)
        assert pa.entry_id == entry_id
        assert tuple(ensemble[s] for s in tracker.targets(pa)) == expected


def test_only_one_write_set_without_striping() -> None:
    tracker = AddTracker(3, 3, 2)
    assert {frozenset(tracker.add(1).write_set) for _ in range(9)} == {frozenset({0, 1, 2})}


def test_ack_needs_ack_quorum_of_the_write_set() -> None:
    tracker = AddTracker(4, 3, 2)
    pa = tracker.add(5)  # write set slots 0, 1, 2
    assert not tracker.on_ack(0, 3)  # slot 3 is not in the write set: ignored
    assert not tracker.on_ack(0, 0)
    assert not tracker.on_ack(0, 0)  # a repeated ack does not count twice
    assert tracker.last_add_confirmed == -1
    assert tracker.on_ack(0, 2)
    assert tracker.last_add_confirmed == 0
    assert tracker.pending_count == 0
    assert pa.count == 2


def test_later_entry_waits_for_lower_ones() -> None:
    tracker = AddTracker(4, 3, 2)
    for _ in range(3):
        tracker.add(1)
    # Entry 2's quorum answers first: nothing is acknowledged yet.
    assert not tracker.on_ack(2, 2)
    assert not tracker.on_ack(2, 3)
    assert tracker.last_add_confirmed == -1
    # Entry 1 next: still waiting for entry 0.
    assert not tracker.on_ack(1, 1)
    assert not tracker.on_ack(1, 2)
    assert tracker.last_add_confirmed == -1
    # Entry 0 gets its quorum: 0, 1 and 2 are acknowledged together, in order.
    assert not tracker.on_ack(0, 0)
    assert tracker.on_ack(0, 1)
    assert tracker.last_add_confirmed == 2
    assert tracker.pending_count == 0


def test_each_entry_carries_the_lac_known_when_sent() -> None:
    tracker = AddTracker(3, 2, 2)
    e0 = tracker.add(1)
    e1 = tracker.add(1)
    assert (e0.lac, e1.lac) == (-1, -1)
    tracker.on_ack(0, 0)
    tracker.on_ack(0, 1)
    e2 = tracker.add(1)
    assert e2.lac == 0
    tracker.on_ack(1, 1)
    tracker.on_ack(1, 2)
    e3 = tracker.add(1)
    assert e3.lac == 1


def test_length_accumulates() -> None:
    tracker = AddTracker(3, 2, 2)
    assert [tracker.add(n).length for n in (3, 4, 5)] == [3, 7, 12]
    assert tracker.length == 12
    tracker.on_ack(1, 1)
    tracker.on_ack(1, 2)
    assert tracker.acked_length == 0
    tracker.on_ack(0, 0)
    tracker.on_ack(0, 1)
    assert (tracker.last_add_confirmed, tracker.acked_length) == (1, 7)


def test_lac_progression_is_monotonic_and_gapless_under_random_ack_order() -> None:
    rng = random.Random(1234)
    for _ in range(50):
        e, qw, qa = rng.choice([(3, 2, 2), (4, 3, 2), (5, 3, 2), (3, 3, 1), (1, 1, 1)])
        tracker = AddTracker(e, qw, qa)
        n = 40
        acks: list[tuple[int, int]] = []
        for _ in range(n):
            pa = tracker.add(1)
            acks.extend((pa.entry_id, s) for s in pa.write_set)
        rng.shuffle(acks)
        lacs = [-1]
        acked_count: dict[int, int] = {}
        for entry_id, slot in acks:
            acked_count[entry_id] = acked_count.get(entry_id, 0) + 1
            moved = tracker.on_ack(entry_id, slot)
            lac = tracker.last_add_confirmed
            assert moved == (lac != lacs[-1])
            assert lac >= lacs[-1]
            # Everything up to the LAC has its ack quorum; the next entry does not.
            assert all(acked_count.get(i, 0) >= qa for i in range(lac + 1))
            assert acked_count.get(lac + 1, 0) < qa or lac + 1 >= n
            lacs.append(lac)
        assert tracker.last_add_confirmed == n - 1


def test_bad_quorums_refused() -> None:
    with pytest.raises(InvalidArgumentError):
        AddTracker(2, 3, 2)
    with pytest.raises(InvalidArgumentError):
        AddTracker(3, 2, 3)
    with pytest.raises(InvalidArgumentError):
        EnsembleChangeMode.parse("sometimes")


# --- failures and ensemble changes --------------------------------------------------------


def test_immediate_mode_changes_at_first_failure() -> None:
    tracker = AddTracker(3, 2, 2)
    for _ in range(4):
        tracker.add(1)
    # Entry 0 (slots 0, 1) fully acked; entry 1 (slots 1, 2): slot 1 acked then slot 2 fails.
    tracker.on_ack(0, 0)
    tracker.on_ack(0, 1)
    tracker.on_ack(1, 1)
    assert tracker.on_bookie_failure(2)
    first, slots = tracker.start_ensemble_change()
    assert (first, slots) == (1, frozenset({2}))
    # Nothing is sent to a slot being replaced, and its late acks do not count.
    e4 = tracker.add(1)  # write set (1, 2)
    assert tracker.targets(e4) == (1,)
    assert not tracker.on_ack(2, 2)
    resend = tracker.finish_ensemble_change()
    # Every pending entry whose write set holds slot 2 goes to the new bookie there.
    assert [(pa.entry_id, targets) for pa, targets in resend] == [(1, (2,)), (2, (2,)), (4, (2,))]
    assert tracker.blocked_slots == frozenset()
    assert tracker.on_ack(1, 2)
    assert tracker.last_add_confirmed == 1


def test_acks_from_replaced_slot_are_discounted() -> None:
    # E=3 Qw=2 Qa=2: entry 1 got acks from slots 1 and 2 but entry 0 is not yet acknowledged.
    tracker = AddTracker(3, 2, 2)
    tracker.add(1)
    tracker.add(1)
    tracker.on_ack(1, 1)
    tracker.on_ack(1, 2)
    # Slot 2 fails (say, on entry 2). Entry 1 will be in the new fragment, where another bookie
    # takes slot 2: its ack no longer counts.
    tracker.add(1)
    assert tracker.on_bookie_failure(2)
    first, _ = tracker.start_ensemble_change()
    assert first == 0
    tracker.on_ack(0, 0)
    assert tracker.on_ack(0, 1)
    assert tracker.last_add_confirmed == 0  # entry 1 now lacks its second ack
    resend = tracker.finish_ensemble_change()
    assert [pa.entry_id for pa, _ in resend] == [1, 2]
    assert tracker.on_ack(1, 2)
    assert tracker.last_add_confirmed == 1


def test_second_failure_during_a_change_waits_for_it() -> None:
    tracker = AddTracker(4, 3, 2)
    tracker.add(1)
    assert tracker.on_bookie_failure(0)
    tracker.start_ensemble_change()
    assert not tracker.on_bookie_failure(1)  # a change is running
    assert tracker.changing_slots == frozenset({0})
    tracker.finish_ensemble_change()
    assert tracker.needs_change()
    _, slots = tracker.start_ensemble_change()
    assert slots == frozenset({1})


def test_delayed_mode_waits_until_ack_quorum_is_lost() -> None:
    tracker = AddTracker(3, 3, 2, mode=EnsembleChangeMode.WHEN_ACK_QUORUM_LOST)
    pa = tracker.add(1)
    assert not tracker.on_bookie_failure(0)  # two of three still reach Qa=2
    assert tracker.targets(pa) == (1, 2)
    tracker.on_ack(0, 1)
    assert tracker.on_ack(0, 2)
    assert tracker.on_bookie_failure(1)  # now only one slot of three is left
    first, slots = tracker.start_ensemble_change()
    assert (first, slots) == (1, frozenset({0, 1}))


def test_fail_all_drops_pending() -> None:
    tracker = AddTracker(3, 2, 2)
    for _ in range(3):
        tracker.add(1)
    tracker.on_ack(0, 0)
    tracker.on_ack(0, 1)
    dropped = tracker.fail_all()
    assert [pa.entry_id for pa in dropped] == [1, 2]
    assert tracker.last_add_confirmed == 0
    assert not tracker.on_ack(1, 1)


# --- metadata decisions -------------------------------------------------------------------


def _md(**kw: object) -> LedgerMetadata:
    base: dict[str, Any] = dict(
        ledger_id=7, ensemble_size=3, write_quorum=2, ack_quorum=2, fragments=((0, (B1, B2, B3)),)
    )
    base.update(kw)
    return LedgerMetadata(**base)


def test_new_fragment_replaces_slot_from_first_unacked_entry() -> None:
    md = _md()
    updated = new_fragment(md, (B1, B2, B3), 12, {0: B4})
    assert updated.ensembles == {
        0: [B1, B2, B3],
        12: [B4, B2, B3],
    }  # the protocol document's example


def test_new_fragment_refused_once_ledger_is_not_ours() -> None:
    with pytest.raises(WriterFencedError):
        new_fragment(_md(state=LedgerState.IN_RECOVERY), (B1, B2, B3), 5, {0: B4})
    with pytest.raises(WriterFencedError):
        new_fragment(_md(state=LedgerState.CLOSED), (B1, B2, B3), 5, {0: B4})
    with pytest.raises(WriterFencedError):
        new_fragment(
            _md(fragments=((0, (B1, B2, B3)), (3, (B5, B2, B3)))), (B1, B2, B3), 5, {0: B4}
        )
    with pytest.raises(InvalidArgumentError):
        new_fragment(_md(), (B1, B2, B3), 5, {0: B2})


def test_close_decisions_follow_seed_000() -> None:
    assert decide_close(_md(), 9, 90).write == _md().closed(9, 90)
    assert decide_close(_md(state=LedgerState.CLOSED, last_entry_id=9), 9, 90).done
    err = decide_close(_md(state=LedgerState.CLOSED, last_entry_id=10), 9, 90).error
    assert isinstance(err, WriterFencedError)
    err = decide_close(_md(state=LedgerState.IN_RECOVERY), 9, 90).error
    assert isinstance(err, LedgerInRecoveryError)
