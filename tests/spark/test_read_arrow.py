"""Entries as Arrow rows (pure): record sets become one row per record with the columns a
plain reader would give, slot cuts apply, and a damaged entry is a clear error."""

from __future__ import annotations

import struct

import pytest

from tests.spark._spark import require_spark

require_spark(java=False)  # before importing walkit.spark

from walkit._core.record_set import (  # noqa: E402
    ProducerTag,
    decode_record_set,
    encode_record_set,
)
from walkit._core.types import Entry  # noqa: E402
from walkit.errors import CorruptEntryError  # noqa: E402
from walkit.spark._read_arrow import log_batch  # noqa: E402
from walkit.spark._read_io import Chunk  # noqa: E402
from walkit.spark._read_plan import Range  # noqa: E402


def rows(rng: Range, entries: list[Entry]) -> list[tuple[str, int, int, bytes]]:
    batch = log_batch("orders", Chunk(rng, entries)).to_pydict()
    assert set(batch["log"]) <= {"orders"} and set(batch["ledger_id"]) <= {rng.ledger_id}
    return list(
        zip(batch["position"], batch["entry_id"], batch["slot"], batch["payload"], strict=True)
    )


def expected(seq: int, entries: list[Entry]) -> list[tuple[str, int, int, bytes]]:
    out = []
    for entry in entries:
        for slot, record in enumerate(decode_record_set(entry.payload).records):
            out.append((f"{seq}:{entry.entry_id}:{slot}", entry.entry_id, slot, record))
    return out


def test_record_sets_become_rows_and_slots_cut_them() -> None:
    entries = [
        Entry(9, 4, encode_record_set([b"a", b"", b"ccc"])),
        Entry(9, 5, encode_record_set([b"d"], producers=[ProducerTag("p", 7)])),
        Entry(9, 6, encode_record_set([b"e" * 1000, b"f"])),
        Entry(9, 7, encode_record_set([b"g", b"h", b"i", b"j"])),
    ]
    whole = expected(3, entries)
    assert len(whole) == 10
    assert rows(Range(3, 9, 4, 7, True), entries) == whole
    # Start at slot 1 of the first entry, stop before slot 2 of the last one.
    assert rows(Range(3, 9, 4, 7, True, 1, 2), entries) == whole[1:-2]
    # A chunk in the middle of its range: no cut applies to it.
    assert rows(Range(3, 9, 2, 9, True, 1, 2), entries) == whole
    # Start and end in one entry; a start past its records leaves nothing.
    assert rows(Range(3, 9, 7, 7, True, 1, 3), entries[3:]) == whole[7:9]
    assert rows(Range(3, 9, 7, 7, True, 4, None), entries[3:]) == []
    # An older ledger: one record per entry, at slot 0.
    old = [Entry(9, 0, b"x"), Entry(9, 1, b"\x01\x00y")]
    assert rows(Range(1, 9, 0, 1), old) == [("1:0:0", 0, 0, b"x"), ("1:1:0", 1, 0, b"\x01\x00y")]
    assert rows(Range(1, 9, 0, 1, False, 1, None), old) == [("1:1:0", 1, 0, b"\x01\x00y")]


def test_a_damaged_record_set_is_an_error_naming_the_entry() -> None:
    good = encode_record_set([b"ab", b"c"])
    # The lengths say 2 + 2 bytes, the body holds 3 and the header says 3.
    wrong_lengths = good[:10] + struct.pack("<2I", 2, 2) + good[18:]
    damaged = [
        (b"\x01\x00", "shorter than a record set's header"),
        (b"\x03" + good[1:], "unknown version 3"),
        (good[:-1], "body of 2 bytes, header says 3"),
        (wrong_lengths, "do not add up"),
    ]
    for payload, text in damaged:
        entries = [Entry(9, 0, good), Entry(9, 1, payload)]
        with pytest.raises(CorruptEntryError, match=text) as info:
            log_batch("orders", Chunk(Range(3, 9, 0, 1, True), entries))
        assert "ledger 9" in str(info.value)


def test_keys_headers_and_timestamps_become_columns() -> None:
    """Entries stamped only (the fast path), entries with their records' own keys, headers and
    timestamps (decoded), and unstamped ones, in one chunk."""
    entries = [
        Entry(9, 0, encode_record_set([b"a", b"b"], timestamp=1_000)),
        Entry(
            9,
            1,
            encode_record_set(
                [b"c", b"d"],
                timestamp=2_000,
                extras=[(b"k", (("h", b"v"),), 5), None],
            ),
        ),
        Entry(9, 2, encode_record_set([b"e"])),
    ]
    batch = log_batch("orders", Chunk(Range(3, 9, 0, 2, True), entries)).to_pydict()
    assert batch["payload"] == [b"a", b"b", b"c", b"d", b"e"]
    assert batch["key"] == [None, None, b"k", None, None]
    assert batch["headers"] == [None, None, [{"key": "h", "value": b"v"}], None, None]
    ms = [None if t is None else int(t.timestamp() * 1000) for t in batch["timestamp"]]
    assert ms == [1_000, 1_000, 5, 2_000, None]
    # Stamped entries only: no Python per record, the same columns.
    fast = log_batch("orders", Chunk(Range(3, 9, 0, 0, True), entries[:1])).to_pydict()
    assert fast["key"] == [None, None] and fast["headers"] == [None, None]
    assert [int(t.timestamp() * 1000) for t in fast["timestamp"]] == [1_000, 1_000]
    # An older ledger's entries: all null.
    old = log_batch("orders", Chunk(Range(1, 9, 0, 0), [Entry(9, 0, b"x")])).to_pydict()
    assert (old["key"], old["headers"], old["timestamp"]) == ([None], [None], [None])
