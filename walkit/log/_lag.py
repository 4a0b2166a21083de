"""How far each consumer of a log is behind its end (``await log.consumers()``, ``walkit log
consumers``).

Whole closed ledgers count from their metadata (the writer's ``walkit.records`` tag and the
ledger's length). The rest -- the part of a consumer's own ledger after its position, open
ledgers up to their LAC, ledgers closed by a recovery (no record count) -- is read and its
record-set headers counted, at most :data:`SCAN_ENTRIES` entries or :data:`SCAN_BYTES` bytes
per ledger; beyond that the figures are estimated from average entry sizes and say so
(``Lag.exact``), as Pulsar estimates a backlog's size. Each ledger is read once for all
consumers, from the lowest position any of them needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, final

import attrs

from walkit._core.consumers import ConsumerState, Lag, LedgerCounts, lag
from walkit._core.log_metadata import LogLedger, LogMetadata
from walkit._core.log_position import LogPosition
from walkit._core.record_set import HEADER_SIZE, read_header, uses_record_sets
from walkit._core.retention import RECORDS_KEY
from walkit.errors import InvalidMetadataError, NoSuchConsumerError, NoSuchLedgerError
from walkit.log._consumers import consumer_names, read_consumer
from walkit.log._store import fetch_log

if TYPE_CHECKING:
    from walkit.log._context import LogContext

__all__ = ["SCAN_BYTES", "SCAN_ENTRIES", "ConsumerInfo", "consumer_infos"]

#: Entries of one ledger read at most to count records exactly.
SCAN_ENTRIES: Final = 10_000
#: Bytes of one ledger read at most to count records exactly.
SCAN_BYTES: Final = 64 * 1024 * 1024
#: Entries per read while counting.
_SCAN_CHUNK: Final = 256


@final
@attrs.frozen
class ConsumerInfo:
    """One consumer of a log as ``log.consumers()`` reports it."""

    name: str
    #: Where it resumes: every record before it is committed (None: its node is malformed).
    position: LogPosition | None
    #: Records it had not committed were deleted (its position is before the truncation
    #: point): its next read raises ConsumerBackloggedError.
    behind: bool = False
    #: From its position (or the truncation point, when behind) to the log's end.
    lag: Lag = attrs.field(factory=Lag)
    ctime_ms: int = 0
    mtime_ms: int = 0
    #: Why it could not be read (a malformed node), else None.
    error: str | None = None


async def consumer_infos(owner: LogContext) -> list[ConsumerInfo]:
    """Every consumer of ``owner``'s log with its lag, by name."""
    context = owner._services.context
    md, _version = await fetch_log(context, owner.name)
    states: list[ConsumerState] = []
    broken: list[ConsumerInfo] = []
    for name in await consumer_names(context, owner.name):
        try:
            state, _v = await read_consumer(context, owner.name, name)
        except NoSuchConsumerError:
            continue
        except InvalidMetadataError as exc:
            broken.append(ConsumerInfo(name, None, error=str(exc)))
            continue
        states.append(state)
    starts = {s.name: max(s.position, md.truncated) for s in states}
    counts = await _ledger_counts(owner, md, list(starts.values()))
    infos = [
        ConsumerInfo(
            s.name,
            s.position,
            behind=s.position < md.truncated,
            lag=lag(starts[s.name], counts),
            ctime_ms=s.ctime_ms,
            mtime_ms=s.mtime_ms,
        )
        for s in states
    ]
    return sorted([*infos, *broken], key=lambda info: info.name)


async def _ledger_counts(
    owner: LogContext, md: LogMetadata, starts: Sequence[LogPosition]
) -> list[LedgerCounts]:
    counts: list[LedgerCounts] = []
    if not starts:
        return counts
    lowest = min(starts)
    for lg in md.ledgers:
        if lg.seq < lowest.ledger_seq:
            continue
        try:
            counts.append(await _count(owner, lg, starts))
        except NoSuchLedgerError:
            continue  # deleted under us (truncated): nobody reads it any more
    return counts


async def _count(owner: LogContext, lg: LogLedger, starts: Sequence[LogPosition]) -> LedgerCounts:
    reader = await owner.client.open_ledger(lg.ledger_id, password=owner.options.password)
    lmd = reader.metadata
    record_sets = uses_record_sets(lmd.custom_metadata)
    entries = reader.last_add_confirmed + 1
    records: int | None = None
    size: int | None = None
    if lmd.is_closed:
        size = lmd.length
        tag = lmd.custom_metadata.get(RECORDS_KEY)
        if not record_sets:
            records = entries
        elif tag is not None and tag.isdigit():
            records = int(tag)
    # Read from the lowest entry a consumer needs counted: inside its own ledger, or every
    # entry of a ledger whose totals are unknown.
    if records is not None and size is not None:
        needed = [s.entry_id for s in starts if s.ledger_seq == lg.seq and (s.entry_id or s.slot)]
    else:
        needed = [
            s.entry_id if s.ledger_seq == lg.seq else 0 for s in starts if s.ledger_seq <= lg.seq
        ]
    if not needed or min(needed) >= entries:
        return LedgerCounts(lg.seq, entries, records, size)
    first = min(needed)
    per_records: list[int] = []
    per_size: list[int] = []
    read = 0
    entry = first
    while entry < entries and len(per_records) < SCAN_ENTRIES and read < SCAN_BYTES:
        last = min(entries - 1, entry + _SCAN_CHUNK - 1, first + SCAN_ENTRIES - 1)
        for got in await reader.read(entry, last):
            payload = got.payload
            per_records.append(
                read_header(payload)[2] if record_sets and len(payload) >= HEADER_SIZE else 1
            )
            per_size.append(len(payload))
            read += len(payload)
        entry = last + 1
    return LedgerCounts(lg.seq, entries, records, size, first, tuple(per_records), tuple(per_size))
