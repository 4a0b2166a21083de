"""The ledger metadata model: validation, transitions and serialization."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walkit import BookieId, LedgerMetadata, LedgerState
from walkit.errors import (
    InvalidArgumentError,
    InvalidMetadataError,
    LedgerFencedError,
    WriterFencedError,
    error_for_code,
)

B = [BookieId("127.0.0.1", 3181 + i) for i in range(6)]


def make(**kw: object) -> LedgerMetadata:
    args: dict[str, Any] = dict(
        ledger_id=7, ensemble_size=3, write_quorum=2, ack_quorum=2, fragments=((0, tuple(B[:3])),)
    )
    args.update(kw)
    return LedgerMetadata(**args)


@pytest.mark.parametrize(("e", "qw", "qa"), [(2, 3, 1), (3, 2, 3), (3, 3, 0), (0, 0, 0)])
def test_quorums_must_satisfy_e_ge_qw_ge_qa_ge_1(e: int, qw: int, qa: int) -> None:
    with pytest.raises(InvalidArgumentError, match="ensemble_size >= write_quorum >= ack_quorum"):
        make(ensemble_size=e, write_quorum=qw, ack_quorum=qa, fragments=((0, tuple(B[:e])),))


def test_fragments_must_match_the_ensemble_size_and_be_distinct() -> None:
    with pytest.raises(InvalidMetadataError, match="has 2 bookies"):
        make(fragments=((0, tuple(B[:2])),))
    with pytest.raises(InvalidMetadataError, match="duplicate"):
        make(fragments=((0, (B[0], B[0], B[1])),))
    with pytest.raises(InvalidMetadataError, match="out of order"):
        make(fragments=((0, tuple(B[:3])), (5, tuple(B[1:4])), (5, tuple(B[2:5]))))


def test_round_trip_and_readable_json() -> None:
    md = make(custom_metadata={"app": b"\x00\xff"}, ctime_ms=123).with_fragment(
        12, (B[3], B[1], B[2])
    )
    data = md.to_bytes()
    doc = json.loads(data)
    assert doc["format"] == 1
    assert doc["fragments"] == [
        [0, [str(b) for b in B[:3]]],
        [12, ["127.0.0.1:3184", "127.0.0.1:3182", "127.0.0.1:3183"]],
    ]
    assert LedgerMetadata.from_bytes(7, data) == md
    assert md.ensembles == {0: list(B[:3]), 12: [B[3], B[1], B[2]]}
    assert md.ensemble_for(11) == tuple(B[:3]) and md.ensemble_for(12) == (B[3], B[1], B[2])


def test_closing_drops_fragments_that_start_after_the_last_entry() -> None:
    """apache/bookkeeper#2615: a closed ledger must not keep a fragment past its end."""
    md = make().with_fragment(10, tuple(B[3:6]))
    closed = md.closed(last_entry_id=9, length=100)
    assert closed.state is LedgerState.CLOSED
    assert [first for first, _ in closed.fragments] == [0]
    assert make().closed(-1, 0).fragments == ((0, tuple(B[:3])),)


@given(st.binary(max_size=300))
def test_malformed_metadata_always_gives_invalid_metadata_error(data: bytes) -> None:
    try:
        LedgerMetadata.from_bytes(1, data)
    except InvalidMetadataError:
        pass


@pytest.mark.parametrize(
    "doc",
    [
        {"format": 2},
        {"format": 1, "ensemble_size": "3"},
        {
            "format": 1,
            "ensemble_size": 1,
            "write_quorum": 1,
            "ack_quorum": 1,
            "state": "NOPE",
            "last_entry_id": -1,
            "length": 0,
            "digest": "crc32c",
            "fragments": [[0, ["h:1"]]],
        },
        {
            "format": 1,
            "ensemble_size": 1,
            "write_quorum": 1,
            "ack_quorum": 1,
            "state": "OPEN",
            "last_entry_id": -1,
            "length": 0,
            "digest": "crc32c",
            "fragments": [[0, ["no-port"]]],
        },
        [1, 2, 3],
    ],
)
def test_wrong_fields_give_invalid_metadata_error(doc: object) -> None:
    with pytest.raises(InvalidMetadataError):
        LedgerMetadata.from_bytes(1, json.dumps(doc).encode())


def test_bookie_id_round_trip_and_errors() -> None:
    assert BookieId.parse("127.0.0.1:3181") == B[0]
    assert str(BookieId.parse("[::1]:3181")) == "[::1]:3181"
    for bad in ["", "host", "host:", "host:0", "host:70000", ":3181", "host:abc"]:
        with pytest.raises(InvalidArgumentError):
            BookieId.parse(bad)


def test_error_codes_map_back_to_their_classes() -> None:
    assert isinstance(error_for_code(3, "x"), LedgerFencedError)
    assert isinstance(error_for_code(21), WriterFencedError)
    assert issubclass(WriterFencedError, LedgerFencedError)
    assert error_for_code(999).__class__.__name__ == "RemoteProtocolError"
