"""The pure log metadata model: serialization, validation, and the transitions of takeover,
roll, truncation and snapshots."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from walkit import LogPosition
from walkit._core.digest import DigestType
from walkit._core.log_metadata import (
    LedgerConfig,
    LogLedger,
    LogMetadata,
    SnapshotRecord,
    check_log_name,
    should_roll,
)
from walkit.errors import InvalidArgumentError, InvalidMetadataError, WriterFencedError

P = LogPosition.parse


def sample() -> LogMetadata:
    return LogMetadata(
        name="orders",
        config=LedgerConfig(3, 3, 2, DigestType.MAC),
        next_seq=6,
        ledgers=(LogLedger(3, 30), LogLedger(4, 40), LogLedger(5, 50)),
        truncated=P("3:7"),
        snapshots=(SnapshotRecord(P("3:9"), 90, 123, 456, 789),),
        ctime_ms=1234,
    )


def doc(md: LogMetadata) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(md.to_bytes())
    return value


def test_round_trip_and_format() -> None:
    md = sample()
    assert LogMetadata.from_bytes("orders", md.to_bytes()) == md
    d = doc(md)
    assert d["format"] == 1
    assert d["ledgers"] == [
        {"seq": 3, "ledger_id": 30},
        {"seq": 4, "ledger_id": 40},
        {"seq": 5, "ledger_id": 50},
    ]
    assert d["truncated"] == "3:7:0"
    assert d["snapshots"][0]["position"] == "3:9:0"
    assert d["config"] == {"ensemble_size": 3, "write_quorum": 3, "ack_quorum": 2, "digest": "mac"}
    assert md.to_json() == d


def test_a_log_whose_ledgers_keep_no_password_is_format_2() -> None:
    """Readers that predate ``store_password`` refuse such a log instead of rewriting it
    without the option; every other log stays format 1, without the key."""
    opted_out = attrs.evolve(sample(), config=LedgerConfig(3, 3, 2, store_password=False))
    d = doc(opted_out)
    assert d["format"] == 2 and d["config"]["store_password"] is False
    assert LogMetadata.from_bytes("orders", opted_out.to_bytes()) == opted_out
    assert sample().config.store_password and "store_password" not in doc(sample())["config"]
    # Format 1 with the key (edited by hand) still reads; it is written back as format 2.
    d["format"] = 1
    back = LogMetadata.from_bytes("orders", json.dumps(d).encode())
    assert back == opted_out and doc(back)["format"] == 2
    with pytest.raises(InvalidArgumentError, match="store_password must be a bool"):
        LedgerConfig(store_password=0)  # type: ignore[arg-type]


def test_a_log_with_consumers_is_format_3() -> None:
    """Clients that predate consumers refuse such a log instead of running retention without
    them; the mark stays with the log's other options (a log that keeps no password too)."""
    with_consumers = sample().with_consumers()
    d = doc(with_consumers)
    assert d["format"] == 3 and d["consumers"] is True
    assert LogMetadata.from_bytes("orders", with_consumers.to_bytes()) == with_consumers
    assert "consumers" not in doc(sample()) and with_consumers.with_consumers() is with_consumers
    both = attrs.evolve(with_consumers, config=LedgerConfig(3, 3, 2, store_password=False))
    assert doc(both)["format"] == 3
    assert LogMetadata.from_bytes("orders", both.to_bytes()) == both


@st.composite
def metadata(draw: st.DrawFn) -> LogMetadata:
    seqs = sorted(draw(st.sets(st.integers(1, 1000), max_size=8)))
    ids = draw(st.lists(st.integers(0, 2**63 - 1), min_size=len(seqs) + 3, unique=True))
    ledgers = tuple(LogLedger(s, i) for s, i in zip(seqs, ids, strict=False))
    next_seq = (seqs[-1] if seqs else 0) + draw(st.integers(1, 5))
    trunc_seq = draw(st.integers(0, seqs[0] if seqs else next_seq - 1))
    truncated = LogPosition(trunc_seq, draw(st.integers(0, 100))) if trunc_seq else P("earliest")
    snaps = tuple(
        SnapshotRecord(LogPosition(1, n), ids[len(seqs) + k], n * 10, n, 0)
        for k, n in enumerate(sorted(draw(st.sets(st.integers(0, 50), max_size=3))))
    )
    return LogMetadata(
        name=draw(st.from_regex(r"[a-z0-9_][a-z0-9._-]{0,20}", fullmatch=True)),
        next_seq=next_seq,
        ledgers=ledgers,
        truncated=truncated,
        snapshots=snaps,
    )


@given(metadata())
def test_any_valid_metadata_round_trips(md: LogMetadata) -> None:
    assert LogMetadata.from_bytes(md.name, md.to_bytes()) == md


def _mutated(**changes: Any) -> bytes:
    d = doc(sample())
    for key, value in changes.items():
        if value is _DELETE:
            del d[key]
        else:
            d[key] = value
    return json.dumps(d).encode()


_DELETE = object()


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"\xff\xfe",
        b"[]",
        b"null",
        _mutated(format=2),  # format 2 is only for a log whose ledgers keep no password
        _mutated(format=3),  # format 3 is only for a log with consumers
        _mutated(format=4),
        _mutated(consumers=True),
        _mutated(format=3, consumers="yes"),
        _mutated(
            config={
                "ensemble_size": 3,
                "write_quorum": 3,
                "ack_quorum": 2,
                "digest": "mac",
                "store_password": "no",
            }
        ),
        _mutated(format=_DELETE),
        _mutated(name="other"),
        _mutated(config=[3, 2, 2]),
        _mutated(config={"ensemble_size": 2, "write_quorum": 3, "ack_quorum": 2, "digest": "mac"}),
        _mutated(config={"ensemble_size": 3, "write_quorum": 2, "ack_quorum": 2, "digest": "md5"}),
        _mutated(next_seq=0),
        _mutated(next_seq="6"),
        _mutated(next_seq=5),  # a ledger has seq 5
        _mutated(ledgers=[{"seq": 4, "ledger_id": 40}, {"seq": 3, "ledger_id": 30}]),
        _mutated(ledgers=[{"seq": 3, "ledger_id": 30}, {"seq": 3, "ledger_id": 31}]),
        _mutated(ledgers=[{"seq": 3, "ledger_id": 30}, {"seq": 4, "ledger_id": 30}]),
        _mutated(ledgers=[{"seq": 3, "ledger_id": -1}]),
        _mutated(ledgers=[{"seq": 0, "ledger_id": 1}]),
        _mutated(ledgers=[{"seq": 3}]),
        _mutated(ledgers=[[3, 30]]),
        _mutated(ledgers={"3": 30}),
        _mutated(ledgers=[{"seq": True, "ledger_id": 30}]),
        _mutated(truncated="4:0"),  # ledger 3 would lie wholly before it
        _mutated(truncated="latest"),
        _mutated(truncated="3-7"),
        _mutated(truncated=37),
        _mutated(snapshots=[{"position": "3:9", "ledger_id": 30, "size": 1, "crc32c": 1}]),
        _mutated(snapshots=[{"position": "3:9", "ledger_id": 91, "size": -1, "crc32c": 1}]),
        _mutated(snapshots=[{"position": "3:9", "ledger_id": 91, "size": 1, "crc32c": 2**32}]),
        _mutated(snapshots=[{"position": "x", "ledger_id": 91, "size": 1, "crc32c": 1}]),
        _mutated(
            snapshots=[
                {"position": "3:9", "ledger_id": 91, "size": 1, "crc32c": 1},
                {"position": "3:8", "ledger_id": 92, "size": 1, "crc32c": 1},
            ]
        ),
        _mutated(snapshots=None),
    ],
)
def test_malformed_metadata_raises_invalid_metadata(data: bytes) -> None:
    with pytest.raises(InvalidMetadataError):
        LogMetadata.from_bytes("orders", data)


@pytest.mark.parametrize("name", ["orders", "a", "A_b-c.d", "0", "x" * 200])
def test_good_names(name: str) -> None:
    assert check_log_name(name) == name


@pytest.mark.parametrize(
    "name", ["", ".", "..", ".hidden", "-x", "a/b", "a b", "é", "x" * 201, "a\x00", None, 5]
)
def test_bad_names(name: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        check_log_name(name)


# --- transitions ---------------------------------------------------------------------------


def test_fresh_log_takeover_adds_the_first_ledger() -> None:
    md = LogMetadata(name="x")
    assert md.to_recover() == ()
    plan = md.after_takeover({}, 11)
    assert plan.ledger == LogLedger(1, 11)
    assert plan.metadata.ledgers == (LogLedger(1, 11),)
    assert plan.metadata.next_seq == 2
    assert plan.dropped == ()


def test_takeover_recovers_the_last_two_and_drops_the_empty_ones() -> None:
    md = sample()
    assert md.to_recover() == (LogLedger(4, 40), LogLedger(5, 50))
    plan = md.after_takeover({40: 12, 50: -1}, 60)
    assert plan.dropped == (LogLedger(5, 50),)
    assert plan.metadata.ledgers == (LogLedger(3, 30), LogLedger(4, 40), LogLedger(6, 60))
    assert plan.ledger == LogLedger(6, 60)
    assert plan.metadata.next_seq == 7
    # Both empty: both go.
    both = md.after_takeover({40: -1, 50: -1}, 60)
    assert both.metadata.ledgers == (LogLedger(3, 30), LogLedger(6, 60))


def test_takeover_needs_every_ledger_recovered() -> None:
    with pytest.raises(InvalidArgumentError):
        sample().after_takeover({50: 3}, 60)


def test_roll_only_by_the_owner() -> None:
    md = sample()
    rolled, new = md.after_roll(LogLedger(5, 50), 60)
    assert new == LogLedger(6, 60)
    assert rolled.last == new
    assert rolled.owned_by(new) and not rolled.owned_by(LogLedger(5, 50))
    with pytest.raises(WriterFencedError):
        md.after_roll(LogLedger(4, 40), 61)
    with pytest.raises(InvalidMetadataError):  # the same ledger id twice is refused
        rolled.after_roll(new, 50)


def test_truncation_drops_only_ledgers_wholly_before_it() -> None:
    md = sample()
    result = md.truncated_at(P("4:3"))
    assert result.dropped == (LogLedger(3, 30),)
    assert result.metadata.ledgers == (LogLedger(4, 40), LogLedger(5, 50))
    assert result.metadata.truncated == P("4:3")
    # Never backwards; the same point again changes nothing.
    assert md.truncated_at(P("3:1")).metadata == md
    assert result.metadata.truncated_at(P("4:3")).dropped == ()
    # Within the first ledger: nothing dropped, the point moves.
    within = md.truncated_at(P("3:100"))
    assert within.dropped == () and within.metadata.truncated == P("3:100")
    # Up to the current ledger: never the ledger holding the position.
    last = md.truncated_at(P("5:0"))
    assert last.metadata.ledgers == (LogLedger(5, 50),)
    # The truncation point may name a ledger that was dropped as empty.
    gap = LogMetadata(name="g", next_seq=9, ledgers=(LogLedger(2, 1), LogLedger(8, 2)))
    assert gap.truncated_at(P("5:0")).metadata.ledgers == (LogLedger(8, 2),)


@pytest.mark.parametrize("pos", ["latest", "6:0", "9:0"])
def test_no_truncation_or_snapshot_in_the_future(pos: str) -> None:
    md = sample()
    with pytest.raises(InvalidArgumentError):
        md.truncated_at(P(pos))
    with pytest.raises(InvalidArgumentError):
        md.with_snapshot(SnapshotRecord(P(pos), 99, 1, 1), keep=3)


def test_snapshots_are_kept_by_position() -> None:
    md = sample()
    md2, dropped = md.with_snapshot(SnapshotRecord(P("5:1"), 91, 1, 1), keep=2)
    assert dropped == ()
    assert [s.ledger_id for s in md2.snapshots] == [90, 91]
    md3, dropped = md2.with_snapshot(SnapshotRecord(P("4:0"), 92, 1, 1), keep=2)
    assert [s.ledger_id for s in dropped] == [90]
    assert [s.ledger_id for s in md3.snapshots] == [92, 91]
    assert md3.latest_snapshot is not None and md3.latest_snapshot.ledger_id == 91
    with pytest.raises(InvalidArgumentError):  # a ledger of the log cannot be a snapshot
        md.with_snapshot(SnapshotRecord(P("4:0"), 40, 1, 1), keep=2)
    with pytest.raises(InvalidArgumentError):
        md.with_snapshot(SnapshotRecord(P("4:0"), 93, 1, 1), keep=0)


def test_reader_start_and_ledger_lookup() -> None:
    md = sample()
    assert md.start_position(LogPosition.EARLIEST) == P("3:7")
    assert md.start_position(P("4:2")) == P("4:2")
    assert md.ledger_at_or_after(1) == LogLedger(3, 30)
    assert md.ledger_at_or_after(4) == LogLedger(4, 40)
    assert md.ledger_at_or_after(6) is None
    assert md.ledger_with_seq(4) == LogLedger(4, 40)
    assert md.ledger_with_seq(2) is None


def test_should_roll() -> None:
    assert not should_roll(10, 100, roll_entries=None, roll_bytes=None)
    assert should_roll(10, 100, roll_entries=10, roll_bytes=None)
    assert not should_roll(9, 100, roll_entries=10, roll_bytes=101)
    assert should_roll(9, 101, roll_entries=10, roll_bytes=101)


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, int, int]]:
    kinds = st.sampled_from(["takeover", "roll", "truncate", "snapshot"])
    return draw(
        st.lists(st.tuples(kinds, st.integers(-1, 30), st.integers(0, 9)), min_size=1, max_size=40)
    )


@given(operations())
def test_any_sequence_of_transitions_keeps_the_invariants(ops: list[tuple[str, int, int]]) -> None:
    """Takeovers (with recovered ledgers empty or not), rolls by the owner, truncations and
    snapshots in any order: the metadata stays valid, nothing at or after the truncation point
    is ever dropped, the current ledger is never dropped, and sequence numbers only grow."""
    md = LogMetadata(name="prop")
    ids = iter(range(1, 10_000))
    # The last entry of each listed ledger (what a recovery would close it at).
    ends: dict[int, int] = {}
    for kind, a, b in ops:
        before = md
        if kind == "takeover":
            if a >= 0 and md.last is not None:  # the old writer wrote some records
                ends[md.last.ledger_id] = max(ends[md.last.ledger_id], b)
            recovered = {lg.ledger_id: ends[lg.ledger_id] for lg in md.to_recover()}
            plan = md.after_takeover(recovered, next(ids))
            assert all(recovered[lg.ledger_id] < 0 for lg in plan.dropped)
            assert plan.metadata.last == plan.ledger
            md = plan.metadata
            ends[plan.ledger.ledger_id] = -1
        elif kind == "roll" and md.last is not None:
            md, new = md.after_roll(md.last, next(ids))
            ends[new.ledger_id] = -1
        elif md.last is not None:
            # A real position: an existing ledger's, entry within what it holds.
            lg = md.ledgers[a % len(md.ledgers)]
            ends[md.last.ledger_id] = max(ends[md.last.ledger_id], b)
            pos = LogPosition(lg.seq, min(b, max(ends[lg.ledger_id], 0)))
            if kind == "truncate":
                result = md.truncated_at(pos)
                assert all(d.seq < pos.ledger_seq for d in result.dropped)
                assert before.last not in result.dropped
                md = result.metadata
                assert md.truncated == max(pos, before.truncated)
            else:
                md, _dropped = md.with_snapshot(SnapshotRecord(pos, next(ids), 1, 1), keep=2)
                assert len(md.snapshots) <= 2
        # Invariants the model checks itself, and a round trip through bytes.
        assert LogMetadata.from_bytes("prop", md.to_bytes()) == md
        assert md.next_seq >= before.next_seq
        kept_after_point = [lg for lg in before.ledgers if lg.seq >= md.truncated.ledger_seq]
        dropped_now = set(before.ledgers) - set(md.ledgers)
        for lg in dropped_now:  # only empty recovered ledgers or ledgers before the point
            assert lg not in kept_after_point or ends[lg.ledger_id] < 0
            assert lg != before.last or kind == "takeover"


def test_the_generated_password_round_trips_and_old_logs_have_none() -> None:
    md = LogMetadata(name="l", config=LedgerConfig(password_hex="ab" * 32))
    doc = json.loads(md.to_bytes())
    assert doc["config"]["password"] == "ab" * 32
    back = LogMetadata.from_bytes("l", md.to_bytes())
    assert back.config.password == b"\xab" * 32
    del doc["config"]["password"]  # a log written before passwords were generated
    old = LogMetadata.from_bytes("l", json.dumps(doc).encode())
    assert old.config.password == b""
    doc["config"]["password"] = "not hex"
    with pytest.raises(InvalidMetadataError):
        LogMetadata.from_bytes("l", json.dumps(doc).encode())
