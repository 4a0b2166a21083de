"""Record sets: several log records packed into one ledger entry (DistributedLog's record set).

Small records would otherwise each pay for a whole entry: its framing, its digest, one request
per bookie and an index slot on every bookie. A log ledger created with record sets (its custom
metadata holds ``walkit.format = recordset-1``) stores every entry as this envelope::

    u8   version          1, or 2 for an entry with keys, headers or timestamps
    u8   flags            bits 0-2: codec (0 none, 1 zstd, 2 lz4); bit 3: producers present;
                          version 2 only: bit 4 entry timestamp, bit 5 record timestamps,
                          bit 6 keys, bit 7 headers
    u32  count            records in the entry (>= 1)
    u32  body_length      uncompressed length of the body
    u32  length[count]    each record's (payload's) length
    if producers present:
      u16  names          producer ids in this entry, then for each: u16 length + UTF-8 bytes
      u16  producer[count]  index into the names, 0xFFFF for a record without a producer
      u64  sequence[count]  the record's sequence number for its producer (0 when none)
    if entry timestamp:   i64 timestamp         ms since the epoch: every record's, unless
                                                the record has its own
    if record timestamps: i64 timestamp[count]  -1: the entry's (none, without one)
    if keys:              i32 key_length[count] -1: no key
    if headers:           u32 headers_length[count]  0: no headers
    body                  the payloads back to back, then the keys, then the header blocks,
                          compressed as a whole by the codec

A header block is ``u16 n`` then n times ``u16 name length, UTF-8 name, u32 value length,
value``. All integers are little-endian. Version 1 is version 2 with bits 4-7 clear; a writer
writes version 1 whenever an entry needs nothing newer (so a record without a key, headers or
timestamp costs what it did, and older readers read it: docs/formats.md), and a record's
default timestamp costs 8 bytes per entry, not per record. Ledgers without the format key hold
one record per entry (logs written before record sets): such an entry is the record at slot 0.

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

from walkit._core.record import MAX_TIMESTAMP, Extras, Headers
from walkit.errors import ConfigurationError, CorruptEntryError

__all__ = [
    "FORMAT_KEY",
    "FORMAT_RECORD_SETS",
    "HEADER_SIZE",
    "NO_PRODUCER",
    "Codec",
    "Extras",
    "ProducerTag",
    "RecordSet",
    "decode_record_set",
    "encode_record_set",
    "entry_records",
    "envelope_overhead",
    "pack_lengths",
    "plain_layout",
    "read_header",
    "uses_record_sets",
]

#: Custom metadata key and value that mark a ledger whose entries are record sets.
FORMAT_KEY: Final = "walkit.format"
FORMAT_RECORD_SETS: Final = b"recordset-1"

#: The envelope version written for entries without keys, headers and timestamps.
VERSION: Final = 1
#: The version written for entries with any of them.
VERSION_EXTRAS: Final = 2
_HEAD: Final = struct.Struct("<BBII")
_U16: Final = struct.Struct("<H")
_I64: Final = struct.Struct("<q")
_CODEC_MASK: Final = 0x07
_HAS_PRODUCERS: Final = 0x08
_HAS_TIMESTAMP: Final = 0x10
_HAS_RECORD_TIMESTAMPS: Final = 0x20
_HAS_KEYS: Final = 0x40
_HAS_HEADERS: Final = 0x80
#: The flags each version knows.
_FLAGS: Final = {1: _CODEC_MASK | _HAS_PRODUCERS, 2: 0xFF}
#: A per-record timestamp that says "the entry's"; a key length that says "no key".
_NO_VALUE: Final = -1
#: Bytes an entry's timestamp takes, and the most the tables of keys, headers and
#: timestamps add per record.
TIMESTAMP_BYTES: Final = 8
EXTRAS_PER_RECORD: Final = 8 + 4 + 4
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
    """A decoded entry: its records, and each one's producer tag (None: untagged), key,
    headers and timestamp. A list is None when no record of the entry has one; ``timestamp``
    is the entry's (every record's unless ``timestamps`` says otherwise), and ``timestamps``,
    when present, is every record's, the entry's filled in."""

    records: list[bytes]
    producers: list[ProducerTag | None] | None = None
    timestamp: int | None = None
    timestamps: list[int | None] | None = None
    keys: list[bytes | None] | None = None
    headers: list[Headers | None] | None = None

    def producer(self, slot: int) -> ProducerTag | None:
        return None if self.producers is None else self.producers[slot]

    def record_timestamp(self, slot: int) -> int | None:
        return self.timestamp if self.timestamps is None else self.timestamps[slot]

    def key(self, slot: int) -> bytes | None:
        return None if self.keys is None else self.keys[slot]

    def record_headers(self, slot: int) -> Headers | None:
        return None if self.headers is None else self.headers[slot]


#: Bytes of the fixed header (version, flags, count, body length).
HEADER_SIZE: Final = _HEAD.size


def read_header(entry: bytes | memoryview) -> tuple[int, int, int, int]:
    """(version, flags, count, body_length) of an envelope at least HEADER_SIZE long."""
    version, flags, count, body_length = _HEAD.unpack_from(entry)
    return version, flags, count, body_length


def plain_layout(entry: bytes | memoryview) -> tuple[int, int, int | None] | None:
    """(count, body start, entry timestamp) of an entry laid out plainly: uncompressed, with no
    producers, keys, headers or records' own timestamps (version 1, or 2 with its entry
    timestamp only), whose length table (``count`` u32 at HEADER_SIZE) and body (to the end)
    can be used as they are. None for any other entry, which :func:`decode_record_set` reads
    (and refuses if it is not well formed)."""
    size = len(entry)
    if size < _HEAD.size:
        return None
    version, flags, count, body_length = _HEAD.unpack_from(entry)
    start = _HEAD.size + 4 * count
    timestamp = None
    if (version, flags) == (VERSION_EXTRAS, _HAS_TIMESTAMP):
        if size < start + 8:
            return None
        (timestamp,) = _I64.unpack_from(entry, start)
        start += 8
        if timestamp < 0:
            return None
    elif (version, flags) != (VERSION, 0):
        return None
    if count == 0 or size - start != body_length:
        return None
    return count, start, timestamp


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


def envelope_overhead(count: int, *, producers: int = 0, extras: bool = False) -> int:
    """Bytes the envelope adds to ``count`` records (upper bound with ``producers`` tags of
    at most MAX_PRODUCER_ID bytes; with ``extras``, the tables of keys, headers and record
    timestamps, and the entry's timestamp). Keys and header blocks are not counted: see
    :func:`extras_size`."""
    extra = 0
    if producers:
        extra = 2 + producers * (2 + MAX_PRODUCER_ID) + count * 10
    if extras:
        extra += TIMESTAMP_BYTES + count * EXTRAS_PER_RECORD
    return _HEAD.size + 4 * count + extra


def extras_size(extras: Extras) -> int:
    """Bytes a record's key and headers take in the body (their tables not counted)."""
    key, headers, _timestamp = extras
    size = 0 if key is None else len(key)
    if headers is not None:
        size += 2 + sum(2 + len(name.encode()) + 4 + len(value) for name, value in headers)
    return size


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
    timestamp: int | None = None,
    extras: Sequence[Extras | None] | None = None,
) -> bytes:
    """One entry holding ``records`` (at least one), tagged with ``producers`` if given (one
    tag or None per record), stamped with the entry's ``timestamp`` (ms; None: none), and with
    ``extras`` if given: one (key, headers, timestamp) or None per record, checked by the
    caller (:func:`walkit._core.record.extras_of`). Version 1 unless a timestamp, key or header
    is there."""
    count = len(records)
    if count == 0:
        raise ValueError("a record set holds at least one record")
    lengths = [len(r) for r in records]
    flags = _CODEC_IDS[codec]
    parts = [b"", struct.pack(f"<{count}I", *lengths)]
    if producers is not None and any(p is not None for p in producers):
        if len(producers) != count:
            raise ValueError("one producer tag (or None) per record")
        flags |= _HAS_PRODUCERS
        parts.append(_encode_producers(producers))
    body = [b"".join(records)]
    if timestamp is not None:
        if not 0 <= timestamp <= MAX_TIMESTAMP:
            raise ValueError(f"an entry timestamp is 0 .. 2^63-1 ms, not {timestamp}")
        flags |= _HAS_TIMESTAMP
        parts.append(_I64.pack(timestamp))
    if extras is not None and any(e is not None for e in extras):
        if len(extras) != count:
            raise ValueError("one (key, headers, timestamp) or None per record")
        flags |= _encode_extras(extras, parts, body)
    payload = b"".join(body) if len(body) > 1 else body[0]
    version = VERSION if flags < _HAS_TIMESTAMP else VERSION_EXTRAS
    parts[0] = _HEAD.pack(version, flags, count, len(payload))
    parts.append(payload if codec is Codec.NONE else _functions(codec)[0](payload))
    return b"".join(parts)


def _encode_extras(extras: Sequence[Extras | None], tables: list[bytes], body: list[bytes]) -> int:
    """Append the tables of record timestamps, keys and headers to ``tables`` and the keys and
    header blocks to ``body``; return their flags."""
    none: Extras = (None, None, None)
    items = [none if e is None else e for e in extras]
    count = len(items)
    flags = 0
    times = [_NO_VALUE if t is None else t for _k, _h, t in items]
    if any(t != _NO_VALUE for t in times):
        flags |= _HAS_RECORD_TIMESTAMPS
        tables.append(struct.pack(f"<{count}q", *times))
    keys = [k for k, _h, _t in items]
    if any(k is not None for k in keys):
        flags |= _HAS_KEYS
        tables.append(
            struct.pack(f"<{count}i", *(_NO_VALUE if k is None else len(k) for k in keys))
        )
        body.extend(k for k in keys if k is not None)
    blocks = [b"" if h is None else _encode_headers(h) for _k, h, _t in items]
    if any(blocks):
        flags |= _HAS_HEADERS
        tables.append(struct.pack(f"<{count}I", *map(len, blocks)))
        body.extend(blocks)
    return flags


def _encode_headers(headers: Headers) -> bytes:
    out = [_U16.pack(len(headers))]
    for name, value in headers:
        raw = name.encode()
        out.append(struct.pack("<H", len(raw)) + raw + struct.pack("<I", len(value)) + value)
    return b"".join(out)


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
    return _decode(entry, _FLAGS[1])


def _decode_v2(entry: bytes) -> RecordSet:
    return _decode(entry, _FLAGS[2])


def _decode(entry: bytes, known_flags: int) -> RecordSet:
    size = len(entry)
    _version, flags, count, body_length = _HEAD.unpack_from(entry)
    codec = _CODECS_BY_ID.get(flags & _CODEC_MASK)
    if codec is None or flags & ~known_flags:
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
    producers = None
    if flags & _HAS_PRODUCERS:
        producers, offset = _decode_producers(entry, offset, count)
    tables = None
    if flags & ~(_CODEC_MASK | _HAS_PRODUCERS):
        tables, offset = _read_tables(entry, offset, count, flags)
    values_length = sum(lengths)
    extra_length = 0 if tables is None else tables.body_bytes
    if values_length + extra_length != body_length:
        raise CorruptEntryError("record set: the record lengths do not add up to the body")
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
    if tables is None:
        return RecordSet(records, producers)
    return tables.record_set(records, producers, body, offset + values_length)


@final
class _Tables:
    """The version 2 tables of one entry: its timestamp, and each record's timestamp, key
    length and headers length."""

    __slots__ = ("body_bytes", "headers", "keys", "times", "timestamp")

    def __init__(
        self,
        timestamp: int | None,
        times: tuple[int, ...] | None,
        keys: tuple[int, ...] | None,
        headers: tuple[int, ...] | None,
    ) -> None:
        self.timestamp = timestamp
        self.times = times
        self.keys = keys
        self.headers = headers
        self.body_bytes = sum(k for k in keys if k > 0) if keys is not None else 0
        if headers is not None:
            self.body_bytes += sum(headers)

    def record_set(
        self,
        records: list[bytes],
        producers: list[ProducerTag | None] | None,
        body: bytes,
        offset: int,
    ) -> RecordSet:
        """The entry, its keys and header blocks read from ``body`` at ``offset``."""
        timestamps = None
        if self.times is not None:
            entry = self.timestamp
            timestamps = [entry if t == _NO_VALUE else t for t in self.times]
        keys: list[bytes | None] | None = None
        if self.keys is not None:
            keys = []
            for length in self.keys:
                if length == _NO_VALUE:
                    keys.append(None)
                else:
                    keys.append(body[offset : offset + length])
                    offset += length
        headers: list[Headers | None] | None = None
        if self.headers is not None:
            headers = []
            for length in self.headers:
                headers.append(_decode_headers(body[offset : offset + length]) if length else None)
                offset += length
        return RecordSet(records, producers, self.timestamp, timestamps, keys, headers)


def _read_tables(entry: bytes, offset: int, count: int, flags: int) -> tuple[_Tables, int]:
    try:
        timestamp = times = keys = headers = None
        if flags & _HAS_TIMESTAMP:
            (timestamp,) = _I64.unpack_from(entry, offset)
            offset += 8
            if timestamp < 0:
                raise CorruptEntryError(f"record set: entry timestamp {timestamp}")
        if flags & _HAS_RECORD_TIMESTAMPS:
            times = struct.unpack_from(f"<{count}q", entry, offset)
            offset += 8 * count
            if min(times) < _NO_VALUE:
                raise CorruptEntryError(f"record set: record timestamp {min(times)}")
        if flags & _HAS_KEYS:
            keys = struct.unpack_from(f"<{count}i", entry, offset)
            offset += 4 * count
            if min(keys) < _NO_VALUE:
                raise CorruptEntryError(f"record set: key length {min(keys)}")
        if flags & _HAS_HEADERS:
            headers = struct.unpack_from(f"<{count}I", entry, offset)
            offset += 4 * count
    except struct.error:
        raise CorruptEntryError(
            f"record set: the tables of {count} records run past the entry"
        ) from None
    return _Tables(timestamp, times, keys, headers), offset


def _decode_headers(block: bytes) -> Headers | None:
    size = len(block)
    try:
        (n,) = _U16.unpack_from(block, 0)
        offset = 2
        pairs = []
        for _ in range(n):
            (length,) = _U16.unpack_from(block, offset)
            offset += 2
            name = block[offset : offset + length].decode()
            offset += length
            (length,) = struct.unpack_from("<I", block, offset)
            offset += 4
            if offset + length > size:
                raise CorruptEntryError("record set: a header value runs past its block")
            pairs.append((name, block[offset : offset + length]))
            offset += length
    except (struct.error, UnicodeDecodeError) as exc:
        raise CorruptEntryError(f"record set: bad headers: {exc}") from None
    if offset != size:
        raise CorruptEntryError("record set: a header block has bytes left over")
    return tuple(pairs) or None


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
#: adds its decoder here, and writers keep writing the oldest version that holds an entry
#: (docs/formats.md).
_DECODERS: Final[dict[int, Callable[[bytes], RecordSet]]] = {1: _decode_v1, 2: _decode_v2}
