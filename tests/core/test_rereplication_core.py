"""The pure rereplication decisions: gaps, entries to copy, replacements, the metadata swap."""

from __future__ import annotations

import pytest

from tests.placement._placement_util import cluster
from walkit import BookieId
from walkit._core.ledger_metadata import LedgerMetadata, LedgerState
from walkit._core.rate_limit import TokenBucket, check_rate
from walkit._core.rereplication import (
    MAX_COPY_SPAN,
    Action,
    FragmentGap,
    LostBookies,
    NoReplacement,
    batch_entries,
    choose_replacements,
    copied_by_replacement,
    copy_request_gap,
    fragment_ranges,
    gaps_for,
    missing_bookies,
    next_action,
    plan_batch_answer,
    prefer_local,
    with_replacements,
)
from walkit.errors import InvalidArgumentError, InvalidMetadataError
from walkit.placement import (
    DefaultEnsemblePlacementPolicy,
    RackawareEnsemblePlacementPolicy,
)


def b(n: int) -> BookieId:
    return BookieId(f"bk{n}", 3181)


def closed(
    fragments: list[tuple[int, list[int]]], last: int, e: int = 3, qw: int = 3, qa: int = 2
) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=1,
        ensemble_size=e,
        write_quorum=qw,
        ack_quorum=qa,
        fragments=tuple((first, tuple(b(n) for n in ens)) for first, ens in fragments),
        state=LedgerState.CLOSED,
        last_entry_id=last,
        length=0,
    )


def test_fragment_ranges_and_gaps() -> None:
    md = closed([(0, [1, 2, 3]), (10, [1, 4, 3])], last=14)
    assert fragment_ranges(md) == [(0, 9, (b(1), b(2), b(3))), (10, 14, (b(1), b(4), b(3)))]
    gaps = gaps_for(md, {b(3)})
    assert [(g.first_entry, g.last_entry, g.index) for g in gaps] == [(0, 9, 2), (10, 14, 2)]
    assert gaps_for(md, {b(2)}) == [FragmentGap(0, 9, 1, b(2), (b(1), b(2), b(3)))]
    assert missing_bookies(md, {b(1), b(3), b(4)}) == {b(2)}
    with pytest.raises(InvalidMetadataError):
        fragment_ranges(md.with_state(LedgerState.OPEN))


def test_entries_follow_the_write_sets() -> None:
    # the protocol document's table, E=4 Qw=3: bookie index 0 stores entries 0, 2, 3, 4, 6, 7, ...
    gap = FragmentGap(0, 7, 0, b(1), (b(1), b(2), b(3), b(4)))
    assert list(gap.entries(4, 3)) == [0, 2, 3, 4, 6, 7]
    assert gap.entry_count(4, 3) == 6
    # E == Qw: every bookie stores every entry.
    assert list(FragmentGap(5, 8, 2, b(1), ()).entries(3, 3)) == [5, 6, 7, 8]
    # An empty fragment (or an empty ledger) holds nothing.
    assert list(FragmentGap(0, -1, 0, b(1), ()).entries(3, 3)) == []


def test_copy_request_gap_is_a_part_of_a_fragment_this_bookie_may_take() -> None:
    md = closed([(0, [1, 2, 3, 4]), (10, [1, 5, 3, 4])], last=30, e=4, qw=3)
    gap = copy_request_gap(md, 0, 0, 2, 7, b(6))
    assert gap == FragmentGap(2, 7, 0, b(1), (b(1), b(2), b(3), b(4)))
    assert isinstance(gap, FragmentGap) and list(gap.entries(4, 3)) == [2, 3, 4, 6, 7]
    assert copy_request_gap(md, 10, 1, 10, 30, b(2)) == FragmentGap(
        10, 30, 1, b(5), (b(1), b(5), b(3), b(4))
    )
    refusals = {
        "not closed": copy_request_gap(md.with_state(LedgerState.OPEN), 0, 0, 0, 1, b(6)),
        "no fragment starting at entry 5": copy_request_gap(md, 5, 0, 5, 6, b(6)),
        "position 4": copy_request_gap(md, 0, 4, 0, 1, b(6)),
        "position -1": copy_request_gap(md, 0, -1, 0, 1, b(6)),
        "in the fragment's ensemble": copy_request_gap(md, 0, 0, 0, 1, b(2)),
        "not within the fragment's 0..9": copy_request_gap(md, 0, 0, 5, 10, b(6)),
        "entries 6..5": copy_request_gap(md, 0, 0, 6, 5, b(6)),
        "entries -1..3": copy_request_gap(md, 0, 0, -1, 3, b(6)),
    }
    for why, answer in refusals.items():
        assert isinstance(answer, str) and why in answer, (why, answer)
    # A fragment's run is bounded, however long the fragment.
    long = closed([(0, [1, 2, 3])], last=10 * MAX_COPY_SPAN)
    assert isinstance(copy_request_gap(long, 0, 0, 0, MAX_COPY_SPAN - 1, b(6)), FragmentGap)
    assert "span more than" in str(copy_request_gap(long, 0, 0, 0, MAX_COPY_SPAN, b(6)))


def test_a_replacement_copies_unthrottled_fragments_of_other_bookies() -> None:
    assert copied_by_replacement(True, False, b(1), None)
    assert copied_by_replacement(True, False, b(1), b(2))
    assert not copied_by_replacement(False, False, b(1), None)  # the option off
    assert not copied_by_replacement(True, True, b(1), None)  # paced by the rereplicator
    assert not copied_by_replacement(True, False, b(1), b(1))  # its own bookie: local copies


def test_next_action() -> None:
    md = closed([(0, [1, 2, 3])], last=5)
    assert next_action(md, {b(2)}, open_since=None, now=0, grace=10) is Action.REREPLICATE
    assert next_action(md, {b(9)}, open_since=None, now=0, grace=10) is Action.DONE
    open_md = md.with_state(LedgerState.OPEN)
    assert next_action(open_md, {b(2)}, open_since=None, now=0, grace=10) is Action.WAIT
    assert next_action(open_md, {b(2)}, open_since=0, now=9.9, grace=10) is Action.WAIT
    assert next_action(open_md, {b(2)}, open_since=0, now=10, grace=10) is Action.RECOVER


def test_choose_and_swap_default_policy() -> None:
    policy = DefaultEnsemblePlacementPolicy()
    ids = cluster(policy, {"/default-region/default-rack": ["bk1", "bk3", "bk4", "bk5"]})
    md = closed([(0, [1, 2, 3]), (10, [2, 4, 3])], last=14)
    gaps = gaps_for(md, {b(2)})
    chosen = choose_replacements(policy, md, gaps)
    assert not isinstance(chosen, NoReplacement)
    assert set(chosen) == {(0, 1), (10, 0)}
    assert chosen[(0, 1)] in {ids["bk4"], ids["bk5"]}
    assert chosen[(10, 0)] in {ids["bk1"], ids["bk5"]}
    new = with_replacements(md, chosen, {(g.first_entry, g.index): g.bookie for g in gaps})
    assert b(2) not in new.all_bookies()
    assert new.state is LedgerState.CLOSED and new.last_entry_id == 14
    assert [first for first, _ in new.fragments] == [0, 10]
    # Planned against an older version: the swap is refused, not applied blindly.
    with pytest.raises(InvalidMetadataError):
        with_replacements(new, chosen, {(g.first_entry, g.index): g.bookie for g in gaps})


def test_two_lost_bookies_in_one_fragment() -> None:
    policy = DefaultEnsemblePlacementPolicy()
    cluster(policy, {"/default-region/default-rack": ["bk1", "bk4", "bk5"]})
    md = closed([(0, [1, 2, 3])], last=3)
    gaps = gaps_for(md, {b(2), b(3)})
    chosen = choose_replacements(policy, md, gaps)
    assert not isinstance(chosen, NoReplacement)
    assert {chosen[(0, 1)], chosen[(0, 2)]} == {b(4), b(5)}


def test_no_valid_replacement_says_why() -> None:
    policy = DefaultEnsemblePlacementPolicy()
    cluster(policy, {"/default-region/default-rack": ["bk1", "bk3"]})
    md = closed([(0, [1, 2, 3])], last=3)
    outcome = choose_replacements(policy, md, gaps_for(md, {b(2)}))
    assert isinstance(outcome, NoReplacement)
    assert outcome.gap.bookie == b(2)
    assert outcome.reason


def test_rack_awareness_is_kept() -> None:
    policy = RackawareEnsemblePlacementPolicy()
    layout = {
        "/default-region/r1": ["bk1", "bk6"],
        "/default-region/r2": ["bk2", "bk7"],
        "/default-region/r3": ["bk3"],
    }
    cluster(policy, layout, config={"min_racks_per_write_quorum": 2})
    # bk2 (rack r2) is gone: the replacement must keep two racks per write quorum; bk7 is on
    # r2 and bk6 on r1. Both keep >= 2 racks with E=Qw=3, so check the rule itself: the
    # chosen bookie is never one already in the ensemble.
    md = closed([(0, [1, 2, 3])], last=5)
    chosen = choose_replacements(policy, md, gaps_for(md, {b(2)}))
    assert not isinstance(chosen, NoReplacement)
    assert chosen[(0, 1)] in {b(6), b(7)}
    # Now only a bookie of rack r1 is left and the policy is strict about 3 racks.
    strict = RackawareEnsemblePlacementPolicy()
    cluster(
        strict,
        {"/default-region/r1": ["bk1", "bk6"], "/default-region/r3": ["bk3"]},
        config={"min_racks_per_write_quorum": 3, "enforce_min_racks": True},
    )
    outcome = choose_replacements(strict, md, gaps_for(md, {b(2)}))
    assert isinstance(outcome, NoReplacement)
    assert "rack" in outcome.reason.lower()


def test_a_worker_takes_the_copy_itself_where_its_rack_allows() -> None:
    racks = {b(1): "/r/1", b(3): "/r/3", b(4): "/r/4", b(5): "/r/4", b(6): "/r/6"}
    md = closed([(0, [1, 2, 3]), (10, [2, 4, 3]), (20, [1, 2, 5])], last=24)
    gaps = gaps_for(md, {b(2)})
    chosen = {(0, 1): b(4), (10, 0): b(5), (20, 1): b(6)}

    def prefer(
        local: BookieId, writable: set[BookieId] | None = None, avoid: set[BookieId] | None = None
    ) -> dict[tuple[int, int], BookieId]:
        return prefer_local(
            chosen,
            gaps,
            local,
            writable=set(racks) if writable is None else writable,
            location_of=racks.__getitem__,
            avoid=avoid or set(),
        )

    # bk5 is in bk4's rack: it takes fragment 0's copy; fragment 10 picked bk5 already;
    # fragment 20 lists bk5 already, so bk6 keeps that one.
    assert prefer(b(5)) == {(0, 1): b(5), (10, 0): b(5), (20, 1): b(6)}
    # Another rack than any choice: nothing changes (the policy's rack rules stay whole).
    assert prefer(b(1)) == chosen
    # Read-only (not writable), or refused earlier in this attempt: nothing changes.
    assert prefer(b(5), writable={b(4), b(6)}) == chosen
    assert prefer(b(5), avoid={b(5)}) == chosen
    # Two gaps in one fragment: the local bookie takes one of them, never both.
    two = gaps_for(md, {b(1), b(2)})[:2]
    out = prefer_local(
        {(0, 0): b(4), (0, 1): b(5)},
        two,
        b(6),
        writable=set(racks),
        location_of=lambda _: "/same",
    )
    assert sorted(out.values()) == sorted([b(6), b(5)])


def test_lost_bookies_due_at_their_deadline() -> None:
    lost = LostBookies()
    lost.update({b(1)}, {b(2)}, now=1.502)
    assert lost.due(2.0, 1.0) == set()
    # The simulation found this: woken exactly at the deadline, where (t + d) - t < d in
    # floating point, the bookie must be due (or the auditor spins at that instant).
    deadline = lost.next_deadline(2.0, 1.0)
    assert deadline == 1.502 + 1.0
    assert lost.due(deadline, 1.0) == {b(2)}
    assert lost.next_deadline(deadline, 1.0) is None
    # Seen gone again later: the first time stands. Registered again: forgotten.
    lost.update({b(1)}, {b(2), b(3)}, now=5.0)
    assert lost.since == {b(2): 1.502, b(3): 5.0}
    lost.update({b(1), b(2)}, set(), now=6.0)
    assert lost.since == {b(3): 5.0}
    assert lost.due(6.0, 0) == {b(3)}


def test_token_bucket() -> None:
    assert TokenBucket(None).reserve(10**9, 0.0) == 0.0
    bucket = TokenBucket(100.0, burst=100.0)  # 100/s, one second's burst
    assert bucket.reserve(100, 0.0) == 0.0
    assert bucket.reserve(50, 0.0) == pytest.approx(0.5)  # in debt: wait half a second
    assert bucket.reserve(50, 1.0) == pytest.approx(0.0)  # refilled 100, owed 50, took 50
    assert bucket.reserve(1000, 1.0) == pytest.approx(10.0)  # a large item passes, later
    # By default 20 ms worth is saved up.
    small = TokenBucket(100.0)
    assert small.reserve(2, 0.0) == 0.0
    assert small.reserve(2, 0.0) == pytest.approx(0.02)
    assert check_rate(0, "x") is None and check_rate(None, "x") is None
    for bad in (-1, float("inf"), "fast", True):
        with pytest.raises(InvalidArgumentError):
            check_rate(bad, "x")


def test_batch_entries_fit_whole_answers() -> None:
    mib = 1024 * 1024
    assert batch_entries(None, 16, mib) == 16  # nothing seen yet
    assert batch_entries(0.0, 16, mib) == 16
    assert batch_entries(1000.0, 16, mib) == 16
    assert batch_entries(65536.0, 16, mib) == 16  # exactly 16 fit
    assert batch_entries(65572.0, 16, mib) == 15  # 64 KiB payloads with their headers
    assert batch_entries(300_000.0, 16, mib) == 3
    assert batch_entries(2 * mib, 16, mib) == 1  # one entry always (an answer holds it)


def test_what_a_copier_does_with_a_batch_answer() -> None:
    run = [10, 11, 12, 13]
    good = {10: b"a", 11: b"b", 12: b"c", 13: b"d"}

    def bad(entry: int, packet: bytes) -> str | None:
        return None if good[entry] == packet else "digest mismatch"

    # All there and good; a short answer: the rest asked again of the same replica.
    plan = plan_batch_answer(run, "OK", 10, [b"a", b"b", b"c", b"d"], bad)
    assert (plan.got, plan.alone, plan.again) == (list(good.items()), [], [])
    plan = plan_batch_answer(run, "OK", 10, [b"a"], bad)
    assert (plan.got, plan.alone, plan.again) == ([(10, b"a")], [], [11, 12, 13])
    # A bad copy goes on alone; the entries after it are still taken from here.
    plan = plan_batch_answer(run, "OK", 10, [b"a", b"X", b"c"], bad)
    assert plan.got == [(10, b"a"), (12, b"c")]
    assert plan.alone == [(11, "digest mismatch")] and plan.again == [13]
    # The first missing here: it alone goes on, the rest are asked again.
    plan = plan_batch_answer(run, "NO_SUCH_ENTRY", None, [], bad)
    assert (plan.got, plan.alone, plan.again) == ([], [(10, "NO_SUCH_ENTRY")], [11, 12, 13])
    plan = plan_batch_answer([13], "NO_SUCH_ENTRY", None, [], bad)
    assert (plan.alone, plan.again) == ([(13, "NO_SUCH_ENTRY")], [])
    # An older bookie: entry by entry, from it first.
    plan = plan_batch_answer(run, "BAD_REQUEST", None, [], bad)
    assert plan.same_first and [e for e, _ in plan.alone] == run and not plan.again
    # Errors, and answers for other entries (or more than asked): every entry goes on.
    for status, first, packets in [
        ("IO_ERROR", None, []),
        ("OK", None, []),
        ("OK", 11, [b"b"]),
        ("OK", 10, []),
        ("OK", 10, [b"a"] * 5),
    ]:
        plan = plan_batch_answer(run, status, first, packets, bad)
        assert not plan.got and not plan.again and not plan.same_first
        assert [e for e, _ in plan.alone] == run
