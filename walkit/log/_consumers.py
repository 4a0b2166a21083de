"""Consumers' nodes in the metadata store: ``/logs/<log>/consumers/<name>``, children of the
log's own node (as Pulsar keeps a managed ledger's cursors under its node), so that they are
exported, imported and deleted with their log. The model and its decisions are
:mod:`walkit._core.consumers`; every change is a compare-and-set through ``cas_update``.

Registration and retention race: retention reads the log's node, then its consumers, then
compare-and-sets the log's node at the version it read. A registration creates the consumer's
node, then rewrites the log's node (a compare-and-set that moves its version, and marks it as
a log with consumers: format 3, which clients that predate consumers refuse), then reads the
truncation point. So a retention pass either sees the new consumer, or loses
its compare-and-set and decides again, or truncated before the registration read the
truncation point (and the consumer starts after it): records are never deleted under a
consumer that registration reported done.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from walkit._core.consumers import ConsumerState, check_consumer_name
from walkit._core.log_metadata import LogMetadata
from walkit._core.log_position import LogPosition
from walkit._logging import get_logger
from walkit.errors import (
    MetadataVersionError,
    NodeExistsError,
    NodeNotEmptyError,
    NoSuchConsumerError,
    NoSuchLogError,
    NoSuchNodeError,
)
from walkit.log._store import cas_log, log_path
from walkit.metadata import Decision, cas_update

if TYPE_CHECKING:
    from walkit.ledger import ClientContext

log = get_logger(__name__)

__all__ = [
    "commit_consumer",
    "consumer_names",
    "consumer_path",
    "create_consumer",
    "delete_consumer",
    "delete_consumers",
    "read_consumer",
    "read_consumers",
    "touch_log",
    "wall_ms",
]

#: The child of a log's node that holds its consumers.
CONSUMERS: str = "consumers"


def consumers_path(log_name: str) -> str:
    return f"{log_path(log_name)}/{CONSUMERS}"


def consumer_path(log_name: str, name: str) -> str:
    return f"{consumers_path(log_name)}/{check_consumer_name(name)}"


def wall_ms(context: ClientContext) -> int:
    """The client's wall clock in ms (0 without one): consumers' creation and commit times."""
    clock = context.options.wall_clock
    return int(clock() * 1000) if clock is not None else 0


async def consumer_names(context: ClientContext, log_name: str) -> list[str]:
    """The names of the log's consumers, sorted."""
    try:
        return await context.retry_metadata(
            functools.partial(context.store.children, consumers_path(log_name))
        )
    except NoSuchNodeError:
        return []


async def read_consumer(
    context: ClientContext, log_name: str, name: str
) -> tuple[ConsumerState, int]:
    """A consumer's state and node version; NoSuchConsumerError, InvalidMetadataError."""
    path = consumer_path(log_name, name)
    try:
        node = await context.retry_metadata(functools.partial(context.store.get, path))
    except NoSuchNodeError:
        raise NoSuchConsumerError(f"log {log_name} has no consumer named {name!r}") from None
    return ConsumerState.from_bytes(name, node.value), node.version


async def read_consumers(context: ClientContext, log_name: str) -> list[ConsumerState]:
    """Every consumer of the log (those deleted while listed left out); InvalidMetadataError
    for a malformed one."""
    found = []
    for name in await consumer_names(context, log_name):
        try:
            state, _version = await read_consumer(context, log_name, name)
        except NoSuchConsumerError:
            continue
        found.append(state)
    return found


async def touch_log(context: ClientContext, log_name: str) -> LogMetadata:
    """Rewrite the log's node, marked as a log with consumers: its version moves, so that a
    retention pass that read it before fails its compare-and-set and reads the consumers again
    (module docs). Returns the log's metadata as written."""

    def decide(md: LogMetadata) -> Decision[LogMetadata, LogMetadata]:
        new = md.with_consumers()  # (format 3: clients that predate consumers refuse it)
        return Decision(new, new)

    _md, _version, written = await cas_log(context, log_name, "consumer registration", decide)
    return written


async def create_consumer(
    context: ClientContext, log_name: str, state: ConsumerState
) -> tuple[ConsumerState, bool]:
    """Create the consumer's node with ``state`` unless it exists; returns the stored state and
    whether this call created it. NoSuchLogError when the log does not exist."""
    store = context.store
    try:
        await context.retry_metadata(
            functools.partial(store.create, consumers_path(log_name), b"", make_parents=False)
        )
    except NodeExistsError:
        pass
    except NoSuchNodeError:
        raise NoSuchLogError(f"no log named {log_name!r}") from None
    path = consumer_path(log_name, state.name)
    try:
        await context.retry_metadata(
            functools.partial(store.create, path, state.to_bytes(), make_parents=False)
        )
    except NodeExistsError:
        found, _version = await read_consumer(context, log_name, state.name)
        return found, False
    except NoSuchNodeError:  # the log (and its consumers) deleted meanwhile
        raise NoSuchLogError(f"no log named {log_name!r}") from None
    log.info("log_consumer_created", log=log_name, consumer=state.name, at=str(state.position))
    return state, True


async def commit_consumer(
    context: ClientContext, log_name: str, name: str, position: LogPosition
) -> ConsumerState:
    """Move the consumer's position forward to ``position`` (a resume position: everything
    before it is committed); a position at or before the stored one changes nothing. Returns
    the stored state. NoSuchConsumerError when the consumer was deleted."""
    now_ms = wall_ms(context)
    path = consumer_path(log_name, name)

    async def write(state: ConsumerState, version: int) -> int:
        try:
            return await context.retry_metadata(
                functools.partial(context.store.set, path, state.to_bytes(), version)
            )
        except NoSuchNodeError:
            raise NoSuchConsumerError(f"consumer {name} of log {log_name} was deleted") from None

    def decide(state: ConsumerState) -> Decision[ConsumerState, ConsumerState]:
        new = state.committed(position, now_ms)
        return Decision(state, None) if new is None else Decision(new, new)

    _state, _version, stored = await cas_update(
        f"log {log_name}: commit of consumer {name}",
        read=functools.partial(read_consumer, context, log_name, name),
        write=write,
        decide=decide,
        rng=context.rng,
    )
    return stored


async def delete_consumer(context: ClientContext, log_name: str, name: str) -> None:
    """Delete one consumer: retention no longer keeps records for it. NoSuchConsumerError."""
    path = consumer_path(log_name, name)
    try:
        await context.retry_metadata(functools.partial(context.store.delete, path))
    except NoSuchNodeError:
        raise NoSuchConsumerError(f"log {log_name} has no consumer named {name!r}") from None
    log.info("log_consumer_deleted", log=log_name, consumer=name)


async def delete_consumers(context: ClientContext, log_name: str) -> None:
    """Delete every consumer of the log and their directory (before the log's own node, which
    cannot be deleted while it has children). A consumer registered meanwhile makes the
    directory's deletion a lost race (MetadataVersionError: the caller's loop starts over)."""
    for name in await consumer_names(context, log_name):
        try:
            await delete_consumer(context, log_name, name)
        except NoSuchConsumerError:
            pass
    try:
        await context.retry_metadata(
            functools.partial(context.store.delete, consumers_path(log_name))
        )
    except NoSuchNodeError:
        pass
    except NodeNotEmptyError:
        raise MetadataVersionError(
            f"log {log_name}: a consumer was registered during the deletion"
        ) from None
