"""Copying one fragment's entries from surviving replicas to a replacement bookie.

Each entry is read from another bookie of its write set (in the placement policy's read
order), its digest checked, and the exact stored bytes are sent to the replacement as a
recovery add flagged COPY, which a bookie treats as idempotent (the same bytes again are
accepted, other bytes are refused: ENTRY_EXISTS) and writes once, straight into an entry log. Adds go out in entry order on one connection: a bookie takes
an add above the highest entry it has without looking on disk, while one below it (out of order)
costs a lookup. A token bucket keeps the rate under the entries/s and bytes/s limits.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import final

import trio

from walkit._core.digest import DigestManager
from walkit._core.distribution import write_set
from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.rate_limit import TokenBucket
from walkit._core.rereplication import FragmentGap
from walkit._core.types import BookieId
from walkit._core.wire import AddFlag, ReadRequest, ReadResponse, Response, StatusCode
from walkit._logging import get_logger
from walkit.autorecovery._metrics import AutorecoveryMetrics
from walkit.errors import DigestMismatchError, RereplicationError, WalkitError
from walkit.ledger._core import ClientCore

log = get_logger(__name__)

__all__ = ["RateLimiter", "TargetFailedError", "copy_fragment"]


class TargetFailedError(RereplicationError):
    """The replacement did not store the copies (unreachable, refused): heal picks another.
    A bookie that died recently is still registered until its session expires, so the
    placement policy may offer it."""

    def __init__(self, message: str, target: BookieId) -> None:
        super().__init__(message)
        self.target = target


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

    def chunk_entries(self, window: int, average_size: float | None) -> int:
        """Entries to send at once: ``window``, fewer under a bytes/s limit so a chunk is no
        bigger than the bucket's burst (a big chunk is one big journal write on the target,
        which delays the foreground adds that share its fsync)."""
        window = max(1, window)
        burst = self._bytes.burst if self._bytes.rate is not None else None
        if burst is None or not average_size:
            return window
        return max(1, min(window, int(burst // average_size)))


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


@final
class _Acks:
    """Answers to one chunk of recovery adds (``tag`` is the entry id)."""

    def __init__(self, expected: int) -> None:
        self.left = expected
        self.problems: list[str] = []
        self.done = trio.Event()
        if expected == 0:
            self.done.set()

    def _count(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.done.set()

    def on_response(self, tag: int, status: int, msg: Response | None) -> None:
        if status != StatusCode.OK:
            try:
                name = StatusCode(status).name
            except ValueError:
                name = str(status)
            self.problems.append(f"entry {tag}: {name}")
        self._count()

    def on_error(self, tag: int, error: WalkitError) -> None:
        self.problems.append(f"entry {tag}: {error}")
        self._count()


async def _write_chunk(
    core: ClientCore,
    md: LedgerMetadata,
    target: BookieId,
    key: bytes,
    chunk: list[tuple[int, bytes]],
) -> None:
    """Send a chunk of recovery adds in entry order on one connection (so the bookie sees
    them in order, its fast path) and wait for every answer."""
    acks = _Acks(len(chunk))
    conn = core.pool.get(target)
    conn.send_adds(
        md.ledger_id,
        key,
        chunk,
        acks,
        core.options.add_timeout,
        trio.current_time(),
        AddFlag.RECOVERY | AddFlag.COPY,
    )
    await acks.done.wait()
    if acks.problems:
        core.pool.record_failure(target)
        raise TargetFailedError(
            f"ledger {md.ledger_id}: {target} did not store "
            f"{len(acks.problems)} of {len(chunk)} entries ({'; '.join(acks.problems[:3])})",
            target,
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

    Entries go in chunks of ``window`` (fewer under a bytes/s limit): a chunk's reads run at
    once (from any surviving replica), then its writes go out in entry order, pipelined, while
    the next chunk is read.
    ``skip``: bookies not to read from (the lost ones). ``progress(entries, bytes)`` is called
    after each chunk. Raises RereplicationError.
    """
    ids = list(gap.entries(md.ensemble_size, md.write_quorum))
    position = 0
    seen = [0, 0]  # entries and bytes read so far (for the chunk size under a bytes limit)

    def next_chunk() -> list[int]:
        nonlocal position
        average = seen[1] / seen[0] if seen[0] else None
        count = limiter.chunk_entries(window, average)
        chunk = ids[position : position + count]
        position += len(chunk)
        return chunk

    failure: list[WalkitError] = []

    async def read_chunk(chunk: list[int], into: dict[int, bytes]) -> None:
        await limiter.entries(len(chunk))

        async def one(entry_id: int) -> None:
            try:
                packet = await _read_packet(core, md, gap, entry_id, digests, skip)
            except WalkitError as exc:
                failure.append(exc)
                return
            into[entry_id] = packet
            seen[0] += 1
            seen[1] += len(packet)

        async with trio.open_nursery() as nursery:
            for entry_id in chunk:
                nursery.start_soon(one, entry_id)

    async def write_chunk(chunk: list[int], packets: dict[int, bytes]) -> None:
        try:
            await _write_chunk(core, md, target, key, [(e, packets[e]) for e in chunk])
        except WalkitError as exc:
            failure.append(exc)

    copied = 0
    packets: dict[int, bytes] = {}
    chunk = next_chunk()
    if chunk:
        await read_chunk(chunk, packets)
    while chunk:
        if failure:
            raise failure[0]
        size_bytes = sum(len(packets[e]) for e in chunk)
        await limiter.bytes(size_bytes)
        upcoming: dict[int, bytes] = {}
        following = next_chunk()
        async with trio.open_nursery() as nursery:
            if following:
                nursery.start_soon(read_chunk, following, upcoming)
            nursery.start_soon(write_chunk, chunk, packets)
        if failure:
            raise failure[0]
        copied += len(chunk)
        metrics.copied(len(chunk), size_bytes)
        if progress is not None:
            progress(len(chunk), size_bytes)
        chunk, packets = following, upcoming
    log.debug(
        "fragment_copied",
        ledger_id=md.ledger_id,
        first_entry=gap.first_entry,
        bookie_id=str(gap.bookie),
        target=str(target),
        entries=copied,
    )
    return copied
