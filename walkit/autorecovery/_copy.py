"""Copying one fragment's entries from surviving replicas to a replacement bookie.

Each entry is read from another bookie of its write set (in the placement policy's read
order), its digest checked, and the exact stored bytes are sent to the replacement as a
recovery add flagged COPY, which a bookie treats as idempotent (the same bytes again are
accepted, other bytes are refused: ENTRY_EXISTS) and writes once, straight into an entry log.
Adds go out in entry order on one connection: a bookie takes an add above the highest entry it
has without looking on disk, while one below it (out of order) costs a lookup. A token bucket
keeps the rate under the entries/s and bytes/s limits.

A worker that runs inside a bookie is given that bookie's :class:`LocalCopies`: copies it
makes to its own bookie are handed to the bookie's storage in the same process (the checks
and the storing of a COPY add, without the network hop and its two copies through the
kernel).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import final

import anyio

from walkit._core.digest import DigestManager
from walkit._core.distribution import write_set
from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.rate_limit import TokenBucket
from walkit._core.rereplication import (
    FragmentCopies,
    FragmentGap,
    LocalCopies,
    batch_entries,
    plan_batch_answer,
)
from walkit._core.types import BookieId
from walkit._core.wire import (
    AddFlag,
    BatchReadResponse,
    ReadResponse,
    Response,
    StatusCode,
    encode_batch_read_request,
    encode_read_request,
    status_name,
)
from walkit._logging import get_logger
from walkit.autorecovery._metrics import AutorecoveryMetrics
from walkit.errors import DigestMismatchError, RereplicationError, WalkitError
from walkit.ledger._context import ClientContext

log = get_logger(__name__)

_OK = int(StatusCode.OK)
#: Entries one batch read asks for, and the bytes its answer may hold (bookies cap it at
#: 1 MiB): reads of ledgers whose bookies hold every entry go in batches (BP-62), a request
#: and an answer per 16 entries instead of per entry.
_BATCH_ENTRIES = 16
_BATCH_BYTES = 1024 * 1024
#: A fragment's first chunk, doubling up to the window: the first adds go out after a few
#: reads, not after a whole window of them (every fragment rereplicated at once waited ~0.2 s).
_FIRST_CHUNK = 8

__all__ = ["FragmentCopies", "LocalCopies", "RateLimiter", "TargetFailedError", "copy_fragment"]


class TargetFailedError(RereplicationError):
    """The replacement did not store the copies (unreachable, refused): the rereplicator picks another.
    A bookie that died recently is still registered until its session expires, so the
    placement policy may offer it."""

    def __init__(self, message: str, target: BookieId) -> None:
        super().__init__(message)
        self.target = target


@final
class RateLimiter:
    """Entries/s and bytes/s limits shared by one worker's copies (the event loop's clock)."""

    def __init__(self, entries_per_second: float | None, bytes_per_second: float | None) -> None:
        self._entries = TokenBucket(entries_per_second)
        self._bytes = TokenBucket(bytes_per_second)

    async def entries(self, count: int = 1) -> None:
        delay = self._entries.reserve(count, anyio.current_time())
        if delay > 0:
            await anyio.sleep(delay)

    async def bytes(self, count: int) -> None:
        delay = self._bytes.reserve(count, anyio.current_time())
        if delay > 0:
            await anyio.sleep(delay)

    def chunk_entries(self, window: int, average_size: float | None) -> int:
        """Entries to send at once: ``window``, fewer under a bytes/s limit so a chunk is no
        bigger than the bucket's burst (a big chunk is one big journal write on the target,
        which delays the foreground adds that share its fsync)."""
        window = max(1, window)
        burst = self._bytes.burst if self._bytes.rate is not None else None
        if burst is None or not average_size:
            return window
        return max(1, min(window, int(burst // average_size)))


@final
class _ChunkReads:
    """Reads one chunk's entries from surviving replicas, with no task per entry: each answer
    is checked where it arrives (status, digest) and a failed read moves on to the next
    replica of the entry's write set from there (``tag`` is the entry id)."""

    def __init__(
        self,
        context: ClientContext,
        md: LedgerMetadata,
        gap: FragmentGap,
        digests: DigestManager,
        skip: Collection[BookieId],
        into: dict[int, bytes],
        per_batch: int = _BATCH_ENTRIES,
    ) -> None:
        self._context = context
        self._per_batch = per_batch  # entries asked in one batch read
        self._md = md
        self._ensemble = gap.ensemble
        self._lost_index = gap.index
        self._digests = digests
        self._skip = skip
        self._into = into
        self._sources: dict[int, list[BookieId]] = {}  # entry -> replicas not asked yet
        self._asked: dict[int, BookieId] = {}
        self._problems: dict[int, list[str]] = {}
        self._orders: dict[int, list[BookieId]] = {}  # by the write set's first slot
        self.left = 0
        self.failure: RereplicationError | None = None
        self.done = anyio.Event()

    def start(self, entry_ids: list[int]) -> None:
        md = self._md
        self.left = len(entry_ids)
        if not entry_ids:
            self.done.set()
        batches = md.ensemble_size == md.write_quorum  # every replica holds every entry
        run: list[int] = []
        for entry_id in entry_ids:
            order = self._order(entry_id)
            if not batches:
                self._sources[entry_id] = list(order)
                self._next(entry_id)
                continue
            if run and (entry_id != run[-1] + 1 or len(run) == self._per_batch):
                self._batch(run, list(self._order(run[0])))
                run = []
            run.append(entry_id)
        if run:
            self._batch(run, list(self._order(run[0])))

    def _order(self, entry_id: int) -> list[BookieId]:
        """The replicas to read ``entry_id`` from, in the placement policy's order."""
        md = self._md
        first_slot = entry_id % md.ensemble_size
        order = self._orders.get(first_slot)
        if order is None:
            ws = write_set(entry_id, md.ensemble_size, md.write_quorum)
            ws = [i for i in ws if i != self._lost_index]
            ensemble = self._ensemble
            order = [
                ensemble[i]
                for i in self._context.read_order(ensemble, ws)
                if ensemble[i] not in self._skip
            ]
            self._orders[first_slot] = order
        return order

    def _batch(self, run: list[int], sources: list[BookieId]) -> None:
        """Read the consecutive entries ``run`` from ``sources[0]`` in one batch read; on
        failure each goes on alone to the next replicas (``_batch_failed``)."""
        if not sources:
            return self._batch_failed(run, sources, "")
        source = sources[0]
        try:
            conn = self._context.pool.get(source)
        except WalkitError as exc:
            return self._batch_failed(run, sources, f"{source}: {exc}")
        rid = conn.new_request_id()
        frame = encode_batch_read_request(rid, self._md.ledger_id, run[0], len(run), _BATCH_BYTES)
        answer = _BatchAnswer(self, run, sources)
        conn.send((frame,), rid, answer, run[0], self._context.options.read_timeout)
        return None

    def _batch_failed(self, run: list[int], sources: list[BookieId], problem: str) -> None:
        if self.failure is not None:
            return
        for entry_id in run:
            if problem:
                self._problems.setdefault(entry_id, []).append(problem)
            self._sources[entry_id] = list(sources[1:])
            self._next(entry_id)

    def _got(self, entry_id: int, packet: bytes) -> None:
        self._into[entry_id] = packet
        self.left -= 1
        if self.left == 0:
            self.done.set()

    def _next(self, entry_id: int) -> None:
        sources = self._sources[entry_id]
        if not sources:
            problems = self._problems.get(entry_id)
            self._fail(
                RereplicationError(
                    f"ledger {self._md.ledger_id}: no surviving copy of entry {entry_id} could "
                    f"be read ({'; '.join(problems or []) or 'no other replica in its write set'})"
                )
            )
            return
        source = sources.pop(0)
        self._asked[entry_id] = source
        try:
            conn = self._context.pool.get(source)
        except WalkitError as exc:
            self._problem(entry_id, f"{source}: {exc}")
            return
        rid = conn.new_request_id()
        frame = encode_read_request(rid, self._md.ledger_id, entry_id)
        conn.send((frame,), rid, self, entry_id, self._context.options.read_timeout)

    def _problem(self, entry_id: int, problem: str) -> None:
        self._problems.setdefault(entry_id, []).append(problem)
        if self.failure is None:
            self._next(entry_id)

    def _fail(self, error: RereplicationError) -> None:
        if self.failure is None:
            self.failure = error
            self.done.set()

    def on_response(self, tag: int, status: int, msg: Response | None) -> None:
        source = self._asked[tag]
        if status != _OK or not isinstance(msg, ReadResponse):
            self._problem(tag, f"{source}: {status_name(status)}")
            return
        try:
            self._digests.check(msg.packet, tag)
        except DigestMismatchError as exc:
            self._bad_digest(tag, source)
            self._problem(tag, f"{source}: {exc}")
            return
        self._got(tag, msg.packet)

    def _bad_digest(self, entry_id: int, source: BookieId) -> None:
        log.warning(
            "rereplication_bad_digest",
            ledger_id=self._md.ledger_id,
            entry_id=entry_id,
            bookie_id=str(source),
        )

    def on_error(self, tag: int, error: WalkitError) -> None:
        source = self._asked[tag]
        self._context.pool.record_failure(source)
        self._problem(tag, f"{source}: {error}")


@final
class _BatchAnswer:
    """The answer to one batch read of ``_ChunkReads``: entries checked as they come. An
    entry missing or bad there goes on alone to the next replicas, and the entries after it
    are asked of the same replica again (as are those a short answer left out); an error
    (the connection, the bookie) sends every entry of the batch to the next replicas."""

    __slots__ = ("_reads", "_run", "_sources")

    def __init__(self, reads: _ChunkReads, run: list[int], sources: list[BookieId]) -> None:
        self._reads = reads
        self._run = run
        self._sources = sources

    def on_response(self, tag: int, status: int, msg: Response | None) -> None:
        reads, run, sources = self._reads, self._run, self._sources
        if reads.failure is not None:
            return
        source = sources[0]
        batch = msg if isinstance(msg, BatchReadResponse) else None

        def bad(entry_id: int, packet: bytes) -> str | None:
            try:
                reads._digests.check(packet, entry_id)
            except DigestMismatchError as exc:
                reads._bad_digest(entry_id, source)
                return str(exc)
            return None

        plan = plan_batch_answer(
            run,
            status_name(status),
            None if batch is None else batch.first_entry_id,
            () if batch is None else batch.packets,
            bad,
        )
        for entry_id, packet in plan.got:
            reads._got(entry_id, packet)
        onward = [source, *sources] if plan.same_first else sources
        for entry_id, why in plan.alone:
            reads._batch_failed([entry_id], onward, f"{source}: {why}" if why else "")
        if plan.again and reads.failure is None:
            reads._batch(plan.again, sources)

    def on_error(self, tag: int, error: WalkitError) -> None:
        reads, source = self._reads, self._sources[0]
        reads._context.pool.record_failure(source)
        reads._batch_failed(self._run, self._sources, f"{source}: {error}")


@final
class _Acks:
    """Answers to one chunk of recovery adds (``tag`` is the entry id)."""

    def __init__(self, expected: int) -> None:
        self.left = expected
        self.problems: list[str] = []
        self.done = anyio.Event()
        if expected == 0:
            self.done.set()

    def _count(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.done.set()

    def on_response(self, tag: int, status: int, msg: Response | None) -> None:
        if status != _OK:
            self.problems.append(f"entry {tag}: {status_name(status)}")
        self._count()

    def on_error(self, tag: int, error: WalkitError) -> None:
        self.problems.append(f"entry {tag}: {error}")
        self._count()


async def _write_chunk(
    context: ClientContext,
    md: LedgerMetadata,
    target: BookieId,
    key: bytes,
    chunk: list[tuple[int, bytes]],
    local: LocalCopies | None,
) -> None:
    """Send a chunk of recovery adds in entry order on one connection (so the bookie sees
    them in order, its fast path) and wait for every answer; or store it in ``local``."""
    if local is not None and target == local.bookie_id:
        problems = await local.store(md.ledger_id, key, chunk)
        if problems:
            raise TargetFailedError(
                f"ledger {md.ledger_id}: this bookie ({target}) did not store "
                f"{len(problems)} of {len(chunk)} entries ({'; '.join(problems[:3])})",
                target,
            )
        return
    acks = _Acks(len(chunk))
    conn = context.pool.get(target)
    conn.send_adds(
        md.ledger_id,
        key,
        chunk,
        acks,
        context.options.add_timeout,
        anyio.current_time(),
        AddFlag.RECOVERY | AddFlag.COPY,
    )
    await acks.done.wait()
    if acks.problems:
        context.pool.record_failure(target)
        raise TargetFailedError(
            f"ledger {md.ledger_id}: {target} did not store "
            f"{len(acks.problems)} of {len(chunk)} entries ({'; '.join(acks.problems[:3])})",
            target,
        )


async def copy_fragment(
    context: ClientContext,
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
    local: LocalCopies | None = None,
) -> int:
    """Copy every entry ``gap`` covers to ``target``; return how many were copied.

    Entries go in chunks of ``window`` (fewer under a bytes/s limit, and the first chunks
    smaller: 8, 8, 16, 32, ... entries, so the first adds start early): a chunk's reads run at
    once (from any surviving replica), then its writes go out in entry order, pipelined, while
    the next chunk is read.
    ``skip``: bookies not to read from (the lost ones). ``progress(entries, bytes)`` is called
    after each chunk. ``local``: the bookie this worker runs in (copies to it stay in the
    process). Raises RereplicationError.
    """
    ids = list(gap.entries(md.ensemble_size, md.write_quorum))
    position = 0
    seen = [0, 0]  # entries and bytes read so far (for the chunk size under a bytes limit)

    def average() -> float | None:
        return seen[1] / seen[0] if seen[0] else None

    def per_batch() -> int:
        return batch_entries(average(), _BATCH_ENTRIES, _BATCH_BYTES)

    def next_chunk() -> list[int]:
        nonlocal position
        count = limiter.chunk_entries(window, average())
        count = min(count, max(_FIRST_CHUNK, position))
        batch = per_batch()
        if count > batch:
            count -= count % batch  # whole batches: no short one at each chunk's end
        chunk = ids[position : position + count]
        position += len(chunk)
        return chunk

    failure: list[WalkitError] = []

    async def read_chunk(chunk: list[int], into: dict[int, bytes]) -> None:
        await limiter.entries(len(chunk))
        reads = _ChunkReads(context, md, gap, digests, skip, into, per_batch())
        reads.start(chunk)
        await reads.done.wait()
        if reads.failure is not None:
            failure.append(reads.failure)
            return
        seen[0] += len(chunk)
        seen[1] += sum(len(into[e]) for e in chunk)

    async def write_chunk(chunk: list[int], packets: dict[int, bytes]) -> None:
        try:
            await _write_chunk(context, md, target, key, [(e, packets[e]) for e in chunk], local)
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
        async with anyio.create_task_group() as tasks:
            if following:
                tasks.start_soon(read_chunk, following, upcoming)
            tasks.start_soon(write_chunk, chunk, packets)
        if failure:
            raise failure[0]
        copied += len(chunk)
        metrics.copied(
            len(chunk), size_bytes, local=local is not None and target == local.bookie_id
        )
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
