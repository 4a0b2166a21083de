"""The request handler: admission, then dispatch to the writes and the reads.

Connections hand each decoded request to :meth:`RequestHandler.handle`: it counts it, checks
the client's right to it (``_access``) and the limits (``_admission``), and dispatches it by
its type. Adds, explicit LACs, fences and COPY_FRAGMENT go to :class:`Writes` (``_writes``:
the group commits answer them once durable); reads of entries and of the LAC, long polls
included, to :class:`Reads` (``_reads``: at once, or through the disk reads). What is counted
on the way is in one :class:`BookieStats` record (``_stats``), which the metrics collector and
``/health`` read. The handler knows nothing of the bookie's lifecycle: the read-only reasons
set and a callback for a full disk are passed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

import anyio

from walkit._core.auth import Authenticator, Authorization
from walkit._core.rereplication import FragmentCopies
from walkit._core.types import BookieId
from walkit._core.wire import (
    AddRequest,
    AuthRequest,
    AuthResponse,
    BatchReadRequest,
    CopyFragmentRequest,
    ErrorResponse,
    Message,
    ReadLacFlag,
    ReadLacRequest,
    ReadRequest,
    StatusCode,
    WriteLacRequest,
    encode_frame,
)
from walkit_bookie._config import BookieConfig
from walkit_bookie.server._access import LedgerAccess
from walkit_bookie.server._admission import RequestAdmission
from walkit_bookie.server._badinput import BadInputLog
from walkit_bookie.server._peer import Peer
from walkit_bookie.server._reads import Reads
from walkit_bookie.server._state import RequestState
from walkit_bookie.server._stats import BookieStats
from walkit_bookie.server._writes import Writes
from walkit_bookie.storage import BookieStorage, GroupCommit, LedgerInfo

#: Up to this many client connections a lone add may be committed by its reader
#: (``GroupCommit.flush``).
_COMMIT_HERE_MAX_CONNECTIONS = 64


@final
class RequestHandler:
    """Answers a bookie's requests; ``await run()`` runs its tasks (group commits, disk reads).

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
        self.storage = storage
        #: Checks clients' credentials once per connection (None: authentication is off).
        self.authenticator = authenticator
        #: Who may do what (None: every authenticated principal may do all).
        self.authorization = authorization
        #: The bookie's address once bound (for log lines).
        self.bookie_id: BookieId | None = None
        self.stats = BookieStats()
        self.admission = RequestAdmission(config, self.stats)
        self.capacity = self.admission.capacity
        #: Open client connections (``_connection.Connection``), and how many per address.
        self.client_connections: set[Any] = set()
        self.connections_by_address: dict[str, int] = {}
        #: Malformed input, counted by kind; warnings about it are rate-limited.
        self.bad_input = BadInputLog(config.bad_input_log_burst, config.bad_input_log_interval)
        state = RequestState(config, storage, self.stats, self.admission)
        self.cork = state.cork
        #: What this bookie knows of each ledger (filled from the storage when it opens).
        self._ledgers = state.ledgers
        #: With authentication on: whose ledger is whose, and who may do what (``_access``).
        self.access = LedgerAccess(authorization, self.bad_input, lambda: self._ledgers)
        self.writes = Writes(
            state,
            read_only=read_only,
            on_disk_full=on_disk_full,
            bookie_id=lambda: self.bookie_id,
        )
        self.reads = Reads(state, self.writes, self.client_connections)
        self.disk_reads = self.reads.disk_reads

    async def run(self) -> None:
        """The group commits, the disk readers and the checker of rewrites, until cancelled."""
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self.writes.run)
            tasks.start_soon(self.reads.run)

    @property
    def ledgers(self) -> dict[int, LedgerInfo]:
        """What this bookie knows of each ledger (by id)."""
        return self._ledgers

    @ledgers.setter
    def ledgers(self, ledgers: dict[int, LedgerInfo]) -> None:
        # In place: the writes and the reads hold this dict.
        self._ledgers.clear()
        self._ledgers.update(ledgers)

    @property
    def group_commit(self) -> GroupCommit:
        return self.writes.group_commit

    @property
    def fragment_copier(self) -> FragmentCopies | None:
        return self.writes.fragment_copier

    @fragment_copier.setter
    def fragment_copier(self, copier: FragmentCopies | None) -> None:
        self.writes.fragment_copier = copier

    @property
    def saturated(self) -> bool:
        return self.admission.saturated

    @property
    def degraded(self) -> list[str]:
        """Which request queues are full now (empty when none is): what ``/health`` says."""
        return self.admission.degraded

    @property
    def unauthorized(self) -> dict[str, int]:
        """Requests refused by the ``--authorize`` rules, by operation (admin included)."""
        return self.access.unauthorized

    @property
    def reads_refused_unsent(self) -> int:
        """Reads answered TOO_MANY_REQUESTS because their connection's answers are not read."""
        return self.disk_reads.refused

    def answers_taken(self, conn: Peer) -> None:
        self.disk_reads.answers_taken(conn)

    def defer_commits(self) -> None:
        self.writes.group_commit.defer_wake()

    def flush_commits(self) -> None:
        # Past a few dozen connections a lone add per chunk is rare, and the check for other
        # ready tasks costs a step per watched socket.
        self.writes.group_commit.flush(here=self.stats.connections <= _COMMIT_HERE_MAX_CONNECTIONS)

    # --- dispatch -------------------------------------------------------------------------------

    def handle(self, conn: Peer, body: bytes, message: Message) -> None:
        stats = self.stats
        stats.requests += 1
        if self.authenticator is not None and not self.access.allowed(conn, message):
            return
        why = self.admission.refusal(conn, message)
        if why is not None:
            return self.admission.refuse(conn, message, why)
        conn.outstanding += 1
        match message:
            case AddRequest():
                stats.adds_in_flight += 1
                stats.add_bytes_in_flight += len(message.packet)
                self.writes.add(conn, body, message)
            case ReadRequest():
                self._read_taken()
                self.reads.read(conn, body, message)
            case ReadLacRequest():
                if message.flags & ReadLacFlag.LONG_POLL:
                    stats.long_polls += 1  # apart from reads: a wait must not stop reading
                else:
                    stats.reads_in_flight += 1
                self.reads.read_lac(conn, body, message)
            case BatchReadRequest():
                self._read_taken()
                self.reads.batch_read(conn, message)
            case CopyFragmentRequest():
                self.writes.copy_fragment(conn, message)
            case WriteLacRequest():
                stats.adds_in_flight += 1
                self.writes.write_lac(conn, body, message)
            case AuthRequest():
                conn.outstanding -= 1
                self._auth_again(conn, message)
            case _:
                conn.outstanding -= 1
                why = f"{type(message).__name__} is not a request"
                conn.send(
                    encode_frame(ErrorResponse(message.request_id, StatusCode.BAD_REQUEST, why))
                )

    def _read_taken(self) -> None:
        self.stats.reads_in_flight += 1
        if self.stats.reads_in_flight >= self.config.max_inflight_reads:
            self.disk_reads.slots_taken()

    def add_local_copy(self, conn: Peer, req: AddRequest) -> None:
        """An add flagged RECOVERY | COPY from this bookie's own autorecovery worker, in this
        process: checked and stored exactly as one from the network, answered to ``conn``.

        No principal claims the ledger (the bookie trusts itself): its next add or fence from
        the network registers an owner, as after a restart, when no ledger has one."""
        stats = self.stats
        stats.requests += 1
        conn.outstanding += 1
        stats.adds_in_flight += 1
        stats.add_bytes_in_flight += len(req.packet)
        # The copies' store never writes the frame body (only the entry log gets the packet);
        # the body only sizes the copies' groups, which the packet does as well.
        self.writes.add(conn, req.packet, req)

    def _auth_again(self, conn: Peer, req: AuthRequest) -> None:
        """AUTH on a connection that is served already (authentication off, so clients can
        turn it on before bookies do; or done, e.g. by its TLS certificate): OK, as the
        principal it has; the credentials change nothing."""
        principal = conn.principal or ""
        conn.send(encode_frame(AuthResponse(req.request_id, StatusCode.OK, principal)))
