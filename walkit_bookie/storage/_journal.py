"""The journal: group commit (shared by every storage) and the on-disk journal files.

A journal record is ``u32 length | u32 crc32c(body) | body`` where ``body`` is the wire body of
the request that changed state (an add, a fence, an explicit LAC). A torn record at the end of a
file (a crash in the middle of a write) fails its length or CRC check; replay stops reading that
file there and goes on with the next one, which was started after the crash.

A file opens with a header block: ``u32 0 | "WJNL" | u32 format`` and zeros to the block's end.
It is shaped like a group's padding (a zero length field), so bookies that predate it skip it
as they skip padding; files they wrote have none, and are format 1 (docs/formats.md).
"""

from __future__ import annotations

import errno
import os
import struct
import threading
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol, final

import attrs
import crc32c

from walkit._core.wire import Request
from walkit.errors import BookieIOError
from walkit.shared import current_loop, get_logger
from walkit_bookie.storage._cookie import fsync_dir
from walkit_bookie.storage._directio import BLOCK, AlignedBuffer, AlignedFile

log = get_logger(__name__)

#: The format of journal files this bookie writes (see docs/formats.md).
JOURNAL_FORMAT = 1
#: The formats it reads: files without a header are format 1.
JOURNAL_FORMATS = frozenset({1})
_FILE_HEADER = struct.Struct(">I4sI")
_FILE_MAGIC = b"WJNL"
_REC = struct.Struct(">II")
_LENGTH = struct.Struct(">I")
_CRC = struct.Struct(">I")
_PAD_MARK = _LENGTH.size  # padding opens with a zero length field
_SUFFIX = ".jnl"
#: Bytes of zeros written ahead of the journal's end (BookKeeper's journalPreAllocSizeMB):
#: an O_DSYNC write into blocks already written needs no file-system metadata update, and
#: measured here it takes ~80 us against ~120-160 us at the growing end of a file.
PREALLOCATE_BYTES = 256 << 10


@final
@attrs.frozen(order=True)
class LogMark:
    """A position in the journal: everything before it is in ledger storage."""

    file_id: int
    offset: int

    _S = struct.Struct(">QQ")

    def to_bytes(self) -> bytes:
        return self._S.pack(self.file_id, self.offset)

    @classmethod
    def from_bytes(cls, data: bytes) -> LogMark:
        return cls(*cls._S.unpack(data))


def journal_files(directory: Path) -> dict[int, Path]:
    files: dict[int, Path] = {}
    for p in directory.iterdir():
        if p.suffix == _SUFFIX:
            try:
                files[int(p.stem, 16)] = p
            except ValueError:
                continue
    return files


def _path(directory: Path, file_id: int) -> Path:
    return directory / f"{file_id:016x}{_SUFFIX}"


def replay(directory: Path, mark: LogMark) -> Iterator[tuple[bytes, LogMark]]:
    """Yield (record body, position after it) from ``mark`` on, in journal order.

    Each group ends with padding to a ``BLOCK`` boundary that starts with a zero length field
    (at least ``_PAD_MARK`` bytes); replay skips it. Reading a file stops at its first record
    that is cut short or fails its CRC (a torn write at the end).
    """
    files = journal_files(directory)
    for file_id in sorted(f for f in files if f >= mark.file_id):
        start = mark.offset if file_id == mark.file_id else 0
        data = files[file_id].read_bytes()
        version = file_format(data)
        if version not in JOURNAL_FORMATS:
            raise BookieIOError(
                f"journal file {files[file_id]} is format {version}; this bookie reads "
                f"{sorted(JOURNAL_FORMATS)} (a newer walkit wrote it: run that version)"
            )
        at = start
        count = 0
        size = len(data)
        while at + _PAD_MARK <= size:
            (length,) = _LENGTH.unpack_from(data, at)
            if length == 0:  # padding: the group ended; the next starts at the boundary
                at += _PAD_MARK + (-(at + _PAD_MARK)) % BLOCK
                continue
            end = at + _REC.size + length
            if end > size:
                break
            (crc,) = _CRC.unpack_from(data, at + _LENGTH.size)
            body = data[at + _REC.size : end]
            if crc32c.crc32c(body) != crc:
                break
            at = end
            count += 1
            yield body, LogMark(file_id, at)
        if at < size and any(data[at:]):
            log.warning("journal_torn_tail", file=str(files[file_id]), valid_bytes=at, size=size)
        log.info("journal_replayed_file", file=str(files[file_id]), records=count)


def file_format(data: bytes) -> int:
    """The format of a journal file that starts with ``data`` (1 when it has no header)."""
    if len(data) >= _FILE_HEADER.size:
        zero, magic, version = _FILE_HEADER.unpack_from(data, 0)
        if zero == 0 and magic == _FILE_MAGIC:
            return int(version)
    return 1


@final
class JournalWriter:
    """Appends groups of records to journal files, durably, in one write each.

    Writes go through O_DIRECT | O_DSYNC when the file system allows it: one system call per
    group, no copy into the page cache (which costs more CPU than anything else here), and the
    data is durable when the write returns. Each group is padded to a ``BLOCK`` boundary, as
    O_DIRECT needs. A failed write (ENOSPC, EIO) truncates the file back to its last good end,
    so the journal never holds garbage before later records; the caller reports the failure.
    """

    def __init__(
        self,
        directory: Path,
        first_file_id: int,
        max_size: int,
        *,
        preallocate: int = PREALLOCATE_BYTES,
    ) -> None:
        self._dir = directory
        self._max_size = max_size
        self._buffer = AlignedBuffer(4 << 20)
        self._preallocate = preallocate - preallocate % BLOCK
        # Serialises preallocation (a worker thread) with truncation after a failed write.
        self._allocation_lock = threading.Lock()
        self._claim: int | None = None
        self.syncs = 0
        self.bytes_written = 0
        self._open(first_file_id)

    def _open(self, file_id: int) -> None:
        path = _path(self._dir, file_id)
        file = AlignedFile(path, sync=True)
        try:
            if file.size == 0:
                header = AlignedBuffer(BLOCK)
                _FILE_HEADER.pack_into(header.view, 0, 0, _FILE_MAGIC, JOURNAL_FORMAT)
                file.write_at(header.view, 0)  # durable (O_DSYNC) before any record
            fsync_dir(self._dir)
        except OSError:
            file.close()
            path.unlink(missing_ok=True)
            raise
        self.file_id = file_id
        self._file = file
        self.offset = file.size
        #: Bytes of the current file known to be written (records or preallocated zeros).
        self.allocated = file.size

    @property
    def mark(self) -> LogMark:
        return LogMark(self.file_id, self.offset)

    def write(self, bodies: Sequence[bytes]) -> LogMark:
        """Append the records durably (one padded write); return the position after them."""
        buf = self._buffer
        pack_into = _REC.pack_into
        crc = crc32c.crc32c
        size = sum(len(b) for b in bodies) + _REC.size * len(bodies)
        view = buf.reserve(size + _PAD_MARK + BLOCK)
        at = 0
        for body in bodies:
            n = len(body)
            pack_into(view, at, n, crc(body))
            at += _REC.size
            view[at : at + n] = body
            at += n
        # The padding starts with a zero length field (4 bytes at least, so the padding may
        # run into the next block): replay knows a group ended and skips to the boundary.
        end = buf.pad(at, at_least=_PAD_MARK)
        claim = self._claim
        try:
            if claim is not None and self.offset + end > claim:
                with self._allocation_lock:  # zeros are being written there: after them
                    self._file.write_at(view[:end], self.offset)
            else:
                self._file.write_at(view[:end], self.offset)
            self.syncs += 1
        except OSError:
            with self._allocation_lock:
                try:
                    self._file.truncate(self.offset)
                except OSError as exc:
                    log.error("journal_truncate_failed", file_id=self.file_id, error=str(exc))
                self.allocated = self.offset
            raise
        self.offset += end
        self.bytes_written += end
        if self.offset >= self._max_size:
            self._roll()
        return LogMark(self.file_id, self.offset)

    @property
    def wants_preallocation(self) -> bool:
        """Whether the zeros ahead of the journal's end run short (and none are being written):
        then claim a range with :meth:`start_preallocation` and fill it on a worker thread."""
        return (
            self._preallocate > 0
            and self._claim is None
            and self.allocated - self.offset < self._preallocate // 2
            and self.allocated < self._max_size
        )

    def start_preallocation(self) -> tuple[Path, int, int]:
        """Claim the next range to preallocate: the file, from where and how many bytes (give
        them to :meth:`preallocate`, on a worker thread). Until it is done, a write reaching
        into the range waits for it (:meth:`write` takes the allocation lock)."""
        start = max(self.allocated, self.offset)
        size = max(BLOCK, min(self._preallocate, self._max_size + BLOCK - start))
        size -= size % BLOCK
        self._claim = start
        return _path(self._dir, self.file_id), start, size

    def preallocate(self, path: Path, start: int, size: int) -> None:
        """Write ``size`` bytes of zeros at ``start`` of journal file ``path``, durably, with a
        descriptor of its own (safe while the writer rolls or closes its file). Failures are
        logged: preallocation only saves time, records never depend on it."""
        try:
            with self._allocation_lock:
                current = path == _path(self._dir, self.file_id)
                if current and start >= self.offset:  # never over records
                    zeros = AlignedBuffer(size)
                    flags = os.O_WRONLY | os.O_DSYNC | getattr(os, "O_DIRECT", 0)
                    fd = os.open(path, flags)
                    try:
                        written = 0
                        while written < size:
                            written += os.pwrite(fd, zeros.view[written:size], start + written)
                    finally:
                        os.close(fd)
                    if path == _path(self._dir, self.file_id):  # (not rolled meanwhile)
                        self.allocated = start + size
        except OSError as exc:
            log.warning("journal_preallocation_failed", file=str(path), error=str(exc))
        finally:
            self._claim = None

    def _roll(self) -> None:
        old = self._file
        try:
            self._open(self.file_id + 1)
        except OSError as exc:  # e.g. ENOSPC: the group is durable; roll at a later write
            log.warning("journal_roll_failed", file_id=self.file_id, error=str(exc))
            return
        old.close()

    def delete_before(self, file_id: int) -> int:
        """Remove journal files older than ``file_id``; return how many."""
        removed = 0
        for fid, path in journal_files(self._dir).items():
            if fid < file_id and fid != self.file_id:
                path.unlink(missing_ok=True)
                removed += 1
        return removed

    def close(self) -> None:
        self._file.close()


Sink = Any


def _loop_time() -> float:
    """The running loop's clock (until :meth:`GroupCommit.run` binds it)."""
    return current_loop().time()


def _not_running(handle: Any) -> None:
    """No task is parked before :meth:`GroupCommit.run` starts."""


CommittedCallback = Callable[[list[Request], list[Sink], BaseException | None], None]


class Committer(Protocol):
    """Where group commits go (a :class:`~walkit_bookie.BookieStorage`)."""

    async def commit(self, bodies: Sequence[bytes], requests: Sequence[Request]) -> None: ...

    def commit_now(self, bodies: Sequence[bytes], requests: Sequence[Request]) -> bool: ...


@final
class GroupCommit:
    """Collects journal records and commits them in groups: one write and one sync each.

    ``submit`` is synchronous (no task per request). When several requests are waiting, the
    committer gives requests that are ready a scheduling round to join, and when the journal
    was idle, more rounds while more keep coming (bounded by ``max_wait`` and ``max_bytes``).
    A lone request is committed at once: requests readied in the same round as it were
    submitted already (their readers ran before this task woke), and a round costs a bookie
    about a tenth of its CPU per add at one add in flight. While a group is being synced the
    next one fills up, and is committed as soon as the sync returns. The committing task
    hands each committed group to ``on_committed`` (with the error if the commit failed):
    answering is a few microseconds per request, less than waking another task for it.

    A connection's reader may go further with :meth:`defer_wake` and :meth:`flush` around
    the requests of one received chunk: then a lone request, with the committing task idle,
    is committed without that task, once the tasks ready to run have had their turn (any
    request of theirs joins the group): see :meth:`flush`.
    """

    def __init__(
        self,
        storage: Committer,
        on_committed: CommittedCallback,
        *,
        max_wait: float,
        max_bytes: int,
    ) -> None:
        self._storage = storage
        self._on_committed = on_committed
        self._max_wait = max_wait
        self._max_bytes = max_bytes
        self._bodies: list[bytes] = []
        self._requests: list[Request] = []
        self._sinks: list[Sink] = []
        self._bytes = 0
        #: The clock and the wake-ups of the committing task's loop (bound by ``run``).
        self._time: Callable[[], float] = _loop_time
        self._wake_handle: Callable[[Any], None] = _not_running
        self._call_after_ready: Callable[[Callable[[], object]], bool] | None = None
        #: The committing task's wake-up handle while it waits for requests (``run``).
        self._waiters: list[Any] = []
        #: Submits do not wake the task (between :meth:`defer_wake` and :meth:`flush`).
        self._deferring = False
        #: A commit without the task is queued (:meth:`flush`, :meth:`_commit_lone`).
        self._lone_queued = False
        self.groups = 0
        self.records = 0
        #: When the oldest record waiting to be taken was submitted, and when the oldest of
        #: the group being written was (the loop's clock; None: none): what a stall is
        #: measured by.
        self._waiting_since: float | None = None
        self._writing_since: float | None = None
        #: The error of the last group written, None if it was written (health checks).
        self.last_error: OSError | None = None
        self.failed_groups = 0

    @property
    def pending(self) -> int:
        return len(self._bodies)

    def stalled_for(self, now: float) -> float:
        """Seconds the oldest record not yet durable (waiting, or in the group being written)
        has waited; 0 when none waits."""
        since = [t for t in (self._writing_since, self._waiting_since) if t is not None]
        return max(0.0, now - min(since)) if since else 0.0

    def submit(self, body: bytes, request: Request, sink: Sink) -> None:
        if not self._bodies:  # the clock once per group, not per record
            self._waiting_since = self._time()
        self._bodies.append(body)
        self._requests.append(request)
        self._sinks.append(sink)
        self._bytes += len(body)
        if not self._deferring:
            self._wake()

    def _wake(self) -> None:
        if self._waiters:
            self._wake_handle(self._waiters.pop())

    def defer_wake(self) -> None:
        """Submits from now on do not wake the committing task, until :meth:`flush`; the
        caller must reach :meth:`flush` without a checkpoint (nothing else runs between)."""
        self._deferring = True

    def flush(self, *, here: bool = True) -> None:
        """End :meth:`defer_wake`. A lone request, with the committing task idle and ``here``
        allowing it, is committed without that task once the tasks ready to run now have had
        their turn; otherwise the task is woken, as :meth:`submit` would have.

        Why: a task switch per group is a tenth of a bookie's CPU per add at one add in
        flight, so a lone request is best committed by the code that is running anyway. But
        it must not leave behind a request another task is about to submit (a reader woken
        by the same poll): that one would wait a whole sync more. asyncio and uvloop cannot
        say whether a task is ready, so the rule is one every loop can keep: commit after the
        ready tasks' turn, in a plain callback of the loop (``EventLoop.call_after_ready``),
        taking whatever joined meanwhile into the same write. On asyncio that costs one more
        poll of the loop and no task. trio has no such callback: it commits at once when no
        task is queued for its next batch, and wakes the task otherwise (it does not see the
        rest of the running batch, so readers woken by one poll may each sync alone there).
        ``here`` is False when asking would cost more than it saves (trio's check is a step
        per watched socket)."""
        self._deferring = False
        bodies = self._bodies
        if not bodies or self._lone_queued:
            return  # (a queued commit takes these too)
        call_after_ready = self._call_after_ready
        if here and self._waiters and len(bodies) == 1 and call_after_ready is not None:
            self._lone_queued = True
            if call_after_ready(self._commit_lone):
                return
            self._lone_queued = False
        self._wake()

    def _commit_lone(self) -> None:
        """Commit what is waiting without the committing task, if it is still idle and the
        storage can commit at once; else wake the task for it."""
        self._lone_queued = False
        bodies = self._bodies
        if not bodies or not self._waiters:
            return  # (taken by the task, woken meanwhile)
        requests, sinks = self._requests, self._sinks
        if self._bytes <= self._max_bytes:
            error: OSError | None = None
            try:
                done = self._storage.commit_now(bodies, requests)
            except OSError as exc:
                done, error = True, exc  # (failed: nothing of it is durable; answered so)
            if done:
                self._bodies, self._requests, self._sinks, self._bytes = [], [], [], 0
                self._waiting_since = None
                self._finish(bodies, requests, sinks, error)
                return
        self._wake()

    def _take(self) -> tuple[list[bytes], list[Request], list[Sink]]:
        bodies, requests, sinks = self._bodies, self._requests, self._sinks
        self._writing_since = self._waiting_since
        if self._bytes <= self._max_bytes:
            self._bodies, self._requests, self._sinks = [], [], []
            self._bytes = 0
            self._waiting_since = None
            return bodies, requests, sinks
        size = 0
        n = 0
        for n, body in enumerate(bodies, 1):  # noqa: B007
            size += len(body)
            if size >= self._max_bytes:
                break
        self._bodies, self._requests, self._sinks = bodies[n:], requests[n:], sinks[n:]
        self._bytes -= size
        return bodies[:n], requests[:n], sinks[:n]

    async def _gather(self, checkpoint: Callable[[], Awaitable[None]]) -> None:
        """Let requests that are ready join the group, while more keep coming (bounded). The
        first round is the one ``run`` gives every group of several: this only goes on when
        that round may not be enough (requests arrived in the last one)."""
        time = self._time
        deadline = time() + self._max_wait
        seen = len(self._bodies)
        while self._bytes < self._max_bytes:
            await checkpoint()
            now = len(self._bodies)
            if now == seen or time() >= deadline:
                return
            seen = now

    async def run(self) -> None:
        loop = current_loop()
        self._time = loop.time
        self._wake_handle = loop.wake
        self._call_after_ready = loop.call_after_ready
        park, checkpoint = loop.park, loop.checkpoint
        idle = True
        while True:
            if not self._bodies:
                await park(self._waiters)
                idle = True
                continue
            if len(self._bodies) > 1:
                await checkpoint()  # a round for those readied meanwhile
                if idle:
                    await self._gather(checkpoint)  # several at once: more may be on their way
            bodies, requests, sinks = self._take()
            error: OSError | None = None
            try:
                await self._storage.commit(bodies, requests)
            except OSError as exc:
                error = exc
            self._finish(bodies, requests, sinks, error)
            idle = False

    def _finish(
        self,
        bodies: list[bytes],
        requests: list[Request],
        sinks: list[Sink],
        error: OSError | None,
    ) -> None:
        if error is not None:
            self.failed_groups += 1
            log.error(
                "journal_commit_failed",
                records=len(bodies),
                error=str(error),
                enospc=error.errno in (errno.ENOSPC, errno.EDQUOT),
            )
        self.last_error = error
        self._writing_since = None
        self.groups += 1
        self.records += len(bodies)
        # Answer at once, from this task: a hand-off to another task costs a scheduling
        # round per group, and answering is a few microseconds per request.
        self._on_committed(requests, sinks, error)
