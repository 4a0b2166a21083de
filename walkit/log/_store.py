"""Reading and compare-and-setting log nodes (``/logs/<name>``) in the metadata store.

Every change is a CAS on the node's version; a lost CAS re-reads and asks the pure transition
again (which may refuse: the change no longer applies).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Final, TypeVar

from walkit._core.backoff import Backoff
from walkit._core.log_metadata import LogMetadata, check_log_name
from walkit._logging import get_logger
from walkit._retry import pause
from walkit.errors import MetadataVersionError, NodeExistsError, NoSuchLogError, NoSuchNodeError
from walkit.ledger import ClientCore
from walkit.metadata import LOGS_PATH, MetadataStore

log = get_logger(__name__)

T = TypeVar("T")

#: Lost CAS rounds in a row before an update gives up (each re-read the node).
#: Pauses after losing a compare-and-set race on the log's node.
CAS_BACKOFF: Final = Backoff(first=0.005, cap=0.2)
MAX_CAS_ROUNDS: Final = 100


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


async def list_logs(store: MetadataStore) -> list[str]:
    """The names of every log, sorted."""
    try:
        return await store.children(LOGS_PATH)
    except NoSuchNodeError:
        return []


async def create_or_read(core: ClientCore, md: LogMetadata) -> tuple[LogMetadata, int, bool]:
    """Create the log's node with ``md`` unless it exists; returns (metadata, version, created)."""
    store = core.store
    path = log_path(md.name)
    try:
        version = await core.retry_metadata(functools.partial(store.create, path, md.to_bytes()))
        log.info("log_created", log=md.name)
        return md, version, True
    except NodeExistsError:
        pass
    found, version = await core.retry_metadata(functools.partial(read_log, store, md.name))
    return found, version, False


async def update_log(
    core: ClientCore,
    name: str,
    change: Callable[[LogMetadata], tuple[LogMetadata, T]],
) -> tuple[LogMetadata, int, T]:
    """Read the log, apply ``change`` (pure: returns the new metadata and a result, or raises
    to refuse), CAS it; a lost CAS re-reads and asks ``change`` again. Returns the written
    metadata, its version and ``change``'s result. A ``change`` that returns the metadata
    unchanged writes nothing."""
    store = core.store
    path = log_path(name)
    for round_ in range(MAX_CAS_ROUNDS):
        md, version = await core.retry_metadata(functools.partial(read_log, store, name))
        new, result = change(md)
        if new == md:
            return md, version, result
        try:
            version = await core.retry_metadata(
                functools.partial(store.set, path, new.to_bytes(), version)
            )
        except MetadataVersionError:
            await pause(CAS_BACKOFF, round_, core.rng)  # let the other writer finish
            continue
        except NoSuchNodeError:
            raise NoSuchLogError(f"log {name!r} was deleted") from None
        return new, version, result
    raise MetadataVersionError(f"log {name}: kept losing compare-and-set races; try again")


async def write_log(core: ClientCore, md: LogMetadata, version: int) -> int:
    """One CAS of the log's node (MetadataVersionError when it lost)."""
    try:
        return await core.retry_metadata(
            functools.partial(core.store.set, log_path(md.name), md.to_bytes(), version)
        )
    except NoSuchNodeError:
        raise NoSuchLogError(f"log {md.name!r} was deleted") from None
