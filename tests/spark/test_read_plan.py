"""The read planner (pure): what a Spark read of a log covers, and how it is split."""

from __future__ import annotations

import subprocess
import sys

from tests.spark._spark import require_spark

require_spark(java=False)  # before importing walkit.spark

from walkit import LogPosition  # noqa: E402
from walkit.spark._read_plan import (  # noqa: E402
    LedgerView,
    Range,
    cut_at_records,
    pack,
    plan_log,
    resolve_latest,
)

P = LogPosition.parse


def test_closed_ledgers_then_the_first_open_one_up_to_its_lac() -> None:
    ledgers = [
        LedgerView(1, 10, True, 4),
        LedgerView(3, 12, True, -1),  # empty (seq 2 was dropped)
        LedgerView(4, 13, True, 2),
        LedgerView(5, 14, False, 6),
    ]
    plan = plan_log(ledgers, LogPosition.EARLIEST)
    assert plan.ranges == (Range(1, 10, 0, 4), Range(4, 13, 0, 2), Range(5, 14, 0, 6))
    assert plan.end == P("5:7")
    # Resuming at the end finds nothing new until the LAC moves.
    assert plan_log(ledgers, plan.end).ranges == ()
    assert plan_log(ledgers, plan.end).end == P("5:7")


def test_a_roll_in_progress_stops_the_read_at_the_old_ledger() -> None:
    # The new ledger 6 is listed, the old 5 is not closed yet: its tail may still be coming.
    ledgers = [LedgerView(5, 14, False, 6), LedgerView(6, 15, False, 3)]
    plan = plan_log(ledgers, P("5:2"))
    assert plan.ranges == (Range(5, 14, 2, 6),)
    assert plan.end == P("5:7")
    # Once 5 is closed (at 9: three more entries), the next plan reads them, then 6.
    closed = [LedgerView(5, 14, True, 9), LedgerView(6, 15, False, 3)]
    plan = plan_log(closed, P("5:7"))
    assert plan.ranges == (Range(5, 14, 7, 9), Range(6, 15, 0, 3))
    assert plan.end == P("6:4")


def test_end_position_and_record_budget() -> None:
    ledgers = [LedgerView(1, 10, True, 9), LedgerView(2, 11, True, 9), LedgerView(3, 12, False, 9)]
    assert plan_log(ledgers, P("1:5"), P("2:3")).ranges == (Range(1, 10, 5, 9), Range(2, 11, 0, 2))
    assert plan_log(ledgers, P("1:5"), P("2:3")).end == P("2:3")
    assert plan_log(ledgers, P("1:0"), LogPosition.EARLIEST).ranges == ()
    budget = plan_log(ledgers, P("1:8"), None, 5)
    assert budget.ranges == (Range(1, 10, 8, 9), Range(2, 11, 0, 2))
    assert budget.end == P("2:3") and budget.count == 5
    exact = plan_log(ledgers, P("1:0"), None, 10)
    assert exact.end == P("1:10") and exact.count == 10
    assert plan_log(ledgers, exact.end, None, 1).ranges == (Range(2, 11, 0, 0),)


def test_slots_cut_the_first_and_last_entry() -> None:
    ledgers = [
        LedgerView(1, 10, True, 9, record_sets=True),
        LedgerView(2, 11, True, 4),  # an older ledger: one record per entry
        LedgerView(3, 12, False, 9, record_sets=True),
    ]
    plan = plan_log(ledgers, P("1:5:3"), P("3:2:1"))
    assert plan.ranges == (
        Range(1, 10, 5, 9, True, 3, None),
        Range(2, 11, 0, 4),
        Range(3, 12, 0, 2, True, 0, 1),
    )
    assert plan.end == P("3:2:1")
    # The next plan starts where this one ended, in the middle of entry 3:2.
    assert plan_log(ledgers, plan.end).ranges == (Range(3, 12, 2, 9, True, 1, None),)
    # Start and end in one entry; an end at slot 0 stops before its entry.
    assert plan_log(ledgers, P("1:4:1"), P("1:4:3")).ranges == (Range(1, 10, 4, 4, True, 1, 3),)
    assert plan_log(ledgers, P("1:4:3"), P("1:4:3")).ranges == ()
    assert plan_log(ledgers, P("1:4:1"), P("1:6:0")).ranges == (Range(1, 10, 4, 5, True, 1),)
    # An entry budget drops the end's slot cut when it stops earlier.
    budget = plan_log(ledgers, P("1:8:2"), P("3:2:1"), 4)
    assert budget.ranges == (Range(1, 10, 8, 9, True, 2), Range(2, 11, 0, 1))
    assert budget.end == P("2:2:0")
    # pack keeps each cut on the piece that holds its entry.
    parts = pack(plan.ranges, 4)
    assert parts[0] == (Range(1, 10, 5, 8, True, 3, None),)
    assert parts[1][0] == Range(1, 10, 9, 9, True, 0, None)
    assert parts[2][-1] == Range(3, 12, 0, 1, True, 0, None)
    assert parts[3] == (Range(3, 12, 2, 2, True, 0, 1),)


def test_a_record_budget_ends_at_the_exact_record() -> None:
    ledgers = [
        LedgerView(1, 10, True, 2, record_sets=True),  # entries of 4, 5 and 3 records
        LedgerView(2, 11, True, 4),  # one record per entry
        LedgerView(3, 12, False, 1, record_sets=True),  # entries of 6 and 6 records
    ]
    plan = plan_log(ledgers, P("1:0:2"))
    counts = [[4, 5, 3], None, [6, 6]]
    # 2 records left in entry 1:0, then 5 in 1:1: a budget of 4 ends inside 1:1.
    assert cut_at_records(plan, counts, 4) == P("1:1:2")
    # A budget that ends exactly at an entry's last record ends at the next entry's start.
    assert cut_at_records(plan, counts, 7) == P("1:2:0")
    assert cut_at_records(plan, counts, 10) == P("1:3:0")  # (the next plan goes on at 2:0)
    assert plan_log(ledgers, P("1:3:0")).ranges[0] == Range(2, 11, 0, 4)
    # One record per entry in ledger 2, then inside 3:0.
    assert cut_at_records(plan, counts, 12) == P("2:2:0")
    assert cut_at_records(plan, counts, 16) == P("3:0:1")
    assert cut_at_records(plan, counts, 21) == P("3:1:0")
    assert cut_at_records(plan, counts, 26) == P("3:1:5")
    # More budget than records: the plan's own end.
    assert cut_at_records(plan, counts, 1000) == plan.end == P("3:2:0")
    # Counting stopped early (a ledger gone, or the count's own budget): cut where it stopped.
    assert cut_at_records(plan, [[4, 5]], 1000) == P("1:2:0")
    assert cut_at_records(plan, [[4, 5, 3]], 1000) == P("2:0:0")
    assert cut_at_records(plan, [], 1000) == P("1:0:2")
    # The next plan starts where the cut ended, inside the entry.
    assert plan_log(ledgers, P("1:1:2")).ranges[0] == Range(1, 10, 1, 2, True, 2)
    # An end slot on the last entry is respected.
    ended = plan_log(ledgers, P("3:0:0"), P("3:1:2"))
    assert cut_at_records(ended, [[6, 6]], 100) == P("3:1:2")
    assert cut_at_records(ended, [[6, 6]], 7) == P("3:1:1")


def test_resolve_latest() -> None:
    assert resolve_latest([], 7) == P("7:0")
    ledgers = [LedgerView(1, 10, True, 9), LedgerView(2, 11, False, 4)]
    assert resolve_latest(ledgers, 3) == P("2:5")


def test_pack_cuts_big_ranges_and_groups_small_ones() -> None:
    ranges = [Range(1, 10, 0, 9), Range(2, 11, 0, 2), Range(3, 12, 5, 29)]
    parts = pack(ranges, 8)
    assert [sum(r.count for r in p) for p in parts] == [8, 8, 8, 8, 6]
    flat = [(r.seq, e) for p in parts for r in p for e in range(r.first, r.last + 1)]
    expected = [(r.seq, e) for r in ranges for e in range(r.first, r.last + 1)]
    assert flat == expected
    assert parts[1] == (Range(1, 10, 8, 9), Range(2, 11, 0, 2), Range(3, 12, 5, 7))
    assert pack([], 8) == []


def test_import_without_the_extra_names_it() -> None:
    code = (
        "import sys; sys.modules['pyarrow'] = None\n"
        "try:\n    import walkit.spark\nexcept ImportError as exc:\n    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "walkit[spark]" in out.stdout


def test_pack_weighs_record_set_entries_apart() -> None:
    # 100 entries of one record, or 4 record sets, per partition.
    ranges = [Range(1, 10, 0, 149), Range(2, 11, 0, 9, True, 2, 3)]
    parts = pack(ranges, 100, 4)
    assert parts[0] == (Range(1, 10, 0, 99),)
    # 50 one-record entries fill half a partition: two record sets join them.
    assert parts[1] == (Range(1, 10, 100, 149), Range(2, 11, 0, 1, True, 2, None))
    assert parts[2:] == [
        (Range(2, 11, 2, 5, True),),
        (Range(2, 11, 6, 9, True, 0, 3),),
    ]
