"""Offloading a log's closed ledgers to its lake (``walkit.lake`` moves the files) (``Log.offload``, the writer's housekeeping,
``walkit log offload``). The steps and why they are safe: :mod:`walkit._core.lake`.

Each step ends at a fault hook (``hook(step, ledger_id)``; tests crash there):

- ``columns``: the table has the lake format's columns and the log's latest schema's (once a
  pass, before its first ledger);
- ``files``: the ledger's data files are written (and fsynced, on a ``file://`` lake);
- ``commit``: the table holds them (or another offloader's);
- ``cas``: the log's metadata records the ledger as offloaded;
- ``bookies``: the bookies' copy is deleted, not yet recorded as gone.

A crash at any step leaves the next pass (any process's) to finish: files are written again
and the stray ones deleted once the table holds the ledger (:func:`walkit.lake._commit.sweep`);
a ledger in the table but not in the metadata is recorded; a deleted bookie copy is recorded.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, TypeVar

import anyio
import attrs
import pyarrow as pa

from walkit._core.lake import LakeLedger, lake_of_file, to_delete_from_bookies, to_offload
from walkit._core.log_metadata import LogLedger, LogMetadata
from walkit._core.record_set import uses_record_sets
from walkit._core.time_search import ledger_time_range
from walkit._logging import get_logger
from walkit.errors import ConfigurationError, InvalidArgumentError, NoSuchLedgerError, WalkitError
from walkit.lake._columns import table_columns
from walkit.lake._commit import commit_ledger, drop_ledgers, drop_table, sweep
from walkit.lake._durable import sync_files
from walkit.lake._errors import lake_error
from walkit.lake._table import Lake, lake_of
from walkit.lake._write import Columns, WrittenFiles, write_files
from walkit.log._store import cas_log, fetch_log
from walkit.metadata import Decision

if TYPE_CHECKING:
    from walkit.log._context import LogContext

log = get_logger(__name__)

__all__ = ["FaultHook", "offload"]

#: ``hook(step, ledger_id)``, awaited after each step (tests raise or die there).
FaultHook = Callable[[str, int], Awaitable[None]]
#: Entries read from the bookies at once while offloading.
READ_CHUNK: Final = 512


async def _no_hook(_step: str, _ledger_id: int) -> None:
    pass


T = TypeVar("T")


async def in_lake(
    owner_name: str,
    lake: Lake,
    action: str,
    fn: Callable[..., T],
    *args: Any,
    ledger_id: int | None = None,
) -> T:
    """``fn(*args)`` in a worker thread, its pyiceberg and pyarrow errors as walkit's
    (``walkit.lake._errors``), naming the log, the ledger and where in the lake."""
    try:
        return await anyio.to_thread.run_sync(fn, *args)
    except Exception as exc:
        found = lake_error(
            exc,
            log=owner_name,
            action=action,
            ledger_id=ledger_id,
            location=lake.data_dir,
            properties=lake.properties,
        )
        if found is exc:
            raise
        raise found from None


def lake_of_handle(owner: LogContext) -> Lake:
    opts = owner.options
    lake = lake_of(owner.name, opts.offload_to, opts.offload_catalog)
    if lake is None:
        raise ConfigurationError(f"log {owner.name} has no offload_to: nothing to offload to")
    return lake


async def offload(
    owner: LogContext, *, respect_age: bool = False, hook: FaultHook | None = None
) -> int:
    """Offload the log's closed ledgers (with ``respect_age``, only those ``offload_after``
    seconds old), delete the bookie copies ``offload_deletion_lag`` seconds after, and clean
    up after earlier crashes. Returns how many ledgers this call recorded as offloaded."""
    metrics = owner._services.context.metrics
    try:
        return await _offload(owner, respect_age=respect_age, hook=hook or _no_hook)
    except BaseException:
        if metrics is not None:
            metrics.lake(owner.name).failures += 1
        raise


async def _offload(owner: LogContext, *, respect_age: bool, hook: FaultHook) -> int:
    lake = lake_of_handle(owner)
    context = owner._services.context
    clock = context.options.wall_clock
    now_ms = int(clock() * 1000) if clock is not None else None
    md, _version = await fetch_log(context, owner.name)
    closed: dict[int, int] = {}
    closed_at: dict[int, int] = {}
    for lg in md.ledgers[:-1]:
        if md.lake_ledger(lg.ledger_id) is not None:
            continue
        try:
            lmd = await owner.client.ledger_metadata(lg.ledger_id)
        except NoSuchLedgerError:
            continue
        if lmd.is_closed:
            closed[lg.ledger_id] = lmd.last_entry_id + 1
            stamped = ledger_time_range(lmd.custom_metadata)
            closed_at[lg.ledger_id] = stamped[1] if stamped is not None else lmd.ctime_ms
    chosen = to_offload(
        [(lg.seq, lg.ledger_id) for lg in md.ledgers],
        closed,
        (x.ledger_id for x in md.offloaded),
        closed_at_ms=closed_at,
        now_ms=now_ms,
        after=owner.options.offload_after if respect_age else None,
    )
    by_id = {lg.ledger_id: lg for lg in md.ledgers}
    done = 0
    if chosen:
        layout = await _layout(lake, md)
        await hook("columns", chosen[0])
    for ledger_id in chosen:
        if await _offload_one(owner, lake, by_id[ledger_id], hook, now_ms, layout):
            done += 1
    left = [closed_at[i] for i in closed if i not in chosen]
    if context.metrics is not None and now_ms is not None:
        oldest = min(left, default=now_ms)
        context.metrics.lake(owner.name).lag_seconds = max(0.0, (now_ms - oldest) / 1000)
    await _delete_from_bookies(owner, hook, now_ms)
    # Last, so that the files of a crashed or lost offload go in this very pass.
    md, _version = await fetch_log(context, owner.name)
    listed = {lg.ledger_id for lg in md.ledgers}
    await in_lake(owner.name, lake, "cleaning up", sweep, lake, listed, (now_ms or 0) / 1000)
    return done


@attrs.frozen
class _Layout:
    """The data files' columns this pass, and how a typed log's values are decoded for them."""

    schema: pa.Schema
    #: payload -> the value as the latest schema's msgspec Struct (None: untyped).
    decode: Callable[[bytes], Any] | None


async def _layout(lake: Lake, md: LogMetadata) -> _Layout:
    """Bring the table's columns up to date (the lake format's, the log's latest schema's)."""
    latest = md.schemas[-1].schema if md.schemas else None
    schema = await in_lake(
        lake.log_name, lake, "updating the table's columns", table_columns, lake, latest
    )
    decode = None
    if latest is not None:
        import msgspec

        from walkit._core.schema_types import struct_of

        decode = msgspec.msgpack.Decoder(struct_of(latest)).decode
    return _Layout(schema, decode)


async def _offload_one(
    owner: LogContext,
    lake: Lake,
    ledger: LogLedger,
    hook: FaultHook,
    now_ms: int | None,
    layout: _Layout,
) -> bool:
    reader = await owner.client.open_ledger(ledger.ledger_id, password=owner.options.password)
    record_sets = uses_record_sets(reader.metadata.custom_metadata)
    columns = Columns(ledger.seq, ledger.ledger_id, ledger.schema)
    last = reader.last_add_confirmed
    size = 0
    first = 0
    while first <= last:
        entries = await reader.read(first, min(last, first + READ_CHUNK - 1))
        size += sum(len(e.payload) for e in entries)
        columns.add(entries, record_sets)
        first = entries[-1].entry_id + 1
    lid = ledger.ledger_id
    written: WrittenFiles = await in_lake(
        owner.name,
        lake,
        "writing data files",
        write_files,
        lake,
        columns,
        layout.schema,
        layout.decode,
        ledger_id=lid,
    )
    # (before the commit: the table must never name a file a power loss can take back)
    await in_lake(
        owner.name, lake, "syncing data files", sync_files, lake.uri, written.files, ledger_id=lid
    )
    await hook("files", ledger.ledger_id)
    files = await in_lake(
        owner.name,
        lake,
        "committing to the table",
        commit_ledger,
        lake,
        lid,
        written.files,
        ledger_id=lid,
    )
    await hook("commit", ledger.ledger_id)
    mine = files == written.files
    record = LakeLedger(
        ledger_id=ledger.ledger_id,
        files=files,
        records=written.records,
        entries=last + 1,
        size=size,
        lake_bytes=written.lake_bytes,
        min_ts=written.min_ts,
        max_ts=written.max_ts,
        time_ms=now_ms or 0,
        ctime_ms=reader.metadata.ctime_ms,
    )
    if not mine:
        # Another offloader's files hold the ledger: drop ours (same records, same counts).
        await in_lake(
            owner.name, lake, "deleting files", _delete_files, lake, written.files, ledger_id=lid
        )

    def decide(current: LogMetadata) -> Decision[LogMetadata, str]:
        if current.ledger_with_seq(ledger.seq) != ledger:
            return Decision("gone")
        if current.lake_ledger(ledger.ledger_id) is not None:
            return Decision("before")
        try:
            return Decision("recorded", current.with_offloaded(record))
        except InvalidArgumentError:
            return Decision("gone")

    _md, _version, outcome = await cas_log(owner._services.context, owner.name, "offload", decide)
    if outcome == "gone":  # truncated meanwhile: the lake must not keep it either
        await in_lake(
            owner.name, lake, "dropping a ledger", drop_ledgers, lake, [lid], files, ledger_id=lid
        )
        return False
    await hook("cas", ledger.ledger_id)
    log.info(
        "log_ledger_offloaded",
        log=owner.name,
        ledger_id=ledger.ledger_id,
        records=written.records,
        lake_bytes=written.lake_bytes,
        files=len(files),
        outcome=outcome,
    )
    metrics = owner._services.context.metrics
    if metrics is not None and outcome == "recorded":
        metrics.lake(owner.name).offloaded(written.lake_bytes, len(files))
    return outcome == "recorded"


def _delete_files(lake: Lake, files: tuple[str, ...]) -> None:
    from walkit.lake._commit import _delete

    for uri in files:
        _delete(lake.io, uri)


async def _delete_from_bookies(owner: LogContext, hook: FaultHook, now_ms: int | None) -> None:
    """Delete the bookie copies of ledgers offloaded ``offload_deletion_lag`` ago, then record
    them as gone (a crash in between: the next pass deletes again and records)."""
    context = owner._services.context
    md, _version = await fetch_log(context, owner.name)
    keep = {lg.ledger_id for lg in md.to_recover()}
    doomed = to_delete_from_bookies(
        md.offloaded, keep, now_ms=now_ms, lag=owner.options.offload_deletion_lag
    )
    for ledger_id in doomed:
        try:
            await owner.client.delete_ledger(ledger_id, password=owner.options.password)
        except NoSuchLedgerError:
            pass
        except WalkitError as exc:
            log.warning(
                "lake_bookie_delete_failed", log=owner.name, ledger_id=ledger_id, error=str(exc)
            )
            continue
        await hook("bookies", ledger_id)

        def decide(current: LogMetadata, ledger_id: int = ledger_id) -> Decision[LogMetadata, None]:
            lake = current.lake_ledger(ledger_id)
            if lake is None or lake.bookies_deleted:
                return Decision(None)
            return Decision(None, current.with_offloaded(attrs.evolve(lake, bookies_deleted=True)))

        await cas_log(context, owner.name, "offload: bookie copy deleted", decide)
        log.info("lake_bookie_copy_deleted", log=owner.name, ledger_id=ledger_id)


async def drop_from_lake(owner: LogContext, dropped: tuple[LakeLedger, ...]) -> None:
    """Remove ledgers that retention dropped from the lake: their rows (whole files), the
    snapshots that named them, the files. A handle without ``offload_to`` leaves them to the
    next offload pass's sweep (they are no longer listed)."""
    opts = owner.options
    lake = lake_of(owner.name, opts.offload_to, opts.offload_catalog)
    if lake is None:
        log.warning(
            "lake_retention_left_files",
            log=owner.name,
            ledgers=[x.ledger_id for x in dropped],
            why="this handle has no offload_to; the next offload pass removes them",
        )
        return
    files = [f for x in dropped for f in x.files]
    ids = [x.ledger_id for x in dropped]
    await in_lake(owner.name, lake, "dropping ledgers", drop_ledgers, lake, ids, files)
    log.info("lake_ledgers_dropped", log=owner.name, ledgers=[x.ledger_id for x in dropped])


async def drop_lake_table(
    name: str, offloaded: tuple[LakeLedger, ...], catalog: dict[str, str] | None
) -> None:
    """A deleted log's lake: its table dropped and its files deleted (the lake is where its
    files are: ``<offload_to>/<table>/data/<file>``). Failures are logged, never raised: the
    log is gone already."""
    offload_to = lake_of_file(offloaded[0].files[0]) if offloaded[0].files else None
    try:
        lake = lake_of(name, offload_to, catalog)
        if lake is None:
            return
        files = [f for x in offloaded for f in x.files]
        await anyio.to_thread.run_sync(drop_table, lake, files)
        log.info("lake_table_dropped", log=name, table=lake.table_name)
    except Exception as exc:  # (pyiceberg's and the object store's errors, not only ours)
        log.warning("lake_table_drop_failed", log=name, error=str(exc))
