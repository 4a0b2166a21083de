"""The bookie: request semantics (adds, reads, fencing, LAC, long polls) over a storage."""

from __future__ import annotations

import errno
import functools
import random
import struct
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, final

import trio
from prometheus_client import CollectorRegistry

from walkit._core.digest import HEADER_SIZE, read_header
from walkit._core.types import BookieId
from walkit._core.wire import (
    PROTOCOL_VERSION,
    AddFlag,
    AddRequest,
    AddResponse,
    ErrorResponse,
    Message,
    MessageType,
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
    encode_frame,
)
from walkit._logging import get_logger
from walkit.errors import BookieIOError, WalkitError
from walkit.metadata import MetadataStore
from walkit.net import Network, TcpNetwork, TlsNetwork
from walkit_bookie._admin import BookieCollector, serve_admin
from walkit_bookie._badinput import BadInputLog
from walkit_bookie._config import BookieConfig
from walkit_bookie._gc import GarbageCollector, GcReport
from walkit_bookie._journal import GroupCommit
from walkit_bookie._ledger import (
    LedgerInfo,
    StoredEntry,
    apply_request,
    packet_lac,
    stored_entry_decision,
)
from walkit_bookie._registration import Registration
from walkit_bookie._server import Connection, handle_stream
from walkit_bookie._storage import BookieStorage, DiskStorage

log = get_logger(__name__)

_DISK_READERS = 2
_DISK_READ_BATCH = 256
_FULL = (errno.ENOSPC, errno.EDQUOT)
# An OK AddResponse frame, built in one pack (the hot path answers one per add); it must equal
# encode_frame(AddResponse(...)), which the tests check.
_ADD_OK = struct.Struct(">IBBQhQq")
_ADD_OK_HEAD = (_ADD_OK.size - 4, PROTOCOL_VERSION, MessageType.ADD_RESPONSE.value)


@final
class Bookie:
    """A bookie server: ``await Bookie(config).run()`` serves until cancelled.

    ``run`` reports the bound :class:`~walkit.BookieId` through ``task_status.started`` once the
    storage is recovered and connections are answered; on cancellation it flushes and closes
    its storage. ``network`` defaults to TCP, ``storage`` to :class:`DiskStorage` on the
    configured data dirs. With ``metadata`` the bookie takes its cluster instance id from the
    store, checks its cookie there, registers itself (read-only when it is), registers again
    through a new store (``reopen_metadata()``, default ``open_metadata_store(metadata.url)``)
    when the session is lost, and garbage-collects the ledgers deleted there. With
    ``config.http_port`` set it serves ``/metrics`` (from ``registry``, a fresh
    ``CollectorRegistry`` by default), ``/health`` and ``/admin/gc`` over HTTP.
    """

    def __init__(
        self,
        config: BookieConfig,
        *,
        network: Network | None = None,
        storage: BookieStorage | None = None,
        metadata: MetadataStore | None = None,
        rng: random.Random | None = None,
        registry: CollectorRegistry | None = None,
        reopen_metadata: Callable[[], Awaitable[MetadataStore]] | None = None,
    ) -> None:
        self.config = config
        self.storage: BookieStorage = storage if storage is not None else DiskStorage(config)
        self._network: Network = network if network is not None else TcpNetwork()
        tls = config.tls_server_context()
        if tls is not None:  # every connection is TLS; a plain client gets TLS_REQUIRED
            self._network = TlsNetwork(self._network, server_context=tls)
        self._metadata = metadata
        self._reopen_metadata = reopen_metadata
        self._rng = rng if rng is not None else random.Random()
        self.bookie_id: BookieId | None = None
        self.capacity = trio.lowlevel.ParkingLot()
        #: Requests taken off the wire so far, and those accepted but not yet answered.
        self.requests = 0
        self.adds_answered = 0
        self.reads_answered = 0
        self.connections = 0
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
        #: Malformed input, counted by kind; warnings about it are rate-limited.
        self.bad_input = BadInputLog(config.bad_input_log_burst, config.bad_input_log_interval)
        #: Where the HTTP admin endpoint listens (with ``config.http_port`` set), once started.
        self.admin_address: tuple[str, int] | None = None
        #: The prometheus registry the bookie's metrics are collected into.
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(BookieCollector(self))
        self.adds_in_flight = 0
        self.reads_in_flight = 0
        self._ledgers: dict[int, LedgerInfo] = {}
        self._lac_waiters: dict[int, trio.lowlevel.ParkingLot] = {}
        self._disk_queue: list[tuple[Connection, ReadRequest]] = []
        #: Packets of adds on their way to the journal, by (ledger, entry).
        self._adds_pending: dict[tuple[int, int], bytes] = {}
        #: Adds waiting for a disk lookup of the entry they would rewrite.
        self._add_checks: list[tuple[Connection, bytes, AddRequest]] = []
        self._add_check_wake = trio.Event()
        #: Adds answered from the stored entry (same bytes), and adds refused (other bytes).
        self.adds_idempotent = 0
        self.adds_refused_rewrite = 0
        self._disk_wake = trio.Event()
        self._read_only_reasons: set[str] = set()
        self._mode_changed = trio.Event()
        self._ready = trio.Event()
        self._registration: Registration | None = None
        #: Garbage collection and compaction (rounds on a schedule, or ``collect_garbage()``).
        self.gc = GarbageCollector(
            self,
            lambda: None if self._registration is None else self._registration.store,
            lambda: None if self._registration is None else self._registration.instance_id,
        )
        self._started = False
        self.group_commit = GroupCommit(
            self.storage,
            self._on_committed,
            max_wait=config.group_commit_max_wait,
            max_bytes=config.group_commit_max_bytes,
        )

    # --- state -------------------------------------------------------------------------------

    @property
    def read_only(self) -> bool:
        return bool(self._read_only_reasons)

    @property
    def saturated(self) -> bool:
        return (
            self.adds_in_flight >= self.config.max_inflight_adds
            or self.reads_in_flight >= self.config.max_inflight_reads
        )

    @property
    def ledger_count(self) -> int:
        return len(self._ledgers)

    def ledger_ids(self) -> list[int]:
        """The ledgers this bookie holds state for."""
        return list(self._ledgers)

    @property
    def registration(self) -> Registration | None:
        """The metadata session (None without a metadata store)."""
        return self._registration

    def ledger_info(self, ledger_id: int) -> LedgerInfo | None:
        """A copy of what this bookie knows of a ledger (None if nothing)."""
        info = self._ledgers.get(ledger_id)
        return None if info is None else info.copy()

    def _set_read_only(self, reason: str, detail: str = "") -> None:
        if reason not in self._read_only_reasons:
            was = self.read_only
            self._read_only_reasons.add(reason)
            log.warning(
                "bookie_read_only", reason=reason, detail=detail, bookie_id=str(self.bookie_id)
            )
            if not was:
                self._mode_changed.set()

    def _clear_read_only(self, reason: str) -> None:
        if reason in self._read_only_reasons:
            self._read_only_reasons.discard(reason)
            if not self.read_only:
                log.info("bookie_writable", bookie_id=str(self.bookie_id))
                self._mode_changed.set()

    # --- run ---------------------------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[BookieId] = trio.TASK_STATUS_IGNORED
    ) -> None:
        if self._started:
            raise BookieIOError("a Bookie object runs once; make a new one to restart")
        self._started = True
        try:
            async with trio.open_nursery() as nursery:
                bookie_id = await self._start(nursery)
                task_status.started(bookie_id)
        except BaseExceptionGroup as group:
            raise _collapse(group) from None
        finally:
            with trio.CancelScope(shield=True):
                await self._shutdown()

    async def _start(self, nursery: trio.Nursery) -> BookieId:
        config = self.config
        instance_id = uuid.UUID(int=self._rng.getrandbits(128), version=4).hex
        known = False
        if self._metadata is not None:
            self._registration = Registration(
                self._metadata, config, reopen=self._reopen_metadata, rng=self._rng
            )
            instance_id = await self._registration.cluster_instance_id()
            known = True
        port = config.port
        recorded = self.storage.recorded_bookie_id()
        if port == 0 and recorded is not None:
            port = recorded.port
        serve = functools.partial(
            self._network.serve,
            config.host,
            port,
            functools.partial(handle_stream, self, self._ready),
        )
        try:
            bookie_id: BookieId = await nursery.start(serve)
        except OSError as exc:
            raise BookieIOError(f"cannot listen on {config.host}:{port}: {exc}") from exc
        if config.advertised_address is not None:
            # Listening on a wildcard (or behind NAT): register what clients can reach.
            bookie_id = BookieId(config.advertised_address, bookie_id.port)
        self.bookie_id = bookie_id
        if self._registration is not None:
            await self._registration.check_cookie(bookie_id, self.storage.recorded_bookie_id())
        self._ledgers = await self.storage.open(bookie_id, instance_id, instance_id_is_known=known)
        if self._registration is not None:
            await self._registration.store_cookie(bookie_id, config)
        self._check_disk()
        nursery.start_soon(self.group_commit.run)
        nursery.start_soon(self._checkpoint_loop)
        nursery.start_soon(self._disk_check_loop)
        nursery.start_soon(self.gc.run)
        for _ in range(_DISK_READERS):
            nursery.start_soon(self._disk_reader)
        nursery.start_soon(self._stored_add_checker)
        if config.http_port is not None:
            self.admin_address = await nursery.start(
                serve_admin, self, config.http_host or config.host, config.http_port, self.registry
            )
        if self._registration is not None:
            if self.admin_address is not None:
                self._registration.info["http_port"] = self.admin_address[1]
            await nursery.start(self._registration.run, bookie_id, self._mode_source)
        if config.autorecovery and self._metadata is not None:
            from walkit.autorecovery import run_bookie_autorecovery

            nursery.start_soon(
                functools.partial(
                    run_bookie_autorecovery,
                    self._metadata.url,
                    bookie_id,
                    lost_bookie_delay=config.lost_bookie_delay,
                    tls_files=(config.tls_cert, config.tls_key, config.tls_ca),
                    registry=self.registry,
                )
            )
        self._ready.set()
        log.info(
            "bookie_started",
            bookie_id=str(bookie_id),
            ledgers=len(self._ledgers),
            read_only=self.read_only,
            data_dirs=list(config.data_dirs),
        )
        return bookie_id

    def _mode_source(self) -> tuple[bool, trio.Event]:
        """(read only now, an event set at the next change) for the registration task."""
        if self._mode_changed.is_set():
            self._mode_changed = trio.Event()
        return self.read_only, self._mode_changed

    async def _shutdown(self) -> None:
        try:
            await self.storage.aclose()
        except (OSError, WalkitError) as exc:
            log.error("storage_close_failed", error=str(exc))
        if self._registration is not None:
            await self._registration.aclose()
        log.info("bookie_stopped", bookie_id=str(self.bookie_id))

    async def _checkpoint_loop(self) -> None:
        while True:
            with trio.move_on_after(self.config.checkpoint_interval):
                await self.storage.checkpoint_due()
            try:
                await self.storage.checkpoint()
            except (BookieIOError, OSError) as exc:
                self._set_read_only("checkpoint_failed", str(exc))
            else:
                self._clear_read_only("checkpoint_failed")

    def _check_disk(self) -> None:
        usage = self.storage.disk_usage()
        if usage >= self.config.disk_usage_threshold:
            self._set_read_only("disk_usage", f"{usage:.3f} >= {self.config.disk_usage_threshold}")
        elif usage < self.config.writable_again_below:
            self._clear_read_only("disk_usage")
            self._clear_read_only("disk_full")

    async def _disk_check_loop(self) -> None:
        while True:
            await trio.sleep(self.config.disk_check_interval)
            self._check_disk()

    async def forget_ledger(self, ledger_id: int) -> None:
        """Remove a ledger's entries from the index and its state (garbage collection's hook)."""
        await self.forget_ledgers([ledger_id])

    async def forget_ledgers(self, ledger_ids: Iterable[int]) -> None:
        """Forget several ledgers (one checkpoint for all). Their entry logs are reclaimed by
        the next garbage collection round or compaction."""
        ids = list(ledger_ids)
        for ledger_id in ids:
            self._ledgers.pop(ledger_id, None)
        await self.storage.delete_ledgers(ids)

    async def collect_garbage(self, compaction: str | None = None) -> GcReport:
        """Run a garbage collection round now: forget ledgers deleted in the metadata store
        (with a store), remove entry logs with nothing live, and with ``compaction``
        ("minor" or "major") compact entry logs below that threshold."""
        return await self.gc.collect(compaction)

    # --- requests ----------------------------------------------------------------------------

    @property
    def degraded(self) -> list[str]:
        """Which request queues are full now (empty when none is): what ``/health`` says."""
        config = self.config
        full = []
        if self.adds_in_flight >= config.max_inflight_adds:
            full.append("adds")
        if self.reads_in_flight >= config.max_inflight_reads:
            full.append("reads")
        if self.long_polls >= config.max_long_polls:
            full.append("long_polls")
        if self.connections >= config.max_connections:
            full.append("connections")
        return full

    def _refuse(self, conn: Connection, message: Message, why: str) -> None:
        self.requests_refused += 1
        conn.send(
            encode_frame(ErrorResponse(message.request_id, StatusCode.TOO_MANY_REQUESTS, why))
        )

    def handle(self, conn: Connection, body: bytes, message: Message) -> None:
        kind = type(message)
        self.requests += 1
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
            self._add(conn, body, message)  # type: ignore[arg-type]
        elif kind is ReadRequest:
            self.reads_in_flight += 1
            self._read(conn, body, message)  # type: ignore[arg-type]
        elif kind is ReadLacRequest:
            self.reads_in_flight += 1
            self._read_lac(conn, body, message)  # type: ignore[arg-type]
        elif kind is WriteLacRequest:
            self.adds_in_flight += 1
            self._write_lac(conn, body, message)  # type: ignore[arg-type]
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

    def _add_done(self, conn: Connection, frame: bytes) -> None:
        conn.outstanding -= 1
        conn.send(frame)
        self.adds_answered += 1
        self.adds_in_flight -= 1
        if self.capacity and self.adds_in_flight < self.config.max_inflight_adds:
            self.capacity.unpark_all()

    def _read_done(self, conn: Connection, frame: bytes | None, long_poll: bool = False) -> None:
        conn.outstanding -= 1
        if frame is not None:
            conn.send(frame)
            self.reads_answered += 1
        if long_poll:
            self.long_polls -= 1
            return
        self.reads_in_flight -= 1
        if self.capacity and self.reads_in_flight < self.config.max_inflight_reads:
            self.capacity.unpark_all()

    def _answer_add(self, conn: Connection, req: AddRequest, status: StatusCode) -> None:
        self._add_done(
            conn, encode_frame(AddResponse(req.request_id, status, req.ledger_id, req.entry_id))
        )

    def _add(self, conn: Connection, body: bytes, req: AddRequest) -> None:
        if self._read_only_reasons:
            return self._answer_add(conn, req, StatusCode.BOOKIE_READ_ONLY)
        packet = req.packet
        if req.entry_id < 0 or len(packet) < HEADER_SIZE:
            return self._answer_add(conn, req, StatusCode.BAD_REQUEST)
        header = read_header(packet)
        if header.ledger_id != req.ledger_id or header.entry_id != req.entry_id:
            return self._answer_add(conn, req, StatusCode.BAD_REQUEST)
        info = self._ledgers.get(req.ledger_id)
        if info is None:
            self._ledgers[req.ledger_id] = LedgerInfo(req.master_key)
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
        self.group_commit.submit(body, req, conn)
        return None

    def _add_stored(
        self, conn: Connection, body: bytes, req: AddRequest, stored: bytes | None, *, pending: bool
    ) -> None:
        """Answer an add of an entry that may be stored (``stored``: its bytes, or None)."""
        decision = stored_entry_decision(stored, req.packet)
        if decision is StoredEntry.ABSENT or (decision is StoredEntry.SAME and pending):
            # Absent, or the same bytes still on their way to the journal: store (idempotent).
            self._adds_pending[(req.ledger_id, req.entry_id)] = req.packet
            self.group_commit.submit(body, req, conn)
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
                (stored,) = await self.storage.read_entries([key])
            except OSError as exc:
                log.error("read_failed", ledger_id=key[0], entry_id=key[1], error=str(exc))
                self._answer_add(conn, req, _io_status(exc))
                continue
            pending = self._adds_pending.get(key)
            self._add_stored(
                conn, body, req, stored if pending is None else pending, pending=pending is not None
            )

    def _write_lac(self, conn: Connection, body: bytes, req: WriteLacRequest) -> None:
        def answer(status: StatusCode) -> None:
            self._add_done(
                conn, encode_frame(WriteLacResponse(req.request_id, status, req.ledger_id))
            )

        if self._read_only_reasons:
            return answer(StatusCode.BOOKIE_READ_ONLY)
        info = self._ledgers.get(req.ledger_id)
        if info is None:
            self._ledgers[req.ledger_id] = LedgerInfo(req.master_key)
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
        info = self._ledgers.get(req.ledger_id)
        if info is None:
            info = self._ledgers[req.ledger_id] = LedgerInfo(req.master_key)
        elif info.master_key != req.master_key:
            return False
        if not info.fenced:
            log.info("ledger_fenced", ledger_id=req.ledger_id, bookie_id=str(self.bookie_id))
        info.fenced = True  # refuse adds at once; the answer waits for the journal
        self.group_commit.submit(body, req, then)
        return True

    def _read(self, conn: Connection, body: bytes, req: ReadRequest) -> None:
        if req.flags & ReadFlag.FENCE:

            def then(error: BaseException | None) -> None:
                if error is not None:
                    self._answer_read(conn, req, _io_status(error))
                else:
                    self._read_entry(conn, req)

            if not self._fence(body, req, then):
                self._answer_read(conn, req, StatusCode.UNAUTHORIZED_ACCESS)
            return
        self._read_entry(conn, req)

    def _answer_read(
        self, conn: Connection, req: ReadRequest, status: StatusCode, packet: bytes = b""
    ) -> None:
        self._read_done(
            conn,
            encode_frame(ReadResponse(req.request_id, status, req.ledger_id, req.entry_id, packet)),
        )

    def _read_entry(self, conn: Connection, req: ReadRequest) -> None:
        info = self._ledgers.get(req.ledger_id)
        if info is None:
            return self._answer_read(conn, req, StatusCode.NO_SUCH_LEDGER)
        if not 0 <= req.entry_id <= info.last_entry:
            return self._answer_read(conn, req, StatusCode.NO_SUCH_ENTRY)
        packet = self.storage.cached_entry(req.ledger_id, req.entry_id)
        if packet is not None:
            return self._answer_read(conn, req, StatusCode.OK, packet)
        self._disk_queue.append((conn, req))
        self._disk_wake.set()
        return None

    async def _disk_reader(self) -> None:
        while True:
            if not self._disk_queue:
                await self._disk_wake.wait()
                self._disk_wake = trio.Event()
                continue
            batch = self._disk_queue[:_DISK_READ_BATCH]
            del self._disk_queue[:_DISK_READ_BATCH]
            try:
                packets = await self.storage.read_entries(
                    [(req.ledger_id, req.entry_id) for _, req in batch]
                )
            except OSError as exc:
                log.error("read_failed", error=str(exc), requests=len(batch))
                for conn, req in batch:
                    self._answer_read(conn, req, StatusCode.IO_ERROR)
                continue
            for (conn, req), packet in zip(batch, packets, strict=True):
                if packet is None:
                    self._answer_read(conn, req, StatusCode.NO_SUCH_ENTRY)
                else:
                    self._answer_read(conn, req, StatusCode.OK, packet)

    def _answer_lac(
        self,
        conn: Connection,
        req: ReadLacRequest,
        status: StatusCode,
        lac: int = -1,
        packet: bytes = b"",
    ) -> None:
        self._read_done(
            conn,
            encode_frame(ReadLacResponse(req.request_id, status, req.ledger_id, lac, packet)),
            long_poll=bool(req.flags & ReadLacFlag.LONG_POLL),
        )

    def _read_lac(self, conn: Connection, body: bytes, req: ReadLacRequest) -> None:
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

    def _read_lac_now(self, conn: Connection, req: ReadLacRequest) -> None:
        info = self._ledgers.get(req.ledger_id)
        if info is None and not req.flags & ReadLacFlag.LONG_POLL:
            # A long poll waits for a ledger this bookie has not seen yet (a tailing reader
            # may ask before the first entry arrives); anything else answers at once.
            return self._answer_lac(conn, req, StatusCode.NO_SUCH_LEDGER)
        if req.flags & (ReadLacFlag.LONG_POLL | ReadLacFlag.PIGGYBACK_ENTRY):
            if not conn.spawn(self._lac_task, conn, req):
                self._read_done(conn, None, long_poll=bool(req.flags & ReadLacFlag.LONG_POLL))
            return None
        assert info is not None  # no LONG_POLL: an unknown ledger was answered above
        return self._answer_lac(conn, req, StatusCode.OK, info.last_add_confirmed)

    async def _lac_task(self, conn: Connection, req: ReadLacRequest) -> None:
        frame: bytes | None = None
        try:
            lid = req.ledger_id
            info = self._ledgers.get(lid)
            if req.flags & ReadLacFlag.LONG_POLL and (
                info is None or info.last_add_confirmed <= req.previous_lac
            ):
                lot = self._lac_waiters.setdefault(lid, trio.lowlevel.ParkingLot())
                try:
                    # Capped: a client may ask for 2^32-1 ms (49 days).
                    with trio.move_on_after(min(req.timeout_ms / 1000, self.config.max_long_poll)):
                        while True:
                            info = self._ledgers.get(lid)
                            if info is not None and info.last_add_confirmed > req.previous_lac:
                                break
                            await lot.park()
                finally:
                    if not lot and self._lac_waiters.get(lid) is lot:
                        del self._lac_waiters[lid]
            info = self._ledgers.get(lid)
            if info is None:
                frame = encode_frame(
                    ReadLacResponse(req.request_id, StatusCode.NO_SUCH_LEDGER, lid, -1)
                )
                return
            lac = info.last_add_confirmed
            packet = b""
            wanted = req.previous_lac + 1
            if req.flags & ReadLacFlag.PIGGYBACK_ENTRY and 0 <= wanted <= lac:
                try:
                    (found,) = await self.storage.read_entries([(lid, wanted)])
                    packet = found or b""
                except OSError as exc:
                    log.error("read_failed", ledger_id=lid, entry_id=wanted, error=str(exc))
            frame = encode_frame(ReadLacResponse(req.request_id, StatusCode.OK, lid, lac, packet))
        finally:
            self._read_done(conn, frame, long_poll=bool(req.flags & ReadLacFlag.LONG_POLL))

    # --- group commit ------------------------------------------------------------------------

    def _on_committed(
        self, requests: list[Request], sinks: list[Any], error: BaseException | None
    ) -> None:
        ledgers = self._ledgers
        waiters = self._lac_waiters
        if error is not None:
            status = _io_status(error)
            if status is StatusCode.BOOKIE_READ_ONLY:
                self._set_read_only("disk_full", str(error))
            for req, sink in zip(requests, sinks, strict=True):
                if type(req) is AddRequest:
                    self._adds_pending.pop((req.ledger_id, req.entry_id), None)
                    self._answer_add(sink, req, status)
                else:
                    sink(error)
            return
        woken: set[int] = set()
        ok_frame = _ADD_OK.pack
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
                self._add_done(sink, ok_frame(*_ADD_OK_HEAD, req.request_id, 0, lid, req.entry_id))
            else:
                sink(None)
        for lid in woken:
            lot = waiters.get(lid)
            if lot is not None:
                lot.unpark_all()


def _io_status(error: BaseException) -> StatusCode:
    if isinstance(error, OSError) and error.errno in _FULL:
        return StatusCode.BOOKIE_READ_ONLY
    return StatusCode.IO_ERROR


def _collapse(group: BaseExceptionGroup[Any]) -> BaseException:
    """The one real error of a nursery's group (no ExceptionGroup escapes a public call)."""
    leaves: list[BaseException] = []

    def walk(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for sub in exc.exceptions:
                walk(sub)
        elif not isinstance(exc, trio.Cancelled):
            leaves.append(exc)

    walk(group)
    if not leaves:
        return group
    for leaf in leaves:
        if isinstance(leaf, WalkitError):
            return leaf
    return leaves[0]
