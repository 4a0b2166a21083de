"""Chunks of log entries as Arrow record batches: one row per record.

An entry of a record-set ledger holds several records (:mod:`walkit._core.record_set`). The
envelope's length table and body are already laid out as Arrow wants a binary column (lengths,
then the bytes back to back), so an uncompressed record set becomes rows without any Python
per record: the length tables and bodies of a chunk's entries are joined into one offsets and
one data buffer, and the per-record columns (entry id, slot, position) are computed by Arrow
kernels. Entries stamped with a timestamp only (what a writer with a clock writes) take the
same path, the timestamp repeated over the entry's rows by a kernel. Compressed entries, and
entries with producer tags, keys, headers or their own records' timestamps, are decoded by the
record-set module first; entries of older ledgers are one record each (no key, headers or
timestamp).
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Sequence
from typing import Final

import attrs
import pyarrow as pa
import pyarrow.compute as pc

from walkit._core.record_set import (
    HEADER_SIZE,
    RecordSet,
    decode_record_set,
    pack_lengths,
    plain_layout,
)
from walkit._core.types import Entry
from walkit.errors import CorruptEntryError
from walkit.spark._read_io import Chunk
from walkit.spark._read_schema import HEADERS_ARROW, TIMESTAMP_ARROW, log_rows
from walkit.spark._values import ValueColumn

__all__ = ["EntryExtras", "log_batch", "record_set_payloads"]

#: The fast path hands the envelope's little-endian length table to Arrow as it is.
_LITTLE: Final = sys.byteorder == "little"


@attrs.frozen
class EntryExtras:
    """Per entry of a chunk: its timestamp (None: none), and the decoded record set when its
    records have keys, headers or timestamps of their own (None: they have none)."""

    timestamps: list[int | None]
    decoded: list[RecordSet | None]

    @property
    def any_decoded(self) -> bool:
        return any(d is not None for d in self.decoded)


def record_set_payloads(
    entries: Sequence[Entry],
) -> tuple[pa.BinaryArray, list[int], EntryExtras]:
    """The records of record-set entries as one binary array, each entry's count, and what
    the entries say of their records' keys, headers and timestamps."""
    counts: list[int] = []
    tables: list[bytes | memoryview] = []
    bodies: list[bytes | memoryview] = []
    body_ends: list[int] = []
    extras = EntryExtras([], [])
    total = 0
    head = HEADER_SIZE
    for entry in entries:
        payload = entry.payload
        size = len(payload)
        if size < head:
            raise CorruptEntryError(
                f"entry {entry.entry_id} of ledger {entry.ledger_id}: {size} bytes is shorter "
                "than a record set's header"
            )
        layout = plain_layout(payload) if _LITTLE else None
        if layout is not None:
            count, start, stamp = layout
            body_length = size - start
            view = memoryview(payload)
            tables.append(view[head : head + 4 * count])
            bodies.append(view[start:])
            extras.timestamps.append(stamp)
            extras.decoded.append(None)
        else:  # compressed, tagged, or not well formed: the record-set module decides
            try:
                decoded = decode_record_set(payload)
            except CorruptEntryError as exc:
                raise CorruptEntryError(
                    f"entry {entry.entry_id} of ledger {entry.ledger_id}: {exc}"
                ) from None
            records = decoded.records
            count = len(records)
            body_length = sum(len(r) for r in records)
            tables.append(pack_lengths([len(r) for r in records]))
            bodies.append(b"".join(records))
            extras.timestamps.append(decoded.timestamp)
            own = decoded.keys, decoded.headers, decoded.timestamps
            extras.decoded.append(None if own == (None, None, None) else decoded)
        counts.append(count)
        total += body_length
        body_ends.append(total)
    n = sum(counts)
    lengths = pa.UInt32Array.from_buffers(pa.uint32(), n, [None, pa.py_buffer(b"".join(tables))])
    ends = pc.cumulative_sum(lengths.cast(pa.int64()))
    # Each entry's lengths must add up to its body (else records would spill across entries).
    last_rows = pc.subtract(pa.array(list(itertools.accumulate(counts)), pa.int64()), 1)
    boundaries = pc.take(ends, last_rows)
    if boundaries.to_pylist() != body_ends:
        raise CorruptEntryError(
            f"ledger {entries[0].ledger_id}: the record lengths of an entry in "
            f"{entries[0].entry_id}..{entries[-1].entry_id} do not add up to its body"
        )
    offsets = pa.concat_arrays([pa.array([0], pa.int64()), ends]).cast(pa.int32())
    data = pa.py_buffer(b"".join(bodies))
    payloads = pa.BinaryArray.from_buffers(pa.binary(), n, [None, offsets.buffers()[1], data])
    return payloads, counts, extras


def _extra_columns(
    extras: EntryExtras | None, counts: list[int], parents: pa.Array | None, rows: int
) -> list[pa.Array]:
    """The ``key``, ``headers`` and ``timestamp`` columns of a chunk's rows (``parents``: each
    row's entry index). Python per record only for entries whose records have their own."""
    if extras is None or parents is None:  # older ledgers' entries: none of them
        return [pa.nulls(rows, pa.binary()), pa.nulls(rows, HEADERS_ARROW), _nulls_ts(rows)]
    if not extras.any_decoded:
        per_entry = pa.array(extras.timestamps, pa.int64())
        times = pc.take(per_entry, parents) if rows else per_entry.slice(0, 0)
        return [pa.nulls(rows, pa.binary()), pa.nulls(rows, HEADERS_ARROW), _as_timestamps(times)]
    keys: list[bytes | None] = []
    headers: list[list[dict[str, object]] | None] = []
    stamps: list[int | None] = []
    for count, stamp, decoded in zip(counts, extras.timestamps, extras.decoded, strict=True):
        if decoded is None:
            keys.extend([None] * count)
            headers.extend([None] * count)
            stamps.extend([stamp] * count)
            continue
        for slot in range(count):
            keys.append(decoded.key(slot))
            pairs = decoded.record_headers(slot)
            headers.append(None if pairs is None else [{"key": k, "value": v} for k, v in pairs])
            stamps.append(decoded.record_timestamp(slot))
    return [
        pa.array(keys, pa.binary()),
        pa.array(headers, HEADERS_ARROW),
        _as_timestamps(pa.array(stamps, pa.int64())),
    ]


def _as_timestamps(ms: pa.Array) -> pa.Array:
    """Milliseconds (int64) as Spark's timestamps (microseconds, UTC); nulls stay null."""
    return pc.multiply(ms, pa.scalar(1000, pa.int64())).cast(TIMESTAMP_ARROW)


def _nulls_ts(rows: int) -> pa.Array:
    return pa.nulls(rows, TIMESTAMP_ARROW)


def log_batch(name: str, chunk: Chunk, values: ValueColumn | None = None) -> pa.RecordBatch:
    """One chunk of entries as rows of the log schema, cut at the range's slots; with
    ``values``, a typed log's ``value`` column last (:mod:`walkit.spark._values`)."""
    rng, entries = chunk.range, chunk.entries
    first = entries[0].entry_id if entries else rng.first
    extras: EntryExtras | None = None
    parents: pa.Array | None = None
    if rng.record_sets and entries:
        payloads, counts, extras = record_set_payloads(entries)
        rows = len(payloads)
        starts = pa.array(list(itertools.accumulate(counts, initial=0))[:-1], pa.int64())
        parents = pc.list_parent_indices(
            pa.ListArray.from_arrays(
                pa.array(list(itertools.accumulate(counts, initial=0)), pa.int32()),
                pa.nulls(rows, pa.int8()),
            )
        )
        entry_ids = pc.add(parents, pa.scalar(first, pa.int64()))
        ordinals = pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), rows)), 1)
        slots = pc.subtract(ordinals, pc.take(starts, parents))
    else:
        payloads = pa.array([entry.payload for entry in entries], pa.binary())
        counts = [1] * len(entries)
        rows = len(entries)
        entry_ids = pa.array(range(first, first + rows), pa.int64())
        slots = pa.repeat(pa.scalar(0, pa.int64()), rows)
    batch = log_rows(
        name,
        rng,
        entry_ids,
        slots,
        payloads,
        _extra_columns(extras, counts, parents, rows),
        values,
    )
    if not entries:
        return batch
    # The range's slot cuts: records before first_slot of its first entry, and from end_slot
    # on of its last entry, are not in it.
    low = min(rng.first_slot, counts[0]) if first == rng.first else 0
    high = rows
    if entries[-1].entry_id == rng.last and rng.end_slot is not None:
        high = rows - max(0, counts[-1] - rng.end_slot)
    if low == 0 and high == rows:
        return batch
    return batch.slice(low, max(0, high - low))
