"""Batch read of raw ledgers: ``.option("ledgers", "all" | "12,15")`` with no path.

For audits of data that is not in a log. Each row is one entry: ``ledger_id, entry_id,
payload, state, custom_metadata``. Closed ledgers are read to their last entry, open ones up to
their LAC as a reader that does not fence sees it (their writers go on undisturbed).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from walkit._core.ledger_metadata import LedgerMetadata
from walkit.spark._options import ReadOptions
from walkit.spark._read_io import Chunk, ledger_state, read_chunks
from walkit.spark._read_plan import Range, pack
from walkit.spark._read_schema import LEDGER_ARROW
from walkit.spark._run import run

__all__ = ["LedgerPartition", "LedgersReader", "custom_metadata_text"]

_MAP_TYPE = LEDGER_ARROW.field("custom_metadata").type


def custom_metadata_text(custom: Mapping[str, bytes]) -> list[tuple[str, str]]:
    """A ledger's custom metadata as text pairs, sorted by key (values decoded as UTF-8;
    bytes that are not UTF-8 as ``\\xNN`` escapes)."""
    return [(key, custom[key].decode("utf-8", "backslashreplace")) for key in sorted(custom)]


class LedgerPartition(InputPartition):
    """One Spark task's share of a ledger read: ranges, and each ledger's state and custom
    metadata (as the driver saw them when it planned)."""

    def __init__(
        self, ranges: tuple[Range, ...], info: dict[int, tuple[str, list[tuple[str, str]]]]
    ) -> None:
        super().__init__(ranges)
        self.ranges = ranges
        self.info = info


def _ledger_batch(chunk: Chunk, state: str, custom: list[tuple[str, str]]) -> pa.RecordBatch:
    entries = chunk.entries
    count = len(entries)
    first = entries[0].entry_id if entries else chunk.range.first
    custom_one = pa.array([custom], _MAP_TYPE)
    return pa.RecordBatch.from_arrays(
        [
            pa.repeat(pa.scalar(chunk.range.ledger_id, pa.int64()), count),
            pa.array(range(first, first + count), pa.int64()),
            pa.array([entry.payload for entry in entries], pa.binary()),
            pa.repeat(pa.scalar(state, pa.string()), count),
            custom_one.take(pa.array([0] * count, pa.int32())),
        ],
        schema=LEDGER_ARROW,
    )


def _read(options: ReadOptions, partition: LedgerPartition) -> Iterator[Any]:
    for chunk in read_chunks(options.connection, partition.ranges):
        if chunk.entries:
            state, custom = partition.info[chunk.range.ledger_id]
            yield _ledger_batch(chunk, state, custom)


class LedgersReader(DataSourceReader):
    """The batch reader of raw ledgers."""

    def __init__(self, options: ReadOptions) -> None:
        assert options.ledgers is not None
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        assert self.options.ledgers is not None
        found: list[tuple[LedgerMetadata, int]] = run(
            ledger_state, self.options.connection, self.options.ledgers
        )
        ranges = [Range(0, md.ledger_id, 0, last) for md, last in found if last >= 0]
        info = {
            md.ledger_id: (md.state.value, custom_metadata_text(md.custom_metadata))
            for md, _last in found
        }
        parts: list[InputPartition] = []
        for group in pack(ranges, self.options.split_entries):
            ids = {rng.ledger_id for rng in group}
            parts.append(LedgerPartition(group, {i: info[i] for i in ids}))
        return parts or [LedgerPartition((), {})]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, LedgerPartition)
        return _read(self.options, partition)
