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
        (b"\x02\x00" + struct.pack("<II", 1, 1) + struct.pack("<I", 1) + b"x", "version"),
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
