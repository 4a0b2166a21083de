"""Reading and compare-and-setting log nodes (``/logs/<name>``) in the metadata store.

Every change is a CAS on the node's version; a lost CAS re-reads and asks the pure transition
again (which may refuse: the change no longer applies).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TypeVar

from walkit._core.log_metadata import LogMetadata, check_log_name
from walkit._logging import get_logger
from walkit.errors import NodeExistsError, NoSuchLogError, NoSuchNodeError
from walkit.ledger import ClientContext
from walkit.metadata import LOGS_PATH, Decision, MetadataStore, cas_update

log = get_logger(__name__)

T = TypeVar("T")


def log_path(name: str) -> str:
    return f"{LOGS_PATH}/{check_log_name(name)}"


async def read_log(store: MetadataStore, name: str) -> tuple[LogMetadata, int]:
    """The log's metadata and node version; NoSuchLogError, InvalidMetadataError."""
    path = log_path(name)
    try:
        node = await store.get(path)
    except NoSuchNodeError:
        raise NoSuchLogError(f"no log named {name!r}") from None
    return LogMetadata.from_bytes(name, node.value), node.version


async def fetch_log(context: ClientContext, name: str) -> tuple[LogMetadata, int]:
    """:func:`read_log`, retried while the metadata store is unreachable."""
    return await context.retry_metadata(functools.partial(read_log, context.store, name))


async def list_logs(store: MetadataStore) -> list[str]:
    """The names of every log, sorted."""
    try:
        return await store.children(LOGS_PATH)
    except NoSuchNodeError:
        return []


async def create_or_read(context: ClientContext, md: LogMetadata) -> tuple[LogMetadata, int, bool]:
    """Create the log's node with ``md`` unless it exists; returns (metadata, version, created)."""
    store = context.store
    path = log_path(md.name)
    try:
        version = await context.retry_metadata(functools.partial(store.create, path, md.to_bytes()))
        log.info("log_created", log=md.name)
        return md, version, True
    except NodeExistsError:
        pass
    found, version = await context.retry_metadata(functools.partial(read_log, store, md.name))
    return found, version, False


async def update_log(
    context: ClientContext,
    name: str,
    change: Callable[[LogMetadata], tuple[LogMetadata, T]],
) -> tuple[LogMetadata, int, T]:
    """Read the log, apply ``change`` (pure: returns the new metadata and a result, or raises
    to refuse), CAS it; a lost CAS re-reads and asks ``change`` again. Returns the written
    metadata, its version and ``change``'s result. A ``change`` that returns the metadata
    unchanged writes nothing."""

    def decide(md: LogMetadata) -> Decision[LogMetadata, T]:
        new, result = change(md)
        return Decision(result, None if new == md else new)

    return await cas_log(context, name, "", decide)


async def cas_log(
    context: ClientContext,
    name: str,
    what: str,
    decide: Callable[[LogMetadata], Decision[LogMetadata, T] | Awaitable[Decision[LogMetadata, T]]],
) -> tuple[LogMetadata, int, T]:
    """``cas_update`` of the log's node: read it, ``decide`` (pure, or awaitable when it must
    read something else first, after the log's node), compare-and-set it at the version read.
    ``what`` names the change in errors."""
    return await cas_update(
        f"log {name}: {what}" if what else f"log {name}",
        read=functools.partial(fetch_log, context, name),
        write=functools.partial(write_log, context),
        decide=decide,
        rng=context.rng,
    )


async def write_log(context: ClientContext, md: LogMetadata, version: int) -> int:
    """One CAS of the log's node (MetadataVersionError when it lost; NoSuchLogError when the
    log was deleted)."""
    try:
        return await context.retry_metadata(
            functools.partial(context.store.set, log_path(md.name), md.to_bytes(), version)
        )
    except NoSuchNodeError:
        raise NoSuchLogError(f"log {md.name!r} was deleted") from None
