"""Record sets: several log records packed into one ledger entry (DistributedLog's record set).

Small records would otherwise each pay for a whole entry: its framing, its digest, one request
per bookie and an index slot on every bookie. A log ledger created with record sets (its custom
metadata holds ``walkit.format = recordset-1``) stores every entry as this envelope::

    u8   version          1
    u8   flags            bits 0-2: codec (0 none, 1 zstd, 2 lz4); bit 3: producers present
    u32  count            records in the entry (>= 1)
    u32  body_length      uncompressed length of the body (the sum of the lengths)
    u32  length[count]    each record's length
    if producers present:
      u16  names          producer ids in this entry, then for each: u16 length + UTF-8 bytes
      u16  producer[count]  index into the names, 0xFFFF for a record without a producer
      u64  sequence[count]  the record's sequence number for its producer (0 when none)
    body                  the records back to back, compressed as a whole by the codec

All integers are little-endian. Ledgers without the format key hold one record per entry
(logs written before record sets): such an entry is the record at slot 0.

Pure code: no I/O. Compression uses ``zstandard`` or ``lz4`` when installed (the
``compression`` extra); decoding an entry whose codec is not installed raises a clear error.
"""

from __future__ import annotations

import enum
import itertools
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Final, final

import attrs

from walkit.errors import ConfigurationError, CorruptEntryError

__all__ = [
    "FORMAT_KEY",
    "FORMAT_RECORD_SETS",
    "HEADER_SIZE",
    "NO_PRODUCER",
    "Codec",
    "ProducerTag",
    "RecordSet",
    "decode_record_set",
    "encode_record_set",
    "entry_records",
    "envelope_overhead",
    "pack_lengths",
    "read_header",
    "uses_record_sets",
]

#: Custom metadata key and value that mark a ledger whose entries are record sets.
FORMAT_KEY: Final = "walkit.format"
FORMAT_RECORD_SETS: Final = b"recordset-1"

#: The envelope version this walkit writes.
VERSION: Final = 1
_HEAD: Final = struct.Struct("<BBII")
_U16: Final = struct.Struct("<H")
_CODEC_MASK: Final = 0x07
_HAS_PRODUCERS: Final = 0x08
NO_PRODUCER: Final = 0xFFFF
#: Longest producer id, in UTF-8 bytes.
MAX_PRODUCER_ID: Final = 255
#: Largest body (records, uncompressed) an entry may declare: a bound on what a (compressed)
#: entry can make a reader allocate.
MAX_BODY_BYTES: Final = 64 * 1024 * 1024


class Codec(enum.Enum):
    """How an entry's body is compressed."""

    NONE = "none"
    ZSTD = "zstd"
    LZ4 = "lz4"

    @classmethod
    def parse(cls, value: str | Codec) -> Codec:
        if isinstance(value, Codec):
            return value
        try:
            return cls(value)
        except ValueError:
            raise ConfigurationError(
                f"unknown compression {value!r} (known: none, zstd, lz4)"
            ) from None


_CODEC_IDS: Final = {Codec.NONE: 0, Codec.ZSTD: 1, Codec.LZ4: 2}
_CODECS_BY_ID: Final = {v: k for k, v in _CODEC_IDS.items()}


@final
@attrs.frozen
class ProducerTag:
    """An idempotent producer's id and the record's sequence number for it."""

    producer_id: str
    sequence: int


@final
@attrs.frozen
class RecordSet:
    """A decoded entry: its records, and each one's producer tag (None: untagged)."""

    records: list[bytes]
    producers: list[ProducerTag | None] | None = None

    def producer(self, slot: int) -> ProducerTag | None:
        return None if self.producers is None else self.producers[slot]


#: Bytes of the fixed header (version, flags, count, body length).
HEADER_SIZE: Final = _HEAD.size


def read_header(entry: bytes | memoryview) -> tuple[int, int, int, int]:
    """(version, flags, count, body_length) of an envelope at least HEADER_SIZE long."""
    version, flags, count, body_length = _HEAD.unpack_from(entry)
    return version, flags, count, body_length


def pack_lengths(lengths: Sequence[int]) -> bytes:
    """A length table as the envelope stores it (u32 little-endian each)."""
    return struct.pack(f"<{len(lengths)}I", *lengths)


def uses_record_sets(custom_metadata: Mapping[str, bytes]) -> bool:
    """Whether a ledger with this custom metadata stores record sets."""
    return custom_metadata.get(FORMAT_KEY) == FORMAT_RECORD_SETS


def entry_records(payload: bytes, record_sets: bool) -> RecordSet:
    """The records of an entry of a log ledger (``record_sets``: see :func:`uses_record_sets`;
    otherwise the entry is one record)."""
    if record_sets:
        return decode_record_set(payload)
    return RecordSet([payload])


def envelope_overhead(count: int, *, producers: int = 0) -> int:
    """Bytes the envelope adds to ``count`` records (upper bound with ``producers`` tags of
    at most MAX_PRODUCER_ID bytes)."""
    extra = 0
    if producers:
        extra = 2 + producers * (2 + MAX_PRODUCER_ID) + count * 10
    return _HEAD.size + 4 * count + extra


def check_codec_available(codec: Codec) -> None:
    """ConfigurationError when the codec's package is not installed."""
    if codec is not Codec.NONE:
        _functions(codec)


_Compress = Callable[[bytes], bytes]
_Decompress = Callable[[bytes, int], bytes]


def _functions(codec: Codec) -> tuple[_Compress, _Decompress]:
    try:
        if codec is Codec.ZSTD:
            import zstandard

            def zstd_decompress(data: bytes, n: int) -> bytes:
                # Read at most n + 1 bytes, whatever size the frame claims (no allocation on
                # the frame's word).
                with zstandard.ZstdDecompressor().stream_reader(data) as reader:
                    out: bytes = reader.read(n + 1)
                return out

            return zstandard.compress, zstd_decompress
        import lz4.frame

        def lz4_decompress(data: bytes, n: int) -> bytes:
            # At most n bytes (+1 to notice more): a frame claiming less cannot blow up memory.
            out: bytes = lz4.frame.LZ4FrameDecompressor().decompress(data, max_length=n + 1)
            return out

        return lz4.frame.compress, lz4_decompress
    except ImportError:
        package = "zstandard" if codec is Codec.ZSTD else "lz4"
        raise ConfigurationError(
            f"compression {codec.value} needs the {package} package "
            "(pip install 'walkit[compression]')"
        ) from None


def _decompress(codec: Codec, body: bytes, length: int) -> bytes:
    decompress = _functions(codec)[1]
    try:
        out = decompress(body, length)
    except Exception as exc:  # the codec's own error types
        raise CorruptEntryError(
            f"record set: the {codec.value} body does not decompress: {exc}"
        ) from None
    return bytes(out)


def encode_record_set(
    records: Sequence[bytes],
    *,
    producers: Sequence[ProducerTag | None] | None = None,
    codec: Codec = Codec.NONE,
) -> bytes:
    """One entry holding ``records`` (at least one), tagged with ``producers`` if given (one
    tag or None per record)."""
    count = len(records)
    if count == 0:
        raise ValueError("a record set holds at least one record")
    lengths = [len(r) for r in records]
    body = b"".join(records)
    flags = _CODEC_IDS[codec]
    parts = [b"", struct.pack(f"<{count}I", *lengths)]
    if producers is not None and any(p is not None for p in producers):
        if len(producers) != count:
            raise ValueError("one producer tag (or None) per record")
        flags |= _HAS_PRODUCERS
        parts.append(_encode_producers(producers))
    parts[0] = _HEAD.pack(VERSION, flags, count, len(body))
    parts.append(body if codec is Codec.NONE else _functions(codec)[0](body))
    return b"".join(parts)


def _encode_producers(producers: Sequence[ProducerTag | None]) -> bytes:
    names: dict[str, int] = {}
    refs: list[int] = []
    seqs: list[int] = []
    for tag in producers:
        if tag is None:
            refs.append(NO_PRODUCER)
            seqs.append(0)
            continue
        ref = names.setdefault(tag.producer_id, len(names))
        refs.append(ref)
        seqs.append(tag.sequence)
    table = [_U16.pack(len(names))]
    for name in names:
        raw = name.encode()
        table.append(_U16.pack(len(raw)) + raw)
    count = len(producers)
    table.append(struct.pack(f"<{count}H", *refs))
    table.append(struct.pack(f"<{count}Q", *seqs))
    return b"".join(table)


def decode_record_set(entry: bytes) -> RecordSet:
    """The records of one entry; CorruptEntryError if it is not a well-formed record set."""
    size = len(entry)
    if size < _HEAD.size:
        raise CorruptEntryError(f"record set: {size} bytes is shorter than its header")
    decoder = _DECODERS.get(entry[0])
    if decoder is None:
        known = ", ".join(str(v) for v in sorted(_DECODERS))
        raise CorruptEntryError(
            f"record set: unknown version {entry[0]} (this walkit reads {known}; a newer "
            "walkit wrote it)"
        )
    return decoder(entry)


def _decode_v1(entry: bytes) -> RecordSet:
    size = len(entry)
    _version, flags, count, body_length = _HEAD.unpack_from(entry)
    codec = _CODECS_BY_ID.get(flags & _CODEC_MASK)
    if codec is None or flags & ~(_CODEC_MASK | _HAS_PRODUCERS):
        raise CorruptEntryError(f"record set: unknown flags {flags:#x}")
    offset = _HEAD.size
    if count == 0 or offset + 4 * count > size:
        raise CorruptEntryError(f"record set: count {count} does not fit in {size} bytes")
    lengths = struct.unpack_from(f"<{count}I", entry, offset)
    offset += 4 * count
    if body_length > MAX_BODY_BYTES:
        raise CorruptEntryError(
            f"record set: a body of {body_length} bytes is over the limit of {MAX_BODY_BYTES}"
        )
    if sum(lengths) != body_length:
        raise CorruptEntryError("record set: the record lengths do not add up to the body")
    producers = None
    if flags & _HAS_PRODUCERS:
        producers, offset = _decode_producers(entry, offset, count)
    if codec is Codec.NONE:
        if size - offset != body_length:
            raise CorruptEntryError(
                f"record set: body of {size - offset} bytes, header says {body_length}"
            )
        body = entry
    else:
        body = _decompress(codec, entry[offset:], body_length)
        if len(body) != body_length:
            raise CorruptEntryError("record set: the body decompresses to the wrong length")
        offset = 0
    ends = itertools.accumulate(lengths, initial=offset)
    starts = itertools.accumulate(lengths, initial=offset)
    next(ends)
    records = [body[start:end] for start, end in zip(starts, ends, strict=False)]
    return RecordSet(records, producers)


def _decode_producers(
    entry: bytes, offset: int, count: int
) -> tuple[list[ProducerTag | None], int]:
    size = len(entry)
    try:
        (n_names,) = _U16.unpack_from(entry, offset)
        offset += 2
        names: list[str] = []
        for _ in range(n_names):
            (length,) = _U16.unpack_from(entry, offset)
            offset += 2
            if offset + length > size:
                raise CorruptEntryError("record set: a producer id runs past the entry")
            names.append(entry[offset : offset + length].decode())
            offset += length
        refs = struct.unpack_from(f"<{count}H", entry, offset)
        offset += 2 * count
        seqs = struct.unpack_from(f"<{count}Q", entry, offset)
        offset += 8 * count
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptEntryError(f"record set: bad producer table: {exc}") from None
    tags: list[ProducerTag | None] = []
    for ref, seq in zip(refs, seqs, strict=True):
        if ref == NO_PRODUCER:
            tags.append(None)
        elif ref < n_names:
            tags.append(ProducerTag(names[ref], seq))
        else:
            raise CorruptEntryError(f"record set: producer index {ref} of {n_names}")
    return tags, offset


#: A decoder for every envelope version this walkit reads. Every version keeps the meaning of
#: the fixed header (version, flags, count, body length: :func:`read_header`); a new version
#: adds its decoder here, and writers keep writing version 1 for entries that need nothing
#: newer (docs/formats.md).
_DECODERS: Final[dict[int, Callable[[bytes], RecordSet]]] = {1: _decode_v1}
