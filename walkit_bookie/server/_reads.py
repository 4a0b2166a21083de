"""Reads: entries (one or a batch), the LAC, and long polls of the LAC.

An entry in the write cache is answered at once when its connection has room for the answer;
others go to the disk reads (``_disk_reads``), which answer through :meth:`Reads.answer_read`.
A fencing read first fences the ledger durably (``Writes.fence``). A long poll waits on its
ledger's parking lot, which the group commit wakes when the ledger's LAC may have moved.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

import anyio
import attrs

from walkit._core.wire import (
    MAX_BATCH_READ_ENTRIES,
    BatchReadRequest,
    ErrorResponse,
    ReadFlag,
    ReadLacFlag,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    StatusCode,
    encode_batch_read_response_parts,
    encode_frame,
    encode_read_response_parts,
)
from walkit.shared import ParkingLot, get_logger
from walkit_bookie.server._disk_reads import DiskReads
from walkit_bookie.server._peer import Peer
from walkit_bookie.server._state import RequestState
from walkit_bookie.server._writes import Writes, io_status

__all__ = ["Reads"]

log = get_logger(__name__)

#: Read answers with a packet at least this large are sent in parts (header, packet): no copy
#: of the packet into a frame (for small ones, one join costs less than a writev of two).
_PARTS_MIN = 16 * 1024


@final
class Reads:
    """Reads of one bookie; ``await run()`` runs the disk readers."""

    def __init__(self, state: RequestState, writes: Writes, client_connections: set[Any]) -> None:
        self.config, self.storage, self.stats = state.config, state.storage, state.stats
        self._state = state
        self._ledgers = state.ledgers
        self._writes = writes
        #: The open client connections (the disk reads close those whose peers read nothing).
        self.client_connections = client_connections
        #: Reads of entries not in the write cache, and the bound on their answers.
        self.disk_reads = DiskReads(self)

    async def run(self) -> None:
        await self.disk_reads.run()

    def read_done(
        self, conn: Peer, frame: bytes | tuple[bytes, ...] | None, long_poll: bool = False
    ) -> None:
        conn.outstanding -= 1
        stats = self.stats
        if frame is not None:
            if isinstance(frame, tuple):
                conn.send_parts(frame)
            else:
                conn.send(frame)
            stats.reads_answered += 1
        if long_poll:
            stats.long_polls -= 1
            return
        stats.reads_in_flight -= 1
        if self._state.admission.capacity:
            self._state.admission.freed()

    # --- entries --------------------------------------------------------------------------

    def read(self, conn: Peer, body: bytes, req: ReadRequest) -> None:
        if req.flags & ReadFlag.FENCE:

            def then(error: BaseException | None) -> None:
                if error is not None:
                    self.answer_read(conn, req, io_status(error))
                else:
                    self._read_entry(conn, req)

            if not self._writes.fence(body, req, then):
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
        info = self._ledgers.get(req.ledger_id)
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

    def batch_read(self, conn: Peer, req: BatchReadRequest) -> None:
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
        info = self._ledgers.get(req.ledger_id)
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

    # --- the LAC and long polls -------------------------------------------------------------

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

    def read_lac(self, conn: Peer, body: bytes, req: ReadLacRequest) -> None:
        if req.flags & ReadLacFlag.FENCE:

            def then(error: BaseException | None) -> None:
                if error is not None:
                    self._answer_lac(conn, req, io_status(error))
                else:
                    self._read_lac_now(conn, req)

            if not self._writes.fence(body, req, then):
                self._answer_lac(conn, req, StatusCode.UNAUTHORIZED_ACCESS)
            return
        self._read_lac_now(conn, req)

    def _read_lac_now(self, conn: Peer, req: ReadLacRequest) -> None:
        info = self._ledgers.get(req.ledger_id)
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
            info = self._ledgers.get(lid)
            if req.flags & ReadLacFlag.LONG_POLL and (
                info is None or info.last_add_confirmed <= req.previous_lac
            ):
                await self._wait_for_lac(lid, req)
            info = self._ledgers.get(lid)
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

    async def _wait_for_lac(self, lid: int, req: ReadLacRequest) -> None:
        """Until the ledger's LAC passes the one the poll has, or its timeout (capped: a
        client may ask for 2^32-1 ms, 49 days)."""
        lot = self._state.lac_waiters.setdefault(lid, ParkingLot())
        try:
            with anyio.move_on_after(min(req.timeout_ms / 1000, self.config.max_long_poll)):
                while True:
                    info = self._ledgers.get(lid)
                    if info is not None and info.last_add_confirmed > req.previous_lac:
                        break
                    await lot.park()
        finally:
            if not lot and self._state.lac_waiters.get(lid) is lot:
                del self._state.lac_waiters[lid]
