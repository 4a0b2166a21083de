"""The plan of a compaction, pure: entry-log usage, which logs a pass compacts and in which
batches, and what it reclaimed (the pass itself is ``_entrylog_compactor``'s).

BookKeeper's concepts guide: entries of all ledgers are interleaved in entry logs, so a log can be
removed only when nothing in it is live any more. The index counts, per log, the bytes its entries
still take (see ``_index``); a log whose live bytes are below a threshold of its size is compacted:
its live entries are copied to the current entry log, the index is pointed at the copies, and the
log is removed. The order keeps every live entry readable across a crash at any point:

1. append the copies to the current entry log and ``fdatasync`` it;
2. point the index at them in one synced LMDB transaction (only where it still points at the
   old copy: an entry deleted or stored again meanwhile is left alone);
3. remove the old log only once the index counts nothing in it.

A crash after 1 leaves unindexed copies (garbage the next compaction of that log reclaims);
after 2 the old log holds nothing live and the next pass removes it. The index update is
itself durable, so it is the checkpoint of the moved entries: the journal holds nothing that
could point back at the old log.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import final

import attrs


@final
@attrs.frozen
class EntryLogUsage:
    """One entry log: its size on disk, the bytes of it still live, the ledgers it holds."""

    log_id: int
    size: int
    live: int
    ledgers: int
    #: Bytes of the file's header (its format), which compaction cannot reclaim.
    header: int = 0

    @property
    def ratio(self) -> float:
        """Live fraction of the file after its header (0 for an empty file)."""
        data = self.size - self.header
        return self.live / data if data > 0 else 0.0


@final
@attrs.define
class CompactionResult:
    """What one compaction pass did."""

    #: Logs whose live fraction was below this were compacted (0: only empty logs removed).
    threshold: float
    #: Logs whose live entries were copied elsewhere, then removed.
    logs_compacted: int = 0
    #: Logs removed because nothing in them was live any more.
    logs_removed: int = 0
    entries_moved: int = 0
    bytes_moved: int = 0
    #: Disk space given back: sizes of the removed logs minus the bytes copied out of them.
    bytes_reclaimed: int = 0
    #: Candidates left in place (an entry could not be read back; see the log).
    logs_kept: int = 0

    def to_dict(self) -> dict[str, float | int]:
        return attrs.asdict(self)


def choose(
    usages: Sequence[EntryLogUsage], threshold: float, current: int | None
) -> tuple[list[int], list[int]]:
    """(logs to remove at once, logs to compact, least used first). The log being written
    is never touched."""
    empty = [u.log_id for u in usages if u.live == 0 and u.log_id != current]
    if threshold <= 0:
        return empty, []
    low = sorted(
        (u for u in usages if u.live > 0 and u.log_id != current and u.ratio < threshold),
        key=lambda u: (u.ratio, u.log_id),
    )
    return empty, [u.log_id for u in low]


def batches(
    entries: Sequence[tuple[bytes, bytes]], max_bytes: int, size_of: Callable[[bytes], int]
) -> Iterator[list[tuple[bytes, bytes]]]:
    """Split (key, location) pairs into runs of about ``max_bytes`` (at least one each)."""
    batch: list[tuple[bytes, bytes]] = []
    total = 0
    for item in entries:
        n = size_of(item[1])
        if batch and total + n > max_bytes:
            yield batch
            batch, total = [], 0
        batch.append(item)
        total += n
    if batch:
        yield batch
