"""Record sets: the entry envelope round-trips, and malformed entries raise CorruptEntryError."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from walkit._core.record_set import (
    FORMAT_KEY,
    FORMAT_RECORD_SETS,
    Codec,
    ProducerTag,
    decode_record_set,
    encode_record_set,
    entry_records,
    envelope_overhead,
    uses_record_sets,
)
from walkit.errors import ConfigurationError, CorruptEntryError

records = st.lists(st.binary(max_size=300), min_size=1, max_size=40)
tags = st.one_of(
    st.none(),
    st.builds(
        ProducerTag,
        st.text(min_size=1, max_size=20),
        st.integers(0, 2**64 - 1),
    ),
)


@given(records, st.sampled_from(list(Codec)))
def test_round_trip(items: list[bytes], codec: Codec) -> None:
    entry = encode_record_set(items, codec=codec)
    got = decode_record_set(entry)
    assert got.records == items
    assert got.producers is None
    assert all(type(r) is bytes for r in got.records)
    if codec is Codec.NONE:
        assert len(entry) == envelope_overhead(len(items)) + sum(map(len, items))


@given(st.data())
def test_round_trip_with_producers(data: st.DataObject) -> None:
    items = data.draw(records)
    producers = data.draw(st.lists(tags, min_size=len(items), max_size=len(items)))
    got = decode_record_set(encode_record_set(items, producers=producers))
    assert got.records == items
    if any(p is not None for p in producers):
        assert got.producers == producers
        assert [got.producer(i) for i in range(len(items))] == producers
    else:
        assert got.producers is None


def test_compression_shrinks_repetitive_records() -> None:
    items = [b"the same hundred bytes " * 4 + b"%04d" % i for i in range(500)]
    plain = encode_record_set(items)
    for codec in (Codec.ZSTD, Codec.LZ4):
        packed = encode_record_set(items, codec=codec)
        assert len(packed) < len(plain) / 4
        assert decode_record_set(packed).records == items


def test_old_entries_are_one_record_at_slot_zero() -> None:
    assert not uses_record_sets({})
    assert not uses_record_sets({FORMAT_KEY: b"other"})
    assert uses_record_sets({FORMAT_KEY: FORMAT_RECORD_SETS})
    # An old entry that happens to look like an envelope is still one record.
    envelope = encode_record_set([b"a", b"b"])
    assert entry_records(envelope, record_sets=False).records == [envelope]
    assert entry_records(envelope, record_sets=True).records == [b"a", b"b"]


def test_empty_set_and_bad_codec_names_are_refused() -> None:
    with pytest.raises(ValueError):
        encode_record_set([])
    with pytest.raises(ConfigurationError, match="unknown compression"):
        Codec.parse("gzip")


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        (b"", "shorter than its header"),
        (b"\x03\x00" + struct.pack("<II", 1, 1) + struct.pack("<I", 1) + b"x", "version"),
        (b"\x01\x40" + struct.pack("<II", 1, 1) + struct.pack("<I", 1) + b"x", "flags"),
        (b"\x01\x07" + struct.pack("<II", 1, 1) + struct.pack("<I", 1) + b"x", "flags"),
        (b"\x01\x00" + struct.pack("<II", 0, 0), "count 0"),
        (b"\x01\x00" + struct.pack("<II", 10**9, 1), "does not fit"),
        (b"\x01\x00" + struct.pack("<II", 1, 2) + struct.pack("<I", 1) + b"x", "add up"),
        (b"\x01\x00" + struct.pack("<II", 1, 1) + struct.pack("<I", 1) + b"xy", "body of 2"),
        (b"\x01\x01" + struct.pack("<II", 1, 1) + struct.pack("<I", 1) + b"xx", "zstd"),
        (b"\x01\x08" + struct.pack("<II", 1, 1) + struct.pack("<I", 1), "producer"),
    ],
)
def test_malformed_entries(entry: bytes, match: str) -> None:
    with pytest.raises(CorruptEntryError, match=match):
        decode_record_set(entry)


def test_declared_bodies_are_bounded_and_compressed_bombs_refused() -> None:
    from walkit._core.record_set import MAX_BODY_BYTES

    huge = MAX_BODY_BYTES + 1
    entry = b"\x01\x00" + struct.pack("<II", 1, huge) + struct.pack("<I", huge)
    with pytest.raises(CorruptEntryError, match="over the limit"):
        decode_record_set(entry)
    # A compressed body that inflates past what the header declares is refused, for both codecs.
    for codec in (Codec.ZSTD, Codec.LZ4):
        honest = bytearray(encode_record_set([b"a" * 10], codec=codec))
        bomb = encode_record_set([b"a" * 1_000_000], codec=codec)
        lying = bomb[:2] + struct.pack("<II", 1, 10) + struct.pack("<I", 10) + bomb[14 + 4 :]
        assert len(lying) < 10_000  # a small entry claiming a small body...
        with pytest.raises(CorruptEntryError):  # ...that would inflate to a megabyte
            decode_record_set(lying)
        assert decode_record_set(bytes(honest)).records == [b"a" * 10]


@settings(max_examples=300)
@given(st.binary(max_size=200))
def test_random_bytes_never_raise_anything_but_corrupt_entry(entry: bytes) -> None:
    try:
        decode_record_set(entry)
    except CorruptEntryError:
        pass


@settings(max_examples=200)
@given(records, st.integers(0, 10_000), st.integers(0, 255))
def test_flipped_byte_in_the_header_is_caught_or_harmless(
    items: list[bytes], where: int, value: int
) -> None:
    entry = bytearray(encode_record_set(items, producers=[ProducerTag("p", 1)] * len(items)))
    where %= len(entry)
    entry[where] = value
    try:
        got = decode_record_set(bytes(entry))
    except CorruptEntryError:
        return
    assert len(got.records) >= 1


# --- version 2: keys, headers and timestamps ---------------------------------------------------

timestamps = st.one_of(st.none(), st.integers(0, 2**63 - 1))
keys = st.one_of(st.none(), st.binary(max_size=40))
header_lists = st.one_of(
    st.none(),
    st.lists(st.tuples(st.text(max_size=10), st.binary(max_size=20)), min_size=1, max_size=4).map(
        tuple
    ),
)
extras_items = st.one_of(st.none(), st.tuples(keys, header_lists, timestamps))


@given(st.data(), st.sampled_from(list(Codec)), timestamps)
def test_round_trip_with_keys_headers_and_timestamps(
    data: st.DataObject, codec: Codec, entry_time: int | None
) -> None:
    items = data.draw(records)
    extras = data.draw(st.lists(extras_items, min_size=len(items), max_size=len(items)))
    producers = data.draw(st.lists(tags, min_size=len(items), max_size=len(items)))
    entry = encode_record_set(
        items, producers=producers, codec=codec, timestamp=entry_time, extras=extras
    )
    got = decode_record_set(entry)
    assert got.records == items
    given = [e if e is not None else (None, None, None) for e in extras]
    assert [got.key(i) for i in range(len(items))] == [k for k, _h, _t in given]
    assert [got.record_headers(i) for i in range(len(items))] == [h for _k, h, _t in given]
    assert [got.record_timestamp(i) for i in range(len(items))] == [
        entry_time if t is None else t for _k, _h, t in given
    ]
    needs_v2 = entry_time is not None or any(e is not None and e != (None,) * 3 for e in extras)
    assert entry[0] == (2 if needs_v2 else 1)


def test_records_without_extras_cost_what_they_did() -> None:
    """No key, headers or timestamp: version 1, byte for byte what encode wrote before; the
    writer's clock adds one timestamp per entry (8 bytes), not per record."""
    items = [b"a" * 100] * 50
    plain = encode_record_set(items)
    assert plain[0] == 1
    assert encode_record_set(items, extras=[None] * 50) == plain
    assert encode_record_set(items, extras=[(None, None, None)] * 50) == plain
    stamped = encode_record_set(items, timestamp=1_700_000_000_000)
    assert stamped[0] == 2 and len(stamped) == len(plain) + 8
    got = decode_record_set(stamped)
    assert got.timestamp == 1_700_000_000_000 and got.timestamps is None
    assert got.keys is None and got.headers is None


def test_old_format_entries_read_with_none() -> None:
    """A version 1 entry, as 0.1.0 wrote it (the golden corpus has more), has no key, headers
    or timestamp."""
    entry = b"\x01\x00" + struct.pack("<II", 2, 3) + struct.pack("<II", 1, 2) + b"abc"
    got = decode_record_set(entry)
    assert got.records == [b"a", b"bc"]
    assert (got.timestamp, got.timestamps, got.keys, got.headers) == (None, None, None, None)
    assert got.key(1) is None and got.record_headers(1) is None
    assert got.record_timestamp(0) is None


def _v2(flags: int, count: int, lengths: list[int], tables: bytes, body: bytes) -> bytes:
    head = struct.pack("<BBII", 2, flags, count, len(body))
    return head + struct.pack(f"<{count}I", *lengths) + tables + body


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        (_v2(0x10, 1, [1], b"\x00" * 4, b"x"), "run past|body of"),  # a cut timestamp
        (_v2(0x10, 1, [1], struct.pack("<q", -5), b"x"), "entry timestamp -5"),
        (_v2(0x20, 1, [1], struct.pack("<q", -2), b"x"), "record timestamp -2"),
        (_v2(0x40, 1, [1], struct.pack("<i", -3), b"x"), "key length -3"),
        (_v2(0x40, 1, [1], struct.pack("<i", 5), b"xk"), "add up"),  # key past the body
        (_v2(0x80, 1, [1], struct.pack("<I", 3), b"x\x01\x00\x05"), "headers"),
        (_v2(0x80, 1, [1], struct.pack("<I", 5), b"x\x00\x00zzz"), "left over"),
        (_v2(0x80, 1, [1], struct.pack("<I", 9), b"x\x01\x00\x01\x00\xff\x00\x00\x00\x00"), "bad"),
        (_v2(0x40, 3, [1, 1, 1], b"\x00", b"xyz"), "run past"),
    ],
)
def test_malformed_version_2_entries(entry: bytes, match: str) -> None:
    with pytest.raises(CorruptEntryError, match=match):
        decode_record_set(entry)


def test_bad_keys_headers_and_timestamps_are_refused() -> None:
    from walkit import Record
    from walkit.errors import InvalidArgumentError

    assert Record(b"p", headers={"a": b"1"}).headers == (("a", b"1"),)
    assert Record(b"p", headers=[]).headers is None
    assert Record(bytearray(b"p"), key=memoryview(b"k")).key == b"k"
    for bad in (
        {"key": "text"},
        {"key": 7},
        {"timestamp": -1},
        {"timestamp": 2**63},
        {"timestamp": 1.5},
        {"timestamp": True},
        {"headers": "a=1"},
        {"headers": [("a",)]},
        {"headers": [(1, b"x")]},
        {"headers": [("a", "text")]},
        {"headers": [("\udc00", b"x")]},
        {"headers": [("n" * 70_000, b"x")]},
    ):
        with pytest.raises(InvalidArgumentError):
            Record(b"p", **bad)
    with pytest.raises(InvalidArgumentError, match="must be bytes"):
        Record("text")
    with pytest.raises(ValueError):
        encode_record_set([b"a"], timestamp=-1)
