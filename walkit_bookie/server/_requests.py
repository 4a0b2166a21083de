"""Request semantics: adds, reads, fencing, LAC and long polls, over a storage.

Connections hand each decoded request to :meth:`RequestHandler.handle`, which answers at once
(refusals, cached reads, LAC reads), or queues it: adds, fences and explicit LACs go to the
group commit and are answered from :meth:`RequestHandler._on_committed`; reads of entries not
in the write cache go to the disk readers. The handler also keeps the in-flight counts that
backpressure and ``/health`` read. It knows nothing of the bookie's lifecycle: the read-only
reasons set and a callback for a full disk are passed in.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Sequence
from typing import Any, cast, final

import attrs
import trio

from walkit._core.auth import Authenticator, Authorization
from walkit._core.digest import HEADER_SIZE, packet_lac, read_header
from walkit._core.rereplication import FragmentCopies
from walkit._core.types import BookieId
from walkit._core.wire import (
    MAX_BATCH_READ_ENTRIES,
    AddFlag,
    AddRequest,
    AddResponse,
    AuthRequest,
    AuthResponse,
    BatchReadRequest,
    CopyFragmentRequest,
    CopyFragmentResponse,
    ErrorResponse,
    Message,
    ReadFlag,
    ReadLacFlag,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
    StatusCode,
    WriteLacRequest,
    WriteLacResponse,
    encode_add_response,
    encode_batch_read_response_parts,
    encode_frame,
    encode_read_response_parts,
)
from walkit._logging import get_logger
from walkit_bookie._config import BookieConfig
from walkit_bookie.server._access import LedgerAccess
from walkit_bookie.server._badinput import BadInputLog
from walkit_bookie.server._connection import Peer
from walkit_bookie.server._disk_reads import DiskReads
from walkit_bookie.storage import (
    BookieStorage,
    GroupCommit,
    LedgerInfo,
    StoredEntry,
    apply_request,
    stored_entry_decision,
)

log = get_logger(__name__)

#: Read answers with a packet at least this large are sent in parts (header, packet): no copy
#: of the packet into a frame (for small ones, one join costs less than a writev of two).
_PARTS_MIN = 16 * 1024
_FULL = (errno.ENOSPC, errno.EDQUOT)
#: Up to this many client connections a lone add may be committed by its reader
#: (``GroupCommit.flush``).
_COMMIT_HERE_MAX_CONNECTIONS = 64


@final
class RequestHandler:
    """Answers a bookie's requests; ``await run()`` runs its tasks (group commit, disk reads).

    ``read_only`` is the bookie's set of reasons to refuse writes (shared, read here);
    ``on_disk_full(detail)`` is called when a commit fails for lack of space.
    """

    def __init__(
        self,
        config: BookieConfig,
        storage: BookieStorage,
        *,
        read_only: set[str],
        on_disk_full: Callable[[str], None],
        authenticator: Authenticator | None = None,
        authorization: Authorization | None = None,
    ) -> None:
        self.config = config
        #: Checks clients' credentials once per connection (None: authentication is off).
        self.authenticator = authenticator
        #: Connections authenticated, and refused (bad credentials or none).
        self.auth_ok = 0
        self.auth_refused = 0
        #: Who may do what (None: every authenticated principal may do all).
        self.authorization = authorization
        self.storage = storage
        self._read_only = read_only
        self._on_disk_full = on_disk_full
        #: The bookie's address once bound (for log lines).
        self.bookie_id: BookieId | None = None
        #: What this bookie knows of each ledger (set from the storage when it opens).
        self.ledgers: dict[int, LedgerInfo] = {}
        self.capacity = trio.lowlevel.ParkingLot()
        #: Requests taken off the wire so far, and those accepted but not yet answered.
        self.requests = 0
        self.adds_answered = 0
        self.reads_answered = 0
        self.connections = 0
        self.connections_by_address: dict[str, int] = {}
        self.connections_opened = 0
        #: Connections closed at once because ``max_connections`` were open.
        self.connections_refused = 0
        #: Requests answered TOO_MANY_REQUESTS (connection or long-poll caps).
        self.requests_refused = 0
        #: Bytes of receive buffers held by open connections.
        self.receive_buffer_bytes = 0
        #: Bytes of frames received in part, over all connections.
        self.partial_frame_bytes = 0
        #: Long-poll LAC reads waiting (counted apart from ``reads_in_flight``).
        self.long_polls = 0
        #: Connections not read from because ``max_unsent_bytes`` of their answers wait to be
        #: sent (their peer does not read them fast enough).
        self.stalled_connections = 0
        #: Bytes of answers queued over all connections, not yet taken by their peers.
        self.unsent_bytes = 0
        #: Client connections closed for a timeout (first request, frame or send), and closed
        #: to make room for a new one while ``max_connections`` were open.
        self.connections_timed_out = 0
        self.connections_evicted = 0
        #: Connections closed because their peers took none of their answers while the
        #: answers queued over all connections were at ``max_unsent_bytes_total``.
        self.connections_evicted_unread = 0
        #: The open client connections (``_connection.Connection``), for eviction.
        self.client_connections: set[Any] = set()
        #: Malformed input, counted by kind; warnings about it are rate-limited.
        self.bad_input = BadInputLog(config.bad_input_log_burst, config.bad_input_log_interval)
        #: With authentication on: whose ledger is whose, and who may do what (``_access``).
        self.access = LedgerAccess(authorization, self.bad_input, lambda: self.ledgers)
        self.adds_in_flight = 0
        #: Bytes of the entries of the adds in flight.
        self.add_bytes_in_flight = 0
        self.reads_in_flight = 0
        #: Adds answered from the stored entry (same bytes), and adds refused (other bytes).
        self.adds_idempotent = 0
        self.adds_refused_rewrite = 0
        #: Fences of ledgers this bookie knew nothing of (they create the ledger's state here).
        self.fences_of_unknown_ledgers = 0
        self._lac_waiters: dict[int, trio.lowlevel.ParkingLot] = {}
        #: Answers COPY_FRAGMENT requests: the bookie's autorecovery worker, once connected.
        self.fragment_copier: FragmentCopies | None = None
        #: Reads answered TOO_MANY_REQUESTS because their connection's answers are not read.
        #: Reads of entries not in the write cache (``_disk_reads``).
        self.disk_reads = DiskReads(self)
        #: Packets of adds on their way to the journal, by (ledger, entry).
        self._adds_pending: dict[tuple[int, int], bytes] = {}
        #: Adds waiting for a disk lookup of the entry they would rewrite.
        self._add_checks: list[tuple[Peer, bytes, AddRequest]] = []
        self._add_check_wake = trio.Event()
        self.group_commit = GroupCommit(
            storage,
            self._on_committed,
            max_wait=config.group_commit_max_wait,
            max_bytes=config.group_commit_max_bytes,
        )
        #: Rereplication copies (adds flagged COPY) are grouped apart and stored by
        #: ``storage.store_copies``: they never join, or delay, the journal's groups.
        self.copy_commit = GroupCommit(
            _CopyStore(storage),
            self._on_committed,
            max_wait=config.group_commit_max_wait,
            max_bytes=config.copy_group_max_bytes,
        )

    async def run(self) -> None:
        """The group commit, the disk readers and the checker of rewrites, until cancelled."""
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.group_commit.run)
            nursery.start_soon(self.copy_commit.run)
            nursery.start_soon(self.disk_reads.run)
            nursery.start_soon(self._stored_add_checker)

    @property
    def unauthorized(self) -> dict[str, int]:
        """Requests refused by the ``--authorize`` rules, by operation (admin included)."""
        return self.access.unauthorized

    @property
    def claims(self) -> dict[int, str]:
        return self.access.claims

    @property
    def claims_refused(self) -> int:
        return self.access.claims_refused

    @property
    def reads_refused_unsent(self) -> int:
        """Reads answered TOO_MANY_REQUESTS because their connection's answers are not read."""
        return self.disk_reads.refused

    def answers_taken(self, conn: Peer) -> None:
        self.disk_reads.answers_taken(conn)

    @property
    def saturated(self) -> bool:
        config = self.config
        return (
            self.adds_in_flight >= config.max_inflight_adds
            or self.add_bytes_in_flight >= config.max_inflight_add_bytes
            or self.reads_in_flight >= config.max_inflight_reads
        )

    # --- requests ----------------------------------------------------------------------------

    @property
    def degraded(self) -> list[str]:
        """Which request queues are full now (empty when none is): what ``/health`` says."""
        config = self.config
        full = []
        if (
            self.adds_in_flight >= config.max_inflight_adds
            or self.add_bytes_in_flight >= config.max_inflight_add_bytes
        ):
            full.append("adds")
        if self.reads_in_flight >= config.max_inflight_reads:
            full.append("reads")
        if self.long_polls >= config.max_long_polls:
            full.append("long_polls")
        if self.connections >= config.max_connections:
            full.append("connections")
        return full

    def _refuse(self, conn: Peer, message: Message, why: str) -> None:
        self.requests_refused += 1
        conn.send(
            encode_frame(ErrorResponse(message.request_id, StatusCode.TOO_MANY_REQUESTS, why))
        )

    def handle(self, conn: Peer, body: bytes, message: Message) -> None:
        kind = type(message)
        self.requests += 1
        if self.authenticator is not None and not self.access.allowed(conn, message):
            return
        if conn.outstanding >= self.config.max_requests_per_connection:
            return self._refuse(
                conn,
                message,
                f"too many requests in flight on this connection "
                f"(limit {self.config.max_requests_per_connection})",
            )
        if isinstance(message, ReadLacRequest) and message.flags & ReadLacFlag.LONG_POLL:
            if self.long_polls >= self.config.max_long_polls:
                return self._refuse(
                    conn,
                    message,
                    f"too many long polls waiting (limit {self.config.max_long_polls})",
                )
            self.long_polls += 1
            conn.outstanding += 1
            return self._read_lac(conn, body, message)
        conn.outstanding += 1
        if kind is AddRequest:
            self.adds_in_flight += 1
            self.add_bytes_in_flight += len(message.packet)  # type: ignore[union-attr]
            self._add(conn, body, message)  # type: ignore[arg-type]
        elif kind is ReadRequest:
            self.reads_in_flight += 1
            if self.reads_in_flight >= self.config.max_inflight_reads:
                self.disk_reads.slots_taken()
            self._read(conn, body, message)  # type: ignore[arg-type]
        elif kind is ReadLacRequest:
            self.reads_in_flight += 1
            self._read_lac(conn, body, message)  # type: ignore[arg-type]
        elif kind is BatchReadRequest:
            self.reads_in_flight += 1
            if self.reads_in_flight >= self.config.max_inflight_reads:
                self.disk_reads.slots_taken()
            self._batch_read(conn, message)  # type: ignore[arg-type]
        elif kind is CopyFragmentRequest:
            self._copy_fragment(conn, message)  # type: ignore[arg-type]
        elif kind is WriteLacRequest:
            self.adds_in_flight += 1
            self._write_lac(conn, body, message)  # type: ignore[arg-type]
        elif kind is AuthRequest:
            conn.outstanding -= 1
            self._auth_again(conn, message)  # type: ignore[arg-type]
        else:
            conn.outstanding -= 1
            conn.send(
                encode_frame(
                    ErrorResponse(
                        message.request_id,
                        StatusCode.BAD_REQUEST,
                        f"{kind.__name__} is not a request",
                    )
                )
            )

    def defer_commits(self) -> None:
        self.group_commit.defer_wake()

    def flush_commits(self) -> None:
        # Past a few dozen connections a lone add per chunk is rare, and the check for other
        # ready tasks costs a step per watched socket.
        self.group_commit.flush(here=self.connections <= _COMMIT_HERE_MAX_CONNECTIONS)

    def add_local_copy(self, conn: Peer, req: AddRequest) -> None:
        """An add flagged RECOVERY | COPY from this bookie's own autorecovery worker, in this
        process: checked and stored exactly as one from the network, answered to ``conn``.

        No principal claims the ledger (the bookie trusts itself): its next add or fence from
        the network registers an owner, as after a restart, when no ledger has one."""
        self.requests += 1
        conn.outstanding += 1
        self.adds_in_flight += 1
        self.add_bytes_in_flight += len(req.packet)
        # The copies' store never writes the frame body (only the entry log gets the packet);
        # the body only sizes the copies' groups, which the packet does as well.
        self._add(conn, req.packet, req)

    def _auth_again(self, conn: Peer, req: AuthRequest) -> None:
        """AUTH on a connection that is served already (authentication off, so clients can
        turn it on before bookies do; or done, e.g. by its TLS certificate): OK, as the
        principal it has; the credentials change nothing."""
        principal = conn.principal or ""
        conn.send(encode_frame(AuthResponse(req.request_id, StatusCode.OK, principal)))

    def _add_done(self, conn: Peer, frame: bytes, size: int) -> None:
        """Answer an add (``size``: its packet's length) or an explicit LAC (0)."""
        conn.outstanding -= 1
        conn.send(frame)
        self.adds_answered += 1
        self.adds_in_flight -= 1
        self.add_bytes_in_flight -= size
        if self.capacity and not self.saturated:
            self.capacity.unpark_all()

    def read_done(
        self, conn: Peer, frame: bytes | tuple[bytes, ...] | None, long_poll: bool = False
    ) -> None:
        conn.outstanding -= 1
        if frame is not None:
            if isinstance(frame, tuple):
                conn.send_parts(frame)
            else:
                conn.send(frame)
            self.reads_answered += 1
        if long_poll:
            self.long_polls -= 1
            return
        self.reads_in_flight -= 1
        if self.capacity and not self.saturated:
            self.capacity.unpark_all()

    def _answer_add(self, conn: Peer, req: AddRequest, status: StatusCode) -> None:
        self._add_done(
            conn,
            encode_frame(AddResponse(req.request_id, status, req.ledger_id, req.entry_id)),
            len(req.packet),
        )

    def _add(self, conn: Peer, body: bytes, req: AddRequest) -> None:
        if self._read_only:
            return self._answer_add(conn, req, StatusCode.BOOKIE_READ_ONLY)
        packet = req.packet
        if req.entry_id < 0 or len(packet) < HEADER_SIZE:
            return self._answer_add(conn, req, StatusCode.BAD_REQUEST)
        header = read_header(packet)
        if header.ledger_id != req.ledger_id or header.entry_id != req.entry_id:
            return self._answer_add(conn, req, StatusCode.BAD_REQUEST)
        info = self.ledgers.get(req.ledger_id)
        if info is None:
            self.ledgers[req.ledger_id] = LedgerInfo(req.master_key)
        elif info.master_key != req.master_key:
            return self._answer_add(conn, req, StatusCode.UNAUTHORIZED_ACCESS)
        elif info.fenced and not req.flags & AddFlag.RECOVERY:
            return self._answer_add(conn, req, StatusCode.LEDGER_FENCED)
        elif req.entry_id <= info.last_entry or (req.ledger_id, req.entry_id) in self._adds_pending:
            # The entry may be here already (a re-send after an ensemble change, a recovery
            # write-back, or a forgery): stored bytes are never replaced by other bytes.
            key = (req.ledger_id, req.entry_id)
            stored = self._adds_pending.get(key) or self.storage.cached_entry(*key)
            if stored is None:
                self._add_checks.append((conn, body, req))
                self._add_check_wake.set()
                return None
            return self._add_stored(conn, body, req, stored, pending=key in self._adds_pending)
        self._adds_pending[(req.ledger_id, req.entry_id)] = req.packet
        self._store(body, req, conn)
        return None

    def _store(self, body: bytes, req: AddRequest, conn: Peer) -> None:
        if req.flags & AddFlag.COPY:
            self.copy_commit.submit(body, req, conn)
        else:
            self.group_commit.submit(body, req, conn)

    def _add_stored(
        self, conn: Peer, body: bytes, req: AddRequest, stored: bytes | None, *, pending: bool
    ) -> None:
        """Answer an add of an entry that may be stored (``stored``: its bytes, or None)."""
        decision = stored_entry_decision(stored, req.packet)
        if decision is StoredEntry.ABSENT or (decision is StoredEntry.SAME and pending):
            # Absent, or the same bytes still on their way to the journal: store (idempotent).
            self._adds_pending[(req.ledger_id, req.entry_id)] = req.packet
            self._store(body, req, conn)
        elif decision is StoredEntry.SAME:
            self.adds_idempotent += 1
            self._answer_add(conn, req, StatusCode.OK)
        else:
            self.adds_refused_rewrite += 1
            log.warning(
                "entry_rewrite_refused",
                ledger_id=req.ledger_id,
                entry_id=req.entry_id,
                bookie_id=str(self.bookie_id),
                recovery=bool(req.flags & AddFlag.RECOVERY),
            )
            self._answer_add(conn, req, StatusCode.ENTRY_EXISTS)

    async def _stored_add_checker(self) -> None:
        """Looks up on disk the entries that adds may rewrite (rare: re-sends, recovery)."""
        while True:
            if not self._add_checks:
                await self._add_check_wake.wait()
                self._add_check_wake = trio.Event()
                continue
            conn, body, req = self._add_checks.pop(0)
            key = (req.ledger_id, req.entry_id)
            try:
                stored = await self._stored_now(key)
            except OSError as exc:
                log.error("read_failed", ledger_id=key[0], entry_id=key[1], error=str(exc))
                self._answer_add(conn, req, _io_status(exc))
                continue
            pending = self._adds_pending.get(key)
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

    def _write_lac(self, conn: Peer, body: bytes, req: WriteLacRequest) -> None:
        def answer(status: StatusCode) -> None:
            self._add_done(
                conn, encode_frame(WriteLacResponse(req.request_id, status, req.ledger_id)), 0
            )

        if self._read_only:
            return answer(StatusCode.BOOKIE_READ_ONLY)
        info = self.ledgers.get(req.ledger_id)
        if info is None:
            self.ledgers[req.ledger_id] = LedgerInfo(req.master_key)
        elif info.master_key != req.master_key:
            return answer(StatusCode.UNAUTHORIZED_ACCESS)
        self.group_commit.submit(
            body, req, lambda error: answer(StatusCode.OK if error is None else _io_status(error))
        )
        return None

    def _fence(
        self, body: bytes, req: ReadRequest | ReadLacRequest, then: Callable[[Any], None]
    ) -> bool:
        """Fence the ledger durably, then call ``then(error)``; False if the key is wrong."""
        info = self.ledgers.get(req.ledger_id)
        if info is None:
            # A ledger this bookie holds nothing of (it may have been in an ensemble and got no
            # entry, or the id is junk): fenced too, but logged at debug, as these can come by
            # the thousand; counted in ``fences_of_unknown_ledgers``.
            info = self.ledgers[req.ledger_id] = LedgerInfo(req.master_key)
            self.fences_of_unknown_ledgers += 1
            log.debug("ledger_fenced", ledger_id=req.ledger_id, known=False)
        elif info.master_key != req.master_key:
            return False
        elif not info.fenced:
            log.info("ledger_fenced", ledger_id=req.ledger_id, bookie_id=str(self.bookie_id))
        info.fenced = True  # refuse adds at once; the answer waits for the journal
        self.group_commit.submit(body, req, then)
        return True

    def _read(self, conn: Peer, body: bytes, req: ReadRequest) -> None:
        if req.flags & ReadFlag.FENCE:

            def then(error: BaseException | None) -> None:
                if error is not None:
                    self.answer_read(conn, req, _io_status(error))
                else:
                    self._read_entry(conn, req)

            if not self._fence(body, req, then):
                self.answer_read(conn, req, StatusCode.UNAUTHORIZED_ACCESS)
            return
        self._read_entry(conn, req)

    def answer_read(
        self, conn: Peer, req: ReadRequest, status: StatusCode, packet: bytes = b""
    ) -> None:
        if len(packet) >= _PARTS_MIN:
            parts = encode_read_response_parts(
                req.request_id, status, req.ledger_id, req.entry_id, packet
            )
            return self.read_done(conn, parts)
        self.read_done(
            conn,
            encode_frame(ReadResponse(req.request_id, status, req.ledger_id, req.entry_id, packet)),
        )

    def _read_entry(self, conn: Peer, req: ReadRequest) -> None:
        info = self.ledgers.get(req.ledger_id)
        if info is None:
            return self.answer_read(conn, req, StatusCode.NO_SUCH_LEDGER)
        if not 0 <= req.entry_id <= info.last_entry:
            return self.answer_read(conn, req, StatusCode.NO_SUCH_ENTRY)
        packet = self.storage.cached_entry(req.ledger_id, req.entry_id)
        if packet is not None and self.disk_reads.room(conn):
            return self.answer_read(conn, req, StatusCode.OK, packet)
        # From disk, or from the cache once there is room: an answer from the cache queued
        # past the bounds is as big as any (990 connections reading one 4 MiB entry each
        # queued 4.1 GB).
        self.disk_reads.submit(conn, req)
        return None

    def _batch_read(self, conn: Peer, req: BatchReadRequest) -> None:
        if not 1 <= req.count <= MAX_BATCH_READ_ENTRIES or req.max_bytes < 1:
            return self.read_done(
                conn,
                encode_frame(
                    ErrorResponse(
                        req.request_id,
                        StatusCode.BAD_REQUEST,
                        f"a batch read asks for 1 to {MAX_BATCH_READ_ENTRIES} entries and at "
                        f"least 1 byte, not {req.count} entries and {req.max_bytes} bytes",
                    )
                ),
            )
        info = self.ledgers.get(req.ledger_id)
        if info is None:
            return self.answer_batch_read(conn, req, StatusCode.NO_SUCH_LEDGER)
        if not 0 <= req.first_entry_id <= info.last_entry:
            return self.answer_batch_read(conn, req, StatusCode.NO_SUCH_ENTRY)
        if req.first_entry_id + req.count - 1 > info.last_entry:
            # Nothing is stored past the last entry: not looked up (nor ids past 2**63 - 1).
            req = attrs.evolve(req, count=info.last_entry - req.first_entry_id + 1)
        # Always through the disk reads (the cache is looked at there): one answer can be
        # large, so it waits for room as any read from disk does.
        self.disk_reads.submit(conn, req)
        return None

    def answer_batch_read(
        self,
        conn: Peer,
        req: BatchReadRequest,
        status: StatusCode,
        packets: Sequence[bytes] = (),
    ) -> None:
        parts = encode_batch_read_response_parts(
            req.request_id, status, req.ledger_id, req.first_entry_id, packets
        )
        self.read_done(conn, tuple(parts))

    def _answer_lac(
        self,
        conn: Peer,
        req: ReadLacRequest,
        status: StatusCode,
        lac: int = -1,
        packet: bytes = b"",
    ) -> None:
        self.read_done(
            conn,
            encode_frame(ReadLacResponse(req.request_id, status, req.ledger_id, lac, packet)),
            long_poll=bool(req.flags & ReadLacFlag.LONG_POLL),
        )

    def _read_lac(self, conn: Peer, body: bytes, req: ReadLacRequest) -> None:
        if req.flags & ReadLacFlag.FENCE:

            def then(error: BaseException | None) -> None:
                if error is not None:
                    self._answer_lac(conn, req, _io_status(error))
                else:
                    self._read_lac_now(conn, req)

            if not self._fence(body, req, then):
                self._answer_lac(conn, req, StatusCode.UNAUTHORIZED_ACCESS)
            return
        self._read_lac_now(conn, req)

    def _read_lac_now(self, conn: Peer, req: ReadLacRequest) -> None:
        info = self.ledgers.get(req.ledger_id)
        if info is None and not req.flags & ReadLacFlag.LONG_POLL:
            # A long poll waits for a ledger this bookie has not seen yet (a tailing reader
            # may ask before the first entry arrives); anything else answers at once.
            return self._answer_lac(conn, req, StatusCode.NO_SUCH_LEDGER)
        if req.flags & (ReadLacFlag.LONG_POLL | ReadLacFlag.PIGGYBACK_ENTRY):
            if not conn.spawn(self._lac_task, conn, req):
                self.read_done(conn, None, long_poll=bool(req.flags & ReadLacFlag.LONG_POLL))
            return None
        assert info is not None  # no LONG_POLL: an unknown ledger was answered above
        return self._answer_lac(conn, req, StatusCode.OK, info.last_add_confirmed)

    async def _lac_task(self, conn: Peer, req: ReadLacRequest) -> None:
        frame: bytes | None = None
        try:
            lid = req.ledger_id
            info = self.ledgers.get(lid)
            if req.flags & ReadLacFlag.LONG_POLL and (
                info is None or info.last_add_confirmed <= req.previous_lac
            ):
                lot = self._lac_waiters.setdefault(lid, trio.lowlevel.ParkingLot())
                try:
                    # Capped: a client may ask for 2^32-1 ms (49 days).
                    with trio.move_on_after(min(req.timeout_ms / 1000, self.config.max_long_poll)):
                        while True:
                            info = self.ledgers.get(lid)
                            if info is not None and info.last_add_confirmed > req.previous_lac:
                                break
                            await lot.park()
                finally:
                    if not lot and self._lac_waiters.get(lid) is lot:
                        del self._lac_waiters[lid]
            info = self.ledgers.get(lid)
            if info is None:
                frame = encode_frame(
                    ReadLacResponse(req.request_id, StatusCode.NO_SUCH_LEDGER, lid, -1)
                )
                return
            lac = info.last_add_confirmed
            packet = b""
            wanted = req.previous_lac + 1
            # The entry rides along only if the connection has room for it (else the client
            # reads it on its own): long polls are not counted as reads in flight.
            if (
                req.flags & ReadLacFlag.PIGGYBACK_ENTRY
                and 0 <= wanted <= lac
                and self.disk_reads.room(conn)
            ):
                try:
                    (found,) = await self.storage.read_entries([(lid, wanted)])
                    packet = found if found is not None and self.disk_reads.room(conn) else b""
                except OSError as exc:
                    log.error("read_failed", ledger_id=lid, entry_id=wanted, error=str(exc))
            frame = encode_frame(ReadLacResponse(req.request_id, StatusCode.OK, lid, lac, packet))
        finally:
            self.read_done(conn, frame, long_poll=bool(req.flags & ReadLacFlag.LONG_POLL))

    # --- fragments copied by this bookie --------------------------------------------------

    def _copy_fragment(self, conn: Peer, req: CopyFragmentRequest) -> None:
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

    def _on_committed(
        self, requests: list[Request], sinks: list[Any], error: BaseException | None
    ) -> None:
        ledgers = self.ledgers
        waiters = self._lac_waiters
        if error is not None:
            status = _io_status(error)
            if status is StatusCode.BOOKIE_READ_ONLY:
                self._on_disk_full(str(error))
            for req, sink in zip(requests, sinks, strict=True):
                if type(req) is AddRequest:
                    self._adds_pending.pop((req.ledger_id, req.entry_id), None)
                    self._answer_add(sink, req, status)
                else:
                    sink(error)
            return
        woken: set[int] = set()
        ok_frame = encode_add_response
        pending = self._adds_pending
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


def _io_status(error: BaseException) -> StatusCode:
    if isinstance(error, OSError) and error.errno in _FULL:
        return StatusCode.BOOKIE_READ_ONLY
    return StatusCode.IO_ERROR
