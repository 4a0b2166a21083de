"""Orphan ledgers: tagged with a log's name (``walkit.log`` in their custom metadata) but not
listed by that log, as data or snapshot.

They are left by a writer killed between creating a ledger and listing it (a roll or a
takeover), by a snapshot whose save died before its compare-and-set, by a bulk job's task
whose ledger was never linked (staged), and by a log deletion that died half-way. Each is
deleted once it was created more than a grace period ago (a live writer lists its ledger within
moments; a bulk job may keep staged ledgers unlinked for as long as it runs, so the grace must
exceed the longest job). The decision is :func:`walkit._core.retention.is_orphan`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, final

import attrs

from walkit._core.log_metadata import LogMetadata
from walkit._core.retention import is_orphan
from walkit._logging import get_logger
from walkit.client import client_services
from walkit.errors import (
    InvalidArgumentError,
    InvalidMetadataError,
    NoSuchLedgerError,
    NoSuchLogError,
    UnauthorizedAccessError,
    WalkitError,
)
from walkit.log._context import KIND_KEY
from walkit.log._passwords import LOG_KEY
from walkit.log._store import fetch_log

if TYPE_CHECKING:
    from walkit.client import Client

log = get_logger(__name__)

__all__ = ["Orphan", "collect_orphans"]

#: Stands for a log whose ledgers cannot be judged.
_UNKNOWN = LogMetadata(name="unknown")


@final
@attrs.frozen
class Orphan:
    """A ledger of a log that the log does not list."""

    ledger_id: int
    log: str
    #: ``data``, ``snapshot``, ``staged`` ("" when untagged).
    kind: str
    ctime_ms: int
    #: Whether it was deleted (False on a dry run, or when the delete failed: see ``error``).
    deleted: bool = False
    error: str | None = None


async def collect_orphans(
    client: Client,
    name: str | None = None,
    *,
    grace: float,
    dry_run: bool = False,
    password: bytes | None = None,
) -> list[Orphan]:
    """Find the orphan ledgers of log ``name`` (None: of every log) created over ``grace``
    seconds ago, and delete them unless ``dry_run``. ``password``: the ledgers' password
    when the log was created with one of its own (default: the one stored with the log; the
    ledgers of a log that no longer exists are deleted without a password check).

    Needs the wall clock (ConfigurationError for a client connected with ``wall_clock=None``): ages come from the
    ledgers' creation times. Ledgers of unknown age are never deleted.
    """
    from walkit.errors import ConfigurationError

    if isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0:
        raise ConfigurationError(f"grace must be a number of seconds >= 0, not {grace!r}")
    context = client_services(client).context
    clock = context.options.wall_clock
    if clock is None:
        raise ConfigurationError(
            "orphan collection needs a wall clock, and this client was connected with "
            "wall_clock=None"
        )
    now_ms = int(clock() * 1000)
    grace_ms = int(grace * 1000)
    wanted = None if name is None else name.encode()
    logs: dict[str, LogMetadata | None] = {}
    found: list[Orphan] = []
    for ledger_id in await client.list_ledgers():
        try:
            lmd = await client.ledger_metadata(ledger_id)
        except NoSuchLedgerError:
            continue
        tag = lmd.custom_metadata.get(LOG_KEY)
        if tag is None or (wanted is not None and tag != wanted):
            continue
        owner = tag.decode("utf-8", "replace")
        if owner not in logs:
            logs[owner] = await _read(client, owner)
        md = logs[owner]
        if md is _UNKNOWN:
            continue
        if not is_orphan(ledger_id, lmd.ctime_ms, md, now_ms=now_ms, grace_ms=grace_ms):
            continue
        kind = lmd.custom_metadata.get(KIND_KEY, b"").decode("utf-8", "replace")
        found.append(Orphan(ledger_id, owner, kind, lmd.ctime_ms))
    if dry_run or not found:
        return found
    # Look at the logs once more right before deleting: a ledger listed since (a slow roll or
    # a link) stays.
    done: list[Orphan] = []
    fresh: dict[str, LogMetadata | None] = {}
    for orphan in found:
        if orphan.log not in fresh:
            fresh[orphan.log] = await _read(client, orphan.log)
        md = fresh[orphan.log]
        if md is _UNKNOWN or (md is not None and orphan.ledger_id in md.ledger_ids()):
            continue
        try:
            older = md is not None and 0 < orphan.ctime_ms < md.ctime_ms
            if (md is None or older) and password is None:
                # The log is gone (a deletion that died half-way), or this ledger belonged to
                # an earlier log of that name: the password went with it. Delete at the
                # metadata level, as whoever reaches the store can.
                await context.retry_metadata(
                    functools.partial(context.ledgers.delete, orphan.ledger_id)
                )
            else:
                pw = password if password is not None else md.config.password  # type: ignore[union-attr]
                await client.delete_ledger(orphan.ledger_id, password=pw)
        except NoSuchLedgerError:
            continue
        except (UnauthorizedAccessError, WalkitError) as exc:
            log.warning("log_orphan_delete_failed", ledger_id=orphan.ledger_id, error=str(exc))
            done.append(attrs.evolve(orphan, error=str(exc)))
            continue
        log.info("log_orphan_deleted", log=orphan.log, ledger_id=orphan.ledger_id, kind=orphan.kind)
        done.append(attrs.evolve(orphan, deleted=True))
    return done


async def _read(client: Client, name: str) -> LogMetadata | None:
    """The log's metadata; None when it does not exist; ``_UNKNOWN`` when its ledgers cannot
    be judged (a malformed node, or a tag that is no log name): they stay."""
    context = client_services(client).context
    try:
        md, _version = await fetch_log(context, name)
    except NoSuchLogError:
        return None
    except (InvalidMetadataError, InvalidArgumentError) as exc:
        log.warning("log_orphans_not_judged", log=name, error=str(exc))
        return _UNKNOWN
    return md
