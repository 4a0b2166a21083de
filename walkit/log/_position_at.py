"""``Log.position_at(timestamp)``: the position of the log's first record at or after a time.

The search (:mod:`walkit._core.time_search`) bisects the log's ledgers, then the entries of
one ledger, reading one ledger's metadata or one entry per step: about log2(ledgers) +
log2(entries) reads, never a scan. This module only opens ledgers and reads the entries it
asks for. Nothing is fenced: an open ledger is searched up to its LAC.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final

from walkit._core.lake import LakeLedger
from walkit._core.log_metadata import LogLedger, LogMetadata
from walkit._core.log_position import LogPosition
from walkit._core.record import check_timestamp
from walkit._core.record_set import RecordSet, entry_records, uses_record_sets
from walkit._core.time_search import Bisection, first_slot_at, ledger_time_range, max_timestamp
from walkit._logging import get_logger
from walkit.errors import InvalidMetadataError, NoSuchLedgerError
from walkit.ledger import LedgerReader
from walkit.log._store import fetch_log

if TYPE_CHECKING:
    from walkit.log._context import LogContext

log = get_logger(__name__)

__all__ = ["position_at"]

#: Searches started again because a ledger was deleted under them (truncation, retention).
_ROUNDS: Final = 10


async def position_at(owner: LogContext, timestamp: int) -> LogPosition:
    """The position of the first record whose timestamp is ``timestamp`` or later (ms since
    the epoch), or the log's end (where the next record will go) when there is none; never
    before the truncation point."""
    at = check_timestamp(timestamp)
    for _round in range(_ROUNDS):
        md, _version = await fetch_log(owner._services.context, owner.name)
        try:
            found = await _search(owner, md, at)
        except NoSuchLedgerError:
            continue  # a ledger left the log under us: look again
        return max(found, md.truncated)
    raise InvalidMetadataError(
        f"log {owner.name}: its ledgers kept changing during a search by time ({_ROUNDS} rounds)"
    )


async def _search(owner: LogContext, md: LogMetadata, at: int) -> LogPosition:
    ledgers = md.ledgers
    readers: dict[int, LedgerReader] = {}

    async def reader_of(ledger: LogLedger) -> LedgerReader:
        if ledger.ledger_id not in readers:
            readers[ledger.ledger_id] = await owner.client.open_ledger(
                ledger.ledger_id, password=owner.options.password
            )
        return readers[ledger.ledger_id]

    over_ledgers = Bisection(0, len(ledgers))
    while not over_ledgers.done:
        probed = ledgers[over_ledgers.probe]
        lake = md.lake_ledger(probed.ledger_id)
        if lake is not None:  # offloaded: its record holds the range
            greatest = lake.max_ts
        else:
            greatest = await _ledger_max(await reader_of(probed))
        over_ledgers.tell(greatest is not None and greatest >= at)
    if over_ledgers.result == len(ledgers):
        return await _end(md, reader_of)
    ledger = ledgers[over_ledgers.result]
    lake = md.lake_ledger(ledger.ledger_id)
    if lake is not None:
        return await _in_lake(owner, ledger, lake, at)
    reader = await reader_of(ledger)
    over_entries = Bisection(0, _last_entry(reader) + 1)
    found: tuple[int, RecordSet] | None = None
    while not over_entries.done:
        entry_id = over_entries.probe
        entries = await _entry(reader, entry_id)
        greatest = max_timestamp(entries)
        holds = greatest is not None and greatest >= at
        if holds:
            found = (entry_id, entries)
        over_entries.tell(holds)
    if found is None or found[0] != over_entries.result:
        # The ledger's recorded range said yes, its entries no (timestamps out of order):
        # what follows the ledger is at or after the time, as far as the search can tell.
        return LogPosition(ledger.seq, _last_entry(reader) + 1)
    entry_id, entries = found
    slot = first_slot_at(entries, at)
    assert slot is not None  # (its greatest timestamp is at or after ``at``)
    log.debug("log_position_at", log=owner.name, at=at, seq=ledger.seq, entry_id=entry_id)
    return LogPosition(ledger.seq, entry_id, slot)


async def _in_lake(owner: LogContext, ledger: LogLedger, lake: LakeLedger, at: int) -> LogPosition:
    """The first record at or after ``at`` of an offloaded ledger: a scan of its files'
    position and timestamp columns (a few column chunks, not the payloads)."""
    import anyio

    from walkit.lake._errors import lake_error
    from walkit.lake._read import first_at

    opts = owner.options
    try:
        found = await anyio.to_thread.run_sync(
            first_at, owner.name, opts.offload_to, opts.offload_catalog, lake, at
        )
    except Exception as exc:
        error = lake_error(
            exc,
            log=owner.name,
            action="reading",
            ledger_id=lake.ledger_id,
            file=", ".join(lake.files),
            reading=True,
            properties=opts.offload_catalog,
        )
        if error is exc:
            raise
        raise error from None
    if found is None:
        return LogPosition(ledger.seq, lake.entries)
    return LogPosition(ledger.seq, found[0], found[1])


def _last_entry(reader: LedgerReader) -> int:
    """The last entry a reader that does not fence may read."""
    return reader.last_add_confirmed


async def _ledger_max(reader: LedgerReader) -> int | None:
    """The greatest timestamp of a ledger's records: from its close's tag, else the greatest
    of its last entry's (None: no records, or none with a timestamp)."""
    if reader.is_closed:
        recorded = ledger_time_range(reader.metadata.custom_metadata)
        if recorded is not None:
            return recorded[1]
    last = _last_entry(reader)
    if last < 0:
        return None
    return max_timestamp(await _entry(reader, last))


async def _entry(reader: LedgerReader, entry_id: int) -> RecordSet:
    (entry,) = await reader.read(entry_id, entry_id)
    return entry_records(entry.payload, uses_record_sets(reader.metadata.custom_metadata))


async def _end(
    md: LogMetadata, reader_of: Callable[[LogLedger], Awaitable[LedgerReader]]
) -> LogPosition:
    """Where the next record will go: after the last readable entry of the last ledger."""
    last = md.last
    if last is None:
        return LogPosition(md.next_seq, 0)
    reader = await reader_of(last)
    return LogPosition(last.seq, _last_entry(reader) + 1)
