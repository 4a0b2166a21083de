"""The ledger metadata model: validation, transitions and serialization."""

from __future__ import annotations

import base64
import json
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests._release_0_1 import ledger_metadata_bytes
from walkit import BookieId, LedgerMetadata, LedgerState
from walkit._core.ledger_metadata import admin_password, legacy_password_hash, password_hash
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


# --- the password kept for administrative opens -----------------------------------------------

PW = b"ledger password"


def test_the_password_is_an_optional_key_of_format_1_and_never_in_a_repr() -> None:
    salted = password_hash(PW, b"0123456789abcdef")
    md = make(password_sha256=salted, password=PW)
    doc = json.loads(md.to_bytes())
    assert doc["format"] == 1  # readers that predate the key still read the node
    assert base64.b64decode(doc["password"]) == PW
    # Every other key is the one 0.1.0 wrote, with the same value.
    assert {k: v for k, v in doc.items() if k != "password"} == json.loads(
        ledger_metadata_bytes(md)
    )
    back = LedgerMetadata.from_bytes(7, md.to_bytes())
    assert back == md and back.has_password and back.password == PW
    assert "password=" not in repr(md) and PW.decode() not in repr(md)
    assert make(password=b"").has_password  # the empty password is a password
    # Every transition keeps it.
    changed = md.with_fragment(5, (B[3], B[1], B[2])).with_state(LedgerState.IN_RECOVERY)
    assert changed.closed(9, 90).password == PW


def test_metadata_written_before_the_key_reads_as_before() -> None:
    md = make(password_sha256=password_hash(PW, b"0123456789abcdef"), password=PW)
    old = LedgerMetadata.from_bytes(7, ledger_metadata_bytes(md))
    assert old.password is None and not old.has_password
    assert old == attrs.evolve(md, password=None)
    assert "password" not in json.loads(old.to_bytes())  # and writes back as it was


@pytest.mark.parametrize("bad", [12, True, ["cGFzcw=="], {"a": 1}, "not base64!", "cGFzcw="])
def test_a_malformed_stored_password_gives_invalid_metadata_error(bad: object) -> None:
    doc = json.loads(make().to_bytes())
    doc["password"] = bad
    with pytest.raises(InvalidMetadataError, match="ledger 7: malformed metadata") as info:
        LedgerMetadata.from_bytes(7, json.dumps(doc).encode())
    assert "cGFzcw" not in str(info.value)  # the error never repeats what was stored


def test_admin_password_takes_the_stored_one_else_a_known_one() -> None:
    salted = password_hash(PW, b"0123456789abcdef")
    stored = make(password_sha256=salted, password=PW)
    assert admin_password(stored, []) == PW
    # Not kept (opted out, or written before the key): the first known one that matches.
    opted_out = make(password_sha256=salted)
    assert admin_password(opted_out, [b"", b"other"]) is None
    assert admin_password(opted_out, [b"other", PW, b""]) == PW
    # A stored password that does not match the hash (edited by hand) is passed over.
    edited = make(password_sha256=salted, password=b"edited")
    assert admin_password(edited, []) is None
    assert admin_password(edited, [PW]) == PW
    # No hash at all (the oldest metadata): the stored password, else b"" as before.
    assert admin_password(make(), [PW]) == b""
    assert admin_password(make(password=PW), []) == PW
    # Format 1 hashes (unsalted) are checked too.
    legacy = make(password_sha256=legacy_password_hash(PW))
    assert admin_password(legacy, [PW]) == PW
    assert admin_password(attrs.evolve(legacy, password=PW), []) == PW
