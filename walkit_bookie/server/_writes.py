"""Writes: adds, explicit LACs, the durable fence of a fencing read, and COPY_FRAGMENT.

Adds and explicit LACs are checked against what the bookie knows of the ledger (master key,
fenced, an entry stored with other bytes is never replaced), then queued to a group commit:
the journal's, or for rereplication copies (adds flagged COPY) the copies' own, which never
joins or delays the journal's groups. They are answered from :meth:`Writes.on_committed` once
durable, which also wakes the long polls of their ledgers.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from typing import Any, cast, final

import anyio

from walkit._core.digest import HEADER_SIZE, packet_lac, read_header
from walkit._core.rereplication import FragmentCopies
from walkit._core.types import BookieId
from walkit._core.wire import (
    AddFlag,
    AddRequest,
    AddResponse,
    CopyFragmentRequest,
    CopyFragmentResponse,
    ReadLacRequest,
    ReadRequest,
    Request,
    StatusCode,
    WriteLacRequest,
    WriteLacResponse,
    encode_add_response,
    encode_frame,
)
from walkit.shared import get_logger
from walkit_bookie.server._peer import Peer
from walkit_bookie.server._state import RequestState
from walkit_bookie.storage import (
    BookieStorage,
    GroupCommit,
    LedgerInfo,
    StoredEntry,
    apply_request,
    stored_entry_decision,
)

__all__ = ["Writes", "io_status"]

log = get_logger(__name__)

_FULL = (errno.ENOSPC, errno.EDQUOT)


def io_status(error: BaseException) -> StatusCode:
    """The status of a request whose storing failed: a full disk turns the bookie read-only."""
    if isinstance(error, OSError) and error.errno in _FULL:
        return StatusCode.BOOKIE_READ_ONLY
    return StatusCode.IO_ERROR


@final
class Writes:
    """Adds, explicit LACs, fences and fragment copies of one bookie; ``await run()`` runs the
    group commits and the checker of rewrites."""

    def __init__(
        self,
        state: RequestState,
        *,
        read_only: set[str],
        on_disk_full: Callable[[str], None],
        bookie_id: Callable[[], BookieId | None],
    ) -> None:
        self.storage = storage = state.storage
        self._stats, self._admission = state.stats, state.admission
        self._ledgers, self._lac_waiters = state.ledgers, state.lac_waiters
        self._cork = state.cork
        #: The bookie's reasons to refuse writes (shared), what to call on a full disk, and
        #: its address once bound (for log lines).
        self._read_only, self._on_disk_full = read_only, on_disk_full
        self._bookie_id = bookie_id
        #: Answers COPY_FRAGMENT requests: the bookie's autorecovery worker, once connected.
        self.fragment_copier: FragmentCopies | None = None
        #: Packets of adds on their way to the journal, by (ledger, entry).
        self._pending: dict[tuple[int, int], bytes] = {}
        #: Adds waiting for a disk lookup of the entry they would rewrite.
        self._checks: list[tuple[Peer, bytes, AddRequest]] = []
        self._check_wake = anyio.Event()
        self.group_commit = GroupCommit(
            storage,
            self.on_committed,
            max_wait=state.config.group_commit_max_wait,
            max_bytes=state.config.group_commit_max_bytes,
        )
        self.copy_commit = GroupCommit(
            _CopyStore(storage),
            self.on_committed,
            max_wait=state.config.group_commit_max_wait,
            max_bytes=state.config.copy_group_max_bytes,
        )

    async def run(self) -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self.group_commit.run)
            tasks.start_soon(self.copy_commit.run)
            tasks.start_soon(self._stored_add_checker)

    # --- adds ----------------------------------------------------------------------------------

    def add(self, conn: Peer, body: bytes, req: AddRequest) -> None:
        if self._read_only:
            return self._answer_add(conn, req, StatusCode.BOOKIE_READ_ONLY)
        packet = req.packet
        if req.entry_id < 0 or len(packet) < HEADER_SIZE:
            return self._answer_add(conn, req, StatusCode.BAD_REQUEST)
        header = read_header(packet)
        if header.ledger_id != req.ledger_id or header.entry_id != req.entry_id:
            return self._answer_add(conn, req, StatusCode.BAD_REQUEST)
        key = (req.ledger_id, req.entry_id)
        info = self._ledgers.get(req.ledger_id)
        if info is None:
            self._ledgers[req.ledger_id] = LedgerInfo(req.master_key)
        elif info.master_key != req.master_key:
            return self._answer_add(conn, req, StatusCode.UNAUTHORIZED_ACCESS)
        elif info.fenced and not req.flags & AddFlag.RECOVERY:
            return self._answer_add(conn, req, StatusCode.LEDGER_FENCED)
        elif req.entry_id <= info.last_entry or key in self._pending:
            # The entry may be here already (a re-send after an ensemble change, a recovery
            # write-back, or a forgery): stored bytes are never replaced by other bytes.
            stored = self._pending.get(key) or self.storage.cached_entry(*key)
            if stored is None:
                self._checks.append((conn, body, req))
                self._check_wake.set()
                return None
            return self._add_stored(conn, body, req, stored, pending=key in self._pending)
        self._pending[key] = req.packet
        self._store(body, req, conn)
        return None

    def _store(self, body: bytes, req: AddRequest, conn: Peer) -> None:
        # (``flags and``: an IntFlag's truth is int's, its ``&`` builds an enum member)
        if req.flags and req.flags & AddFlag.COPY:
            self.copy_commit.submit(body, req, conn)
        else:
            self.group_commit.submit(body, req, conn)

    def _add_done(self, conn: Peer, frame: bytes, size: int) -> None:
        """Answer an add (``size``: its packet's length) or an explicit LAC (0)."""
        conn.outstanding -= 1
        conn.send(frame)
        stats = self._stats
        stats.adds_answered += 1
        stats.adds_in_flight -= 1
        stats.add_bytes_in_flight -= size
        if self._admission.capacity:
            self._admission.freed()

    def _answer_add(self, conn: Peer, req: AddRequest, status: StatusCode) -> None:
        self._add_done(
            conn,
            encode_frame(AddResponse(req.request_id, status, req.ledger_id, req.entry_id)),
            len(req.packet),
        )

    def _add_stored(
        self, conn: Peer, body: bytes, req: AddRequest, stored: bytes | None, *, pending: bool
    ) -> None:
        """Answer an add of an entry that may be stored (``stored``: its bytes, or None)."""
        decision = stored_entry_decision(stored, req.packet)
        if decision is StoredEntry.ABSENT or (decision is StoredEntry.SAME and pending):
            # Absent, or the same bytes still on their way to the journal: store (idempotent).
            self._pending[(req.ledger_id, req.entry_id)] = req.packet
            self._store(body, req, conn)
        elif decision is StoredEntry.SAME:
            self._stats.adds_idempotent += 1
            self._answer_add(conn, req, StatusCode.OK)
        else:
            self._stats.adds_refused_rewrite += 1
            log.warning(
                "entry_rewrite_refused",
                ledger_id=req.ledger_id,
                entry_id=req.entry_id,
                bookie_id=str(self._bookie_id()),
                recovery=bool(req.flags & AddFlag.RECOVERY),
            )
            self._answer_add(conn, req, StatusCode.ENTRY_EXISTS)

    async def _stored_add_checker(self) -> None:
        """Looks up on disk the entries that adds may rewrite (rare: re-sends, recovery)."""
        while True:
            if not self._checks:
                await self._check_wake.wait()
                self._check_wake = anyio.Event()
                continue
            conn, body, req = self._checks.pop(0)
            key = (req.ledger_id, req.entry_id)
            try:
                stored = await self._stored_now(key)
            except OSError as exc:
                log.error("read_failed", ledger_id=key[0], entry_id=key[1], error=str(exc))
                self._answer_add(conn, req, io_status(exc))
                continue
            pending = self._pending.get(key)
            self._add_stored(
                conn, body, req, stored if pending is None else pending, pending=pending is not None
            )

    async def _stored_now(self, key: tuple[int, int]) -> bytes | None:
        """The entry's stored bytes as of now (not as of when the disk lookup began): an add of
        it may have been committed into the write cache during the lookup (an add of the same
        hole, decided just before this one), or the cache flushed, or a copy stored on disk."""
        storage = self.storage
        while True:
            stats = storage.stats
            before = (stats.checkpoints, stats.copies_stored)
            (stored,) = await storage.read_entries([key])
            if stored is None:
                stored = storage.cached_entry(*key)
            if stored is not None or (stats.checkpoints, stats.copies_stored) == before:
                return stored

    # --- explicit LACs and fences ---------------------------------------------------------------

    def write_lac(self, conn: Peer, body: bytes, req: WriteLacRequest) -> None:
        def answer(status: StatusCode) -> None:
            self._add_done(
                conn, encode_frame(WriteLacResponse(req.request_id, status, req.ledger_id)), 0
            )

        if self._read_only:
            return answer(StatusCode.BOOKIE_READ_ONLY)
        info = self._ledgers.get(req.ledger_id)
        if info is None:
            self._ledgers[req.ledger_id] = LedgerInfo(req.master_key)
        elif info.master_key != req.master_key:
            return answer(StatusCode.UNAUTHORIZED_ACCESS)
        self.group_commit.submit(
            body, req, lambda error: answer(StatusCode.OK if error is None else io_status(error))
        )
        return None

    def fence(
        self, body: bytes, req: ReadRequest | ReadLacRequest, then: Callable[[Any], None]
    ) -> bool:
        """Fence the ledger durably, then call ``then(error)``; False if the key is wrong."""
        info = self._ledgers.get(req.ledger_id)
        if info is None:
            # A ledger this bookie holds nothing of (it may have been in an ensemble and got no
            # entry, or the id is junk): fenced too, but logged at debug, as these can come by
            # the thousand; counted in ``fences_of_unknown_ledgers``.
            info = self._ledgers[req.ledger_id] = LedgerInfo(req.master_key)
            self._stats.fences_of_unknown_ledgers += 1
            log.debug("ledger_fenced", ledger_id=req.ledger_id, known=False)
        elif info.master_key != req.master_key:
            return False
        elif not info.fenced:
            log.info("ledger_fenced", ledger_id=req.ledger_id, bookie_id=str(self._bookie_id()))
        info.fenced = True  # refuse adds at once; the answer waits for the journal
        self.group_commit.submit(body, req, then)
        return True

    # --- fragments copied by this bookie ------------------------------------------------------

    def copy_fragment(self, conn: Peer, req: CopyFragmentRequest) -> None:
        copier = self.fragment_copier
        why = ""
        if self._read_only:
            status, why = StatusCode.BOOKIE_READ_ONLY, "this bookie is read-only"
        elif copier is None:
            status = StatusCode.BAD_REQUEST
            why = (
                "this bookie copies no fragments: its autorecovery is off (--no-autorecovery) "
                "or not connected to the metadata store"
            )
        elif conn.spawn(self._copy_task, conn, req, copier):
            return
        else:
            conn.outstanding -= 1  # the connection is closing
            return
        conn.outstanding -= 1
        conn.send(
            encode_frame(CopyFragmentResponse(req.request_id, status, req.ledger_id, text=why))
        )

    async def _copy_task(
        self, conn: Peer, req: CopyFragmentRequest, copier: FragmentCopies
    ) -> None:
        answer: CopyFragmentResponse | None = None
        try:
            answer = await copier.copy(req)
        finally:
            conn.outstanding -= 1
            if answer is not None:
                conn.send(encode_frame(answer))

    # --- group commit ------------------------------------------------------------------------

    def on_committed(
        self, requests: list[Request], sinks: list[Any], error: BaseException | None
    ) -> None:
        # A connection's answers to the whole group go out in one write (``Cork``).
        cork = self._cork
        if cork.corked:
            return self._answer_committed(requests, sinks, error)
        cork.corked = True
        try:
            self._answer_committed(requests, sinks, error)
        finally:
            cork.uncork()

    def _answer_committed(
        self, requests: list[Request], sinks: list[Any], error: BaseException | None
    ) -> None:
        ledgers = self._ledgers
        waiters = self._lac_waiters
        if error is not None:
            status = io_status(error)
            if status is StatusCode.BOOKIE_READ_ONLY:
                self._on_disk_full(str(error))
            for req, sink in zip(requests, sinks, strict=True):
                if type(req) is AddRequest:
                    self._pending.pop((req.ledger_id, req.entry_id), None)
                    self._answer_add(sink, req, status)
                else:
                    sink(error)
            return
        woken: set[int] = set()
        ok_frame = encode_add_response
        pending = self._pending
        for req, sink in zip(requests, sinks, strict=True):
            lid = req.ledger_id
            if type(req) is AddRequest:
                pending.pop((lid, req.entry_id), None)
            if waiters and lid in waiters:
                # Waiters re-check their own condition (a poll on a ledger not seen before
                # may wait for it to exist, not for its LAC to grow).
                apply_request(ledgers, req)
                woken.add(lid)
            elif type(req) is AddRequest and lid in ledgers:
                # apply_request inlined: this runs once per add.
                info = ledgers[lid]
                lac = packet_lac(req.packet)
                if lac > info.lac:
                    info.lac = lac
                if req.entry_id > info.last_entry:
                    info.last_entry = req.entry_id
            else:
                apply_request(ledgers, req)
            if type(req) is AddRequest:
                self._add_done(
                    sink, ok_frame(req.request_id, 0, lid, req.entry_id), len(req.packet)
                )
            else:
                sink(None)
        for lid in woken:
            lot = waiters.get(lid)
            if lot is not None:
                lot.unpark_all()


@final
class _CopyStore:
    """The committer of the copies' group commit."""

    def __init__(self, storage: BookieStorage) -> None:
        self._storage = storage

    async def commit(self, bodies: Sequence[bytes], requests: Sequence[Request]) -> None:
        await self._storage.store_copies(bodies, cast("Sequence[AddRequest]", requests))

    def commit_now(self, bodies: Sequence[bytes], requests: Sequence[Request]) -> bool:
        return False  # copies are big and written on a worker thread
