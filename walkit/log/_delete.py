"""Deleting a log: its node, its ledgers, its snapshots.

Order matters for the log's users:

1. the log's consumers are deleted, then the log's node (a compare-and-set on the version
   read, so the ledger list is exact; a consumer registered meanwhile is a lost race too): from
   then on, readers that look at the log and writers that roll or check their
   ownership get NoSuchLogError, and a new ``Log.open`` creates a new, empty log;
2. the last two ledgers are fenced (recovered), so that a writer in the middle of an append
   fails at once: it finds its log gone and reports NoSuchLogError;
3. every ledger the log listed (data and snapshots) is deleted.

A deletion that dies half-way leaves ledgers tagged with the log's name that no log lists:
``walkit log gc`` deletes them (they are orphans).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Final

from walkit._core.log_metadata import LogMetadata, check_log_name
from walkit._logging import get_logger
from walkit.client import client_services
from walkit.errors import (
    MetadataVersionError,
    NodeNotEmptyError,
    NoSuchLedgerError,
    NoSuchLogError,
    NoSuchNodeError,
    WalkitError,
)
from walkit.log._consumers import delete_consumers
from walkit.log._store import fetch_log, log_path
from walkit.metadata import Decision, cas_update

if TYPE_CHECKING:
    from walkit.client import Client

log = get_logger(__name__)

__all__ = ["delete_log"]

#: Compare-and-set rounds lost to the log's writer before giving up.
DELETE_ATTEMPTS: Final = 50


async def delete_log(
    client: Client,
    name: str,
    *,
    password: bytes | None = None,
    offload_catalog: dict[str, str] | None = None,
) -> list[int]:
    """Delete log ``name`` with its ledgers and snapshots; returns the ids of the ledgers it
    listed. ``password``: the ledgers' password if the log was created with one of its own
    (default: the one stored with the log). Raises NoSuchLogError."""
    check_log_name(name)
    context = client_services(client).context
    path = log_path(name)

    async def delete(md: LogMetadata, version: int) -> int:
        await delete_consumers(context, name)
        try:
            await context.retry_metadata(functools.partial(context.store.delete, path, version))
        except NoSuchNodeError:
            raise NoSuchLogError(f"no log named {name!r}") from None
        except NodeNotEmptyError:
            raise MetadataVersionError(
                f"log {name}: a consumer was registered during the deletion"
            ) from None
        return version

    # A lost race means the writer rolled (or a snapshot was saved, or a consumer was
    # registered): read the list again.
    md, _version, _ = await cas_update(
        f"log {name}: delete",
        read=functools.partial(fetch_log, context, name),
        write=delete,
        decide=lambda md: Decision(None, md),
        rng=context.rng,
        rounds=DELETE_ATTEMPTS,
    )
    pw = md.config.password if password is None else password
    log.info("log_deleted", log=name, ledgers=len(md.ledgers), snapshots=len(md.snapshots))
    for lg in md.to_recover():
        try:  # fence the writer (if any): its next append fails and finds the log gone
            await client.open_ledger(lg.ledger_id, password=pw, recovery=True)
        except NoSuchLedgerError:
            pass
        except WalkitError as exc:
            log.warning("log_delete_fence_failed", log=name, ledger_id=lg.ledger_id, error=str(exc))
    ids = [lg.ledger_id for lg in md.ledgers] + [s.ledger_id for s in md.snapshots]
    for ledger_id in ids:
        try:
            await client.delete_ledger(ledger_id, password=pw)
        except NoSuchLedgerError:
            pass
        except WalkitError as exc:  # left for `walkit log gc`
            log.warning("log_delete_ledger_failed", log=name, ledger_id=ledger_id, error=str(exc))
    if md.offloaded:
        from walkit.log._offload import drop_lake_table

        await drop_lake_table(name, md.offloaded, offload_catalog)
    return ids
