"""The pure checkers: each passes a good history and fails a bad one (no trio needed)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from walkit import BookieId, LedgerMetadata, LedgerState
from walkit.errors import LedgerFencedError
from walkit.testing import (
    AddAcked,
    CheckResult,
    History,
    assert_ok,
    check_all,
    check_closed_ledgers_replicated,
    check_entry_replication,
    check_fenced_writer,
    check_no_divergence,
    check_no_lost_acks,
    check_readers_agree,
)

L = 7


def written(history: History, n: int, writer: str = "w1", ledger_id: int = L) -> list[bytes]:
    """n appends acknowledged as entries 0..n-1."""
    payloads = [f"{writer}-{i}".encode() for i in range(n)]
    for i, p in enumerate(payloads):
        history.record_add_acked(history.record_add_invoked(writer, ledger_id, p), i)
    return payloads


def test_no_lost_acks_good() -> None:
    h = History()
    payloads = written(h, 3)
    h.record_add_failed(h.record_add_invoked("w1", L, b"w1-3"), LedgerFencedError("fenced"))
    h.record_read("checker", L, 0, enumerate([*payloads, b"w1-3"]), final=True)
    result = check_no_lost_acks(h)
    assert result.ok and bool(result)
    assert result.counts["acked"] == 3 and result.counts["verified"] == 3


@pytest.mark.parametrize(
    ("read_back", "kind", "n"),
    [
        ([b"w1-0", b"w1-1"], "lost", 1),
        ([b"w1-0", b"w1-1", b"other"], "mismatched", 1),
        (None, "unverified", 3),
    ],
)
def test_no_lost_acks_bad(read_back: list[bytes] | None, kind: str, n: int) -> None:
    h = History()
    written(h, 3)
    if read_back is not None:
        h.record_read("checker", L, 0, enumerate(read_back), final=True)
    # A non-final read does not count as a read-back.
    h.record_read("tailer", L, 0, enumerate([b"w1-0", b"w1-1", b"w1-2"]))
    result = check_no_lost_acks(h)
    assert not result.ok
    assert result.counts[kind] == n
    assert "entry 2" in result.examples[-1]
    assert "FAILED" in str(result)


def test_no_divergence_good() -> None:
    h = History()
    written(h, 3)
    h.record_close_acked("w1", L, 2)
    h.record_ledger_closed("w1", L, 2)
    h.record_ledger_closed("reader", L, 2)
    # A ledger closed past what was acknowledged (recovery found an unacked entry) is fine.
    written(h, 1, ledger_id=8)
    h.record_ledger_closed("reader", 8, 4)
    result = check_no_divergence(h)
    assert result.ok, result
    assert result.counts["closed_ledgers"] == 2


def test_no_divergence_bad() -> None:
    h = History()
    written(h, 3)
    h.record_ledger_closed("recoverer", L, 1)
    result = check_no_divergence(h)
    assert not result.ok and result.counts["divergent"] == 1
    assert "acknowledged entry 2" in result.examples[0]

    h = History()
    written(h, 3)
    h.record_ledger_closed("r1", L, 2)
    h.record_ledger_closed("r2", L, 3)
    h.record_close_acked("w1", L, 1)
    result = check_no_divergence(h)
    assert result.counts["disagreeing_closes"] == 1
    assert result.counts["bad_writer_close"] == 1
    assert not result.ok


B = [BookieId(f"bookie-{i}", 3181) for i in range(5)]


def closed_metadata(last: int) -> LedgerMetadata:
    # E=3, Qw=2, Qa=2; a second fragment from entry 2 replaces bookie-0 by bookie-3.
    return LedgerMetadata(
        ledger_id=L,
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        fragments=((0, (B[0], B[1], B[2])), (2, (B[3], B[1], B[2]))),
        state=LedgerState.CLOSED,
        last_entry_id=last,
    )


def test_entry_replication_good() -> None:
    md = closed_metadata(3)
    copies = {
        B[0]: {0: b"a"},
        B[1]: {0: b"a", 1: b"b", 3: b"d"},
        B[2]: {1: b"b", 2: b"c"},
        B[3]: {2: b"c", 3: b"d", 4: b"unacked"},
    }
    result = check_entry_replication(md, copies)
    assert result.ok, result
    assert result.counts["entries"] == 4


def test_entry_replication_bad() -> None:
    md = closed_metadata(3)
    copies = {
        B[0]: {0: b"a", 2: b"c"},  # entry 2 on bookie-0 does not count: not in its write set
        B[1]: {0: b"a", 1: b"b", 3: b"d"},
        B[2]: {1: b"B", 2: b"c"},
        B[3]: {3: b"d"},
    }
    result = check_entry_replication(md, copies)
    assert not result.ok
    assert result.counts["under_replicated"] == 1
    assert result.counts["conflicting_copies"] == 1
    assert any("entry 2 is on 1 of its write set" in e for e in result.examples)

    open_md = LedgerMetadata(
        ledger_id=L, ensemble_size=3, write_quorum=2, ack_quorum=2, fragments=((0, tuple(B[:3])),)
    )
    assert not check_entry_replication(open_md, {}).ok


def test_closed_ledgers_replicated_from_history() -> None:
    h = History()
    h.record_stored_copies(closed_metadata(0), {B[0]: {0: b"a"}, B[1]: {0: b"a"}})
    assert check_closed_ledgers_replicated(h).ok
    h.record_stored_copies(closed_metadata(0), {B[0]: {0: b"a"}})
    h.record_stored_copies(closed_metadata(0), {B[0]: {0: b"a"}})  # counted once
    result = check_closed_ledgers_replicated(h)
    assert not result.ok and result.counts["ledgers"] == 2
    assert result.counts["under_replicated"] == 1


def test_readers_agree_good() -> None:
    h = History()
    payloads = written(h, 4)
    h.record_read("r1", L, 0, enumerate(payloads[:2]))
    h.record_read("r2", L, 1, [(1, payloads[1]), (2, payloads[2]), (3, payloads[3])])
    h.record_read("r3", L, 0, [])
    result = check_readers_agree(h)
    assert result.ok, result
    assert result.counts["reads"] == 3 and result.counts["entries_read"] == 5


@pytest.mark.parametrize(
    ("entries", "kind"),
    [
        ([(0, b"w1-0"), (2, b"w1-2")], "gaps"),
        ([(0, b"w1-0"), (1, b"w1-X")], "disagreements"),
        ([(1, b"w1-1"), (0, b"w1-0")], "gaps"),
    ],
)
def test_readers_agree_bad(entries: list[tuple[int, bytes]], kind: str) -> None:
    h = History()
    written(h, 3)
    h.record_read("r1", L, entries[0][0], entries)
    result = check_readers_agree(h)
    assert not result.ok
    assert result.counts[kind] >= 1, result


def test_readers_agree_between_readers_and_order_and_duplicates() -> None:
    # Entries that were never acknowledged (e.g. recovered after a crash) still must agree.
    h = History()
    first = h.record_add_invoked("w1", L, b"first")
    second = h.record_add_invoked("w1", L, b"second")
    h.record_read("r1", L, 0, [(0, b"first"), (1, b"second")])
    assert check_readers_agree(h).ok
    h.record_read("r2", L, 0, [(0, b"first"), (1, b"third")])
    assert check_readers_agree(h).counts["disagreements"] == 1

    h = History()
    h.record_add_invoked("w1", L, b"first")
    h.record_add_invoked("w1", L, b"second")
    h.record_read("r1", L, 0, [(0, b"second"), (1, b"first")])
    result = check_readers_agree(h)
    assert result.counts["reordered"] == 1 and not result.ok

    h = History()
    h.record_add_invoked("w1", L, b"once")
    h.record_read("r1", L, 0, [(0, b"once"), (1, b"once")])
    result = check_readers_agree(h)
    assert result.counts["duplicates"] == 1 and not result.ok
    del first, second


def test_fenced_writer_good() -> None:
    h = History()
    pending = h.record_add_invoked("w1", L, b"in-flight")
    written(h, 2)
    h.record_fence_completed("w2", L)
    # An add sent before fencing may still be acknowledged (it was on Qa bookies) ...
    h.record_add_acked(pending, 2)
    # ... and an add sent afterwards fails.
    h.record_add_failed(h.record_add_invoked("w1", L, b"late"), "WriterFencedError")
    h.record_ledger_closed("w2", L, 2)
    result = check_fenced_writer(h)
    assert result.ok, result
    assert result.counts == {"fences": 1, "acks_after_fence": 1, "fenced_acks": 0, "past_end": 0}


def test_fenced_writer_bad() -> None:
    h = History()
    written(h, 2)
    h.record_fence_completed("w2", L)
    late = h.record_add_invoked("w1", L, b"late")
    h.record_add_acked(late, 2)
    h.record_ledger_closed("w2", L, 1)
    result = check_fenced_writer(h)
    assert not result.ok
    assert result.counts["fenced_acks"] == 1 and result.counts["past_end"] == 1
    assert "after w2 completed fencing" in result.examples[0]


def test_check_all_and_assert_ok() -> None:
    h = History()
    payloads = written(h, 2)
    h.record_close_acked("w1", L, 1)
    h.record_ledger_closed("w1", L, 1)
    h.record_read("checker", L, 0, enumerate(payloads), final=True)
    results = check_all(h)
    assert [r.name for r in results] == [
        "no_lost_acks",
        "no_divergence",
        "entry_replication",
        "readers_agree",
        "fenced_writer",
    ]
    assert_ok(results)
    h.record_ledger_closed("other", L, 0)
    with pytest.raises(AssertionError, match="seed=99"):
        assert_ok(check_all(h), "seed=99")
    assert isinstance(results[0], CheckResult)


async def test_history_helpers_record_real_calls(autojump_clock: trio.testing.MockClock) -> None:
    class Handle:
        id = L

        def __init__(self) -> None:
            self.entries: list[bytes] = []
            self.last_add_confirmed = -1

        async def append(self, payload: bytes) -> int:
            await trio.sleep(1)
            if payload == b"bad":
                raise LedgerFencedError("fenced")
            self.entries.append(payload)
            self.last_add_confirmed += 1
            return self.last_add_confirmed

        async def close(self) -> None:
            await trio.lowlevel.checkpoint()

    h = History()
    handle = Handle()
    assert await h.append("w1", handle, b"a") == 0
    with pytest.raises(LedgerFencedError):
        await h.append("w1", handle, b"bad")
    await h.close("w1", handle)
    acked = h.of_type(AddAcked)
    assert [(a.entry_id, a.payload) for a in acked] == [(0, b"a")]
    assert acked[0].time > h.events[0].time
    assert [type(e).__name__ for e in h] == [
        "AddInvoked",
        "AddAcked",
        "AddInvoked",
        "AddFailed",
        "CloseAcked",
    ]
    assert len(h) == 5
