"""Retention: truncate a log at its retention point (whole ledgers only).

The decision is :func:`walkit._core.retention.retention_point`, held back by the log's
consumers (:func:`walkit._core.consumers.consumer_hold`); this module reads the ledgers'
metadata (record counts, sizes, creation times) and the consumers, moves the truncation point
with a compare-and-set, and deletes the ledgers that left the list. The consumers are read
after the log's node in each round of the compare-and-set, which a consumer's registration
makes lose (see ``walkit.log._consumers``). Run by the log's writer after a roll, after its
takeover and while its log is quiet (in the background), and by ``walkit log retain``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, final

import attrs

from walkit._core.consumers import BacklogQuota, consumer_hold
from walkit._core.log_metadata import LogLedger, LogMetadata, Truncation
from walkit._core.log_position import LogPosition
from walkit._core.retention import LedgerStats, RetentionLimits, ledger_records, retention_point
from walkit._logging import get_logger
from walkit.errors import ClientClosedError, NoSuchLedgerError, WalkitError
from walkit.log._consumers import read_consumers
from walkit.log._store import cas_log, fetch_log
from walkit.metadata import Decision

if TYPE_CHECKING:
    from walkit.log._context import LogContext

log = get_logger(__name__)

__all__ = ["RetentionResult", "apply_retention", "limits_of"]


@final
@attrs.frozen
class RetentionResult:
    """What a retention pass did (or, with ``dry_run``, would do)."""

    #: The new truncation point (None: nothing to drop).
    truncated: LogPosition | None
    #: The ledgers that left the log (deleted unless ``dry_run``).
    dropped: tuple[LogLedger, ...] = ()
    #: Records and payload bytes in them.
    records: int = 0
    size: int = 0
    #: Consumers over the backlog quota that this truncation passed: records they had not
    #: committed are gone (their next read raises ConsumerBackloggedError).
    backlogged: tuple[str, ...] = ()


def limits_of(owner: LogContext) -> RetentionLimits:
    opts = owner.options
    return RetentionLimits(records=opts.retain_records, size=opts.retain_bytes, age=opts.retain_age)


def quota_of(owner: LogContext) -> BacklogQuota:
    opts = owner.options
    return BacklogQuota(records=opts.max_backlog_records, size=opts.max_backlog_bytes)


async def _stats(owner: LogContext, md: LogMetadata) -> list[LedgerStats]:
    """Stats of the listed ledgers up to and including the first open (or missing) one."""
    client = owner.client
    stats: list[LedgerStats] = []
    for lg in md.ledgers:
        lake = md.lake_ledger(lg.ledger_id)
        if lake is not None:  # (its bookie copy may be gone: the offload record says it all)
            stats.append(
                LedgerStats(
                    lg.seq,
                    lg.ledger_id,
                    closed=True,
                    records=lake.records,
                    size=lake.size,
                    ctime_ms=lake.ctime_ms,
                    entries=lake.entries,
                )
            )
            continue
        try:
            lmd = await client.ledger_metadata(lg.ledger_id)
        except NoSuchLedgerError:
            break  # deleted under us (another truncation): decide on what we have
        if not lmd.is_closed:
            stats.append(LedgerStats(lg.seq, lg.ledger_id, closed=False, ctime_ms=lmd.ctime_ms))
            break
        stats.append(
            LedgerStats(
                lg.seq,
                lg.ledger_id,
                closed=True,
                records=ledger_records(lmd.last_entry_id, lmd.custom_metadata),
                size=lmd.length,
                ctime_ms=lmd.ctime_ms,
                entries=lmd.last_entry_id + 1,
            )
        )
    return stats


@final
@attrs.frozen
class _Plan:
    """What one round decided: the truncation and the consumers it passes."""

    truncation: Truncation
    point: LogPosition | None = None
    passed: tuple[str, ...] = ()


async def apply_retention(
    owner: LogContext,
    limits: RetentionLimits | None = None,
    *,
    dry_run: bool = False,
    quota: BacklogQuota | None = None,
) -> RetentionResult:
    """Truncate ``owner``'s log at its retention point for ``limits`` (default: the handle's
    ``retain_*`` options), keeping what its consumers have not committed within ``quota``
    (default: the handle's ``max_backlog_*``), and delete the ledgers behind it. Raises
    NoSuchLogError, MetadataStoreError ...; a ledger that cannot be deleted is left (and
    logged)."""
    limits = limits_of(owner) if limits is None else limits
    quota = quota_of(owner) if quota is None else quota
    if not limits.any:
        return RetentionResult(None)
    context = owner._services.context
    clock = context.options.wall_clock
    now_ms = int(clock() * 1000) if clock is not None else None
    md, _version = await fetch_log(context, owner.name)
    stats = await _stats(owner, md)
    by_seq = {s.seq: s for s in stats}

    async def decide(current: LogMetadata) -> Decision[LogMetadata, _Plan]:
        unchanged: Decision[LogMetadata, _Plan] = Decision(_Plan(Truncation(current, ())))
        consumers = await read_consumers(context, owner.name)  # after ``current``: see above
        hold = consumer_hold(consumers, stats, quota)
        point = retention_point(md, stats, limits, now_ms, hold.keep_from)
        # Only ledgers judged above may go: the list may have changed since (a takeover
        # dropped empty ones, links added some at the end: those are never before point).
        if point is None or point <= current.truncated or point.ledger_seq >= current.next_seq:
            return unchanged
        result = current.truncated_at(point)
        if any(lg.seq not in by_seq for lg in result.dropped):
            return unchanged
        released = {name for name, _records, _size in hold.released}
        passed = tuple(c.name for c in consumers if c.name in released and c.position < point)
        return Decision(_Plan(result, point, passed), result.metadata)

    if dry_run:
        current, _version = await fetch_log(context, owner.name)
        plan = (await decide(current)).result
    else:
        _md, _version, plan = await cas_log(context, owner.name, "retention", decide)
    dropped = plan.truncation.dropped
    if not dropped or plan.point is None:
        return RetentionResult(None)
    if not dry_run:
        log.info(
            "log_retention_truncated",
            log=owner.name,
            at=str(plan.point),
            dropped=[lg.ledger_id for lg in dropped],
        )
        for name in plan.passed:
            log.warning(
                "log_consumer_backlogged",
                log=owner.name,
                consumer=name,
                truncated=str(plan.point),
                max_backlog_records=quota.records,
                max_backlog_bytes=quota.size,
            )
            if context.metrics is not None:
                context.metrics.consumer_released(owner.name, name)
        await owner._ledger_cleanup.delete([lg.ledger_id for lg in dropped], "retention")
        if plan.truncation.dropped_lake:
            from walkit.log._offload import drop_from_lake

            await drop_from_lake(owner, plan.truncation.dropped_lake)
    return RetentionResult(
        plan.point,
        dropped,
        records=sum(by_seq[lg.seq].records for lg in dropped if lg.seq in by_seq),
        size=sum(by_seq[lg.seq].size for lg in dropped if lg.seq in by_seq),
        backlogged=plan.passed,
    )


async def housekeeping(owner: LogContext, *, takeover: bool) -> None:
    """What a writer runs in the background after a roll (offload to the lake, retention) and
    after its takeover (the same, then orphan collection). Never raises: failures are logged, and the next
    roll or takeover tries again."""
    from walkit.log._gc import collect_orphans

    try:
        if owner.options.offload_to is not None:  # (before retention: it may drop the rest)
            from walkit.log._offload import offload

            await offload(owner, respect_age=True)
        if limits_of(owner).any:
            await apply_retention(owner)
        grace = owner.options.orphan_gc_grace
        if (
            takeover
            and grace is not None
            and owner._services.context.options.wall_clock is not None
        ):
            await collect_orphans(
                owner.client, owner.name, grace=grace, password=owner.options.password
            )
    except ClientClosedError:
        pass  # the application closed its client: nothing failed, the next writer goes on
    except WalkitError as exc:
        log.warning("log_housekeeping_failed", log=owner.name, error=str(exc))
    except Exception:  # pragma: no cover - a bug must not take the client down
        log.exception("log_housekeeping_crashed", log=owner.name)
