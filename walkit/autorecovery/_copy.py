"""Copying one fragment's entries from surviving replicas to a replacement bookie.

Each entry is read from another bookie of its write set (in the placement policy's read
order), its digest checked, and the exact stored bytes are sent to the replacement as a
recovery add, which a bookie treats as idempotent: the same bytes again are accepted, other
bytes are refused (ENTRY_EXISTS). A window of entries is in flight; a token bucket keeps the
rate under the entries/s and bytes/s limits.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import final

import trio

from walkit._core.digest import DigestManager
from walkit._core.distribution import write_set
from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.rate_limit import TokenBucket
from walkit._core.rereplication import FragmentGap
from walkit._core.types import BookieId
from walkit._core.wire import AddFlag, AddRequest, ReadRequest, ReadResponse, StatusCode
from walkit._logging import get_logger
from walkit.autorecovery._metrics import AutorecoveryMetrics
from walkit.errors import DigestMismatchError, RereplicationError, WalkitError
from walkit.ledger._core import ClientCore

log = get_logger(__name__)

__all__ = ["RateLimiter", "copy_fragment"]


@final
class RateLimiter:
    """Entries/s and bytes/s limits shared by one worker's copies (trio's clock)."""

    def __init__(self, entries_per_second: float | None, bytes_per_second: float | None) -> None:
        self._entries = TokenBucket(entries_per_second)
        self._bytes = TokenBucket(bytes_per_second)

    async def entries(self, count: int = 1) -> None:
        delay = self._entries.reserve(count, trio.current_time())
        if delay > 0:
            await trio.sleep(delay)

    async def bytes(self, count: int) -> None:
        delay = self._bytes.reserve(count, trio.current_time())
        if delay > 0:
            await trio.sleep(delay)


async def _read_packet(
    core: ClientCore,
    md: LedgerMetadata,
    gap: FragmentGap,
    entry_id: int,
    digests: DigestManager,
    skip: Collection[BookieId],
) -> bytes:
    """The entry's stored bytes from a surviving replica, digest checked."""
    ensemble = gap.ensemble
    ws = [i for i in write_set(entry_id, md.ensemble_size, md.write_quorum) if i != gap.index]
    order = [i for i in core.read_order(ensemble, ws) if ensemble[i] not in skip]
    problems: list[str] = []
    for index in order:
        source = ensemble[index]
        try:
            answer = await core.call(source, lambda rid: ReadRequest(rid, md.ledger_id, entry_id))
        except WalkitError as exc:
            core.pool.record_failure(source)
            problems.append(f"{source}: {exc}")
            continue
        if answer.status == StatusCode.OK and isinstance(answer, ReadResponse):
            try:
                digests.verify(answer.packet, entry_id)
            except DigestMismatchError as exc:
                log.warning(
                    "rereplication_bad_digest",
                    ledger_id=md.ledger_id,
                    entry_id=entry_id,
                    bookie_id=str(source),
                )
                problems.append(f"{source}: {exc}")
                continue
            return answer.packet
        problems.append(f"{source}: {StatusCode(answer.status).name}")
    raise RereplicationError(
        f"ledger {md.ledger_id}: no surviving copy of entry {entry_id} could be read"
        f" ({'; '.join(problems) or 'no other replica in its write set'})"
    )


async def _write_packet(
    core: ClientCore, md: LedgerMetadata, target: BookieId, entry_id: int, key: bytes, packet: bytes
) -> None:
    try:
        answer = await core.call(
            target,
            lambda rid: AddRequest(rid, md.ledger_id, entry_id, key, packet, AddFlag.RECOVERY),
            core.options.add_timeout,
        )
    except WalkitError as exc:
        core.pool.record_failure(target)
        raise RereplicationError(
            f"ledger {md.ledger_id}: could not write entry {entry_id} to {target}: {exc}"
        ) from exc
    if answer.status != StatusCode.OK:
        name = StatusCode(answer.status).name
        raise RereplicationError(
            f"ledger {md.ledger_id}: {target} refused entry {entry_id} ({name})"
        )


async def copy_fragment(
    core: ClientCore,
    md: LedgerMetadata,
    gap: FragmentGap,
    target: BookieId,
    *,
    key: bytes,
    digests: DigestManager,
    limiter: RateLimiter,
    window: int,
    skip: Collection[BookieId],
    metrics: AutorecoveryMetrics,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Copy every entry ``gap`` covers to ``target``; return how many were copied.

    ``skip``: bookies not to read from (the lost ones). ``progress(entries, bytes)`` is called
    after each entry. Raises RereplicationError (the first failure; the rest are cancelled).
    """
    entries: Iterator[int] = gap.entries(md.ensemble_size, md.write_quorum)
    copied = 0
    failure: list[WalkitError] = []

    async def run(cancel: trio.CancelScope) -> None:
        nonlocal copied
        for entry_id in entries:  # shared by every task: each takes the next entry
            await limiter.entries()
            try:
                packet = await _read_packet(core, md, gap, entry_id, digests, skip)
                await limiter.bytes(len(packet))
                await _write_packet(core, md, target, entry_id, key, packet)
            except WalkitError as exc:
                failure.append(exc)
                cancel.cancel()
                return
            copied += 1
            metrics.copied(1, len(packet))
            if progress is not None:
                progress(1, len(packet))

    async with trio.open_nursery() as nursery:
        for _ in range(max(1, window)):
            nursery.start_soon(run, nursery.cancel_scope)
    if failure:
        raise failure[0]
    log.debug(
        "fragment_copied",
        ledger_id=md.ledger_id,
        first_entry=gap.first_entry,
        bookie_id=str(gap.bookie),
        target=str(target),
        entries=copied,
    )
    return copied
