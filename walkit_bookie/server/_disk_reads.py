"""Reads that cannot be answered at once (entries not in the write cache, and cached ones
whose connection or the bookie has no room for the answer): queued, read in batches by two
reader tasks (from the cache where they are still there), and answered only while their
connection and the bookie have room for the answers.

Such answers arrive after the request was taken, so a connection's reader cannot hold them
back: without this bound one connection's reads sent at once queued 9.5 GB, and 400
connections asking one 4 MiB entry each 1.67 GB. A read without room waits: until answers are
taken, or a read slot is wanted (then it is refused TOO_MANY_REQUESTS: waiting reads must not
hold the slots), and, while the total is at its bound, connections whose peers take nothing
are closed to make room (``evict_unread_after``).

Waiting reads are queued per client (its principal, else its address) and taken in turns, one
of each client's at a time, and a client whose read was answered goes to the end of the turn
order: when room is made, a client is not served after all the reads that another sent
before it (400 connections of one stranger, each asking a 4 MiB entry: a fresh client's reads
timed out for ~10 s).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, final

import anyio

from walkit._core.wire import (
    BatchReadRequest,
    ErrorResponse,
    ReadRequest,
    StatusCode,
    encode_frame,
)
from walkit.shared import get_logger

if TYPE_CHECKING:
    from walkit_bookie._config import BookieConfig
    from walkit_bookie.server._peer import Peer
    from walkit_bookie.server._stats import BookieStats
    from walkit_bookie.storage import BookieStorage

log = get_logger(__name__)

_Read = ReadRequest | BatchReadRequest

_READERS = 2
_BATCH = 256
#: A disk reader's batch reads at most about this many bytes from disk (256 entries of 4 MiB
#: would be 1 GiB in memory at once); the rest of the batch goes back to the queue.
_BATCH_BYTES = 16 * 1024 * 1024
#: A batch read's answer holds at most this many bytes of entries (or its first entry,
#: whatever its size): a bound on answers is passed by at most one entry or this, as by
#: single reads.
BATCH_READ_MAX_BYTES = 1024 * 1024
#: Disk reads waiting for room are looked at again when answers are taken and at least this
#: often (connections that read nothing become evictable with time, not with events).
_ROOM_RECHECK = 0.1


class ReadAnswers(Protocol):
    """What the disk reads need of the reads (``_reads.Reads``)."""

    config: BookieConfig
    storage: BookieStorage
    #: Bytes of answers queued over all connections, reads in flight, refusals.
    stats: BookieStats
    client_connections: set[Any]

    def answer_read(
        self, conn: Peer, req: ReadRequest, status: StatusCode, packet: bytes = b""
    ) -> None: ...

    def answer_batch_read(
        self,
        conn: Peer,
        req: BatchReadRequest,
        status: StatusCode,
        packets: Sequence[bytes] = (),
    ) -> None: ...

    def read_done(self, conn: Peer, frame: bytes | tuple[bytes, ...] | None) -> None: ...


@final
class DiskReads:
    """The queue of disk reads and its readers (``await run()``); ``refused`` counts reads
    answered TOO_MANY_REQUESTS because their connection's answers are not read."""

    def __init__(self, handler: ReadAnswers) -> None:
        self._handler = handler
        self._stats = handler.stats
        #: Reads waiting, per client (see the module), clients in turn order (none empty).
        self._queues: OrderedDict[str, deque[tuple[Peer, _Read]]] = OrderedDict()
        self._wake = anyio.Event()
        #: Readers waiting for room for the reads left in the queue.
        self._waiting = 0
        self.refused = 0

    async def run(self) -> None:
        async with anyio.create_task_group() as tasks:
            for _ in range(_READERS):
                tasks.start_soon(self._reader)

    def submit(self, conn: Peer, req: _Read) -> None:
        client = _client(conn)
        queue = self._queues.get(client)
        if queue is None:
            queue = self._queues[client] = deque()
        queue.append((conn, req))
        self._wake.set()

    def _take(self, limit: int) -> list[tuple[Peer, _Read]]:
        """Up to ``limit`` waiting reads: one of each client's in turn order, then again."""
        queues = self._queues
        taken: list[tuple[Peer, _Read]] = []
        while queues and len(taken) < limit:
            for client, queue in list(queues.items()):
                taken.append(queue.popleft())
                if not queue:
                    del queues[client]
                if len(taken) >= limit:
                    break
        return taken

    def _put_back(self, reads: list[tuple[Peer, _Read]]) -> None:
        """Return reads taken but not answered to the front of their clients' queues, in
        their order (each client's reads are taken in the order they came); a client that
        has none left waiting takes back its turn at the front (its reads were taken first)."""
        queues = self._queues
        for conn, req in reversed(reads):
            client = _client(conn)
            queue = queues.get(client)
            if queue is None:
                queue = queues[client] = deque()
                queues.move_to_end(client, last=False)
            queue.appendleft((conn, req))

    def _served(self, conn: Peer) -> None:
        """A read of ``conn``'s client was answered: its turn is over."""
        client = _client(conn)
        if client in self._queues:
            self._queues.move_to_end(client)

    def slots_taken(self) -> None:
        """Every read slot is taken: reads waiting for room are refused, not kept."""
        if self._waiting:
            self._wake.set()

    def answers_taken(self, conn: Peer) -> None:
        """Some of ``conn``'s answers were sent (or dropped as it closed)."""
        h = self._handler
        config = h.config
        if (
            self._waiting
            and self._stats.unsent_bytes < config.max_unsent_bytes_total
            and conn.unsent < config.max_unsent_bytes
        ):
            self._wake.set()

    def room(self, conn: Peer) -> bool:
        """Whether an answer may be queued for ``conn`` now: its own queued answers are under
        ``max_unsent_bytes``, and all connections' under ``max_unsent_bytes_total`` (long
        polls ask too, before carrying an entry)."""
        h = self._handler
        config = h.config
        return (
            conn.unsent < config.max_unsent_bytes
            and self._stats.unsent_bytes < config.max_unsent_bytes_total
        )

    async def _reader(self) -> None:
        h = self._handler
        while True:
            if not self._queues:
                await self._wake.wait()
                self._wake = anyio.Event()
                continue
            taken = self._take(_BATCH)
            batch = []
            waiting = []
            for conn, req in taken:
                if conn.closed:
                    h.read_done(conn, None)
                elif self.room(conn):
                    batch.append((conn, req))
                elif self._stats.reads_in_flight >= h.config.max_inflight_reads:
                    # Refused, not kept: waiting reads must not hold the bookie's read slots
                    # (at the limit no socket is read) for a peer that does not read.
                    self._refuse(conn, req)
                else:
                    waiting.append((conn, req))  # until its connection has room
            if waiting:
                self._put_back(waiting)
            if not batch:
                if waiting:
                    await self._wait_for_room()
                continue
            singles: list[tuple[Peer, ReadRequest]] = []
            later: list[tuple[Peer, _Read]] = []
            for conn, req in batch:
                if not isinstance(req, BatchReadRequest):
                    singles.append((conn, req))
                elif conn.closed:
                    h.read_done(conn, None)
                elif not self.room(conn) or not await self._batch_read(conn, req):
                    later.append((conn, req))  # (the answers before it filled the room)
            if later:
                self._put_back(later)
            if not singles:
                if later:
                    await self._wait_for_room()  # (not at once again: that would spin)
                continue
            try:
                packets = await h.storage.read_entries_upto(
                    [(req.ledger_id, req.entry_id) for _, req in singles], _BATCH_BYTES
                )
            except OSError as exc:
                log.error("read_failed", error=str(exc), requests=len(singles))
                for conn, req in singles:
                    h.answer_read(conn, req, StatusCode.IO_ERROR)
                continue
            # Each answer only while its connection and the bookie still have room (the
            # batch's earlier answers may have filled them): a bound is passed by one entry
            # at most. The rest go back to their queues, first (read again later).
            back: list[tuple[Peer, _Read]] = []
            answered = 0
            for i, ((conn, req), packet) in enumerate(zip(singles, packets, strict=False)):
                if answered >= _BATCH_BYTES:
                    back.extend(singles[i:])
                    break
                if conn.closed:
                    h.read_done(conn, None)
                elif packet is None:
                    h.answer_read(conn, req, StatusCode.NO_SUCH_ENTRY)
                elif self.room(conn):
                    answered += len(packet)
                    h.answer_read(conn, req, StatusCode.OK, packet)
                    self._served(conn)
                else:
                    back.append((conn, req))
            else:
                back.extend(singles[len(packets) :])
            if back:
                self._put_back(back)

    async def _batch_read(self, conn: Peer, req: BatchReadRequest) -> bool:
        """Answer one batch read: the longest run of entries from its first that this bookie
        has, within the byte limits (one answer, however many entries). False (not answered)
        if there is no room for the answer once read: it goes back to the queue, as a single
        read would (another reader's answers may have come first)."""
        h = self._handler
        ledger_id, first = req.ledger_id, req.first_entry_id
        limit = min(req.max_bytes, BATCH_READ_MAX_BYTES)
        keys = [(ledger_id, first + i) for i in range(req.count)]
        try:
            found = await h.storage.read_entries_upto(keys, limit)
        except OSError as exc:
            log.error("read_failed", error=str(exc), requests=1, entries=req.count)
            h.answer_batch_read(conn, req, StatusCode.IO_ERROR)
            return True
        packets: list[bytes] = []
        total = 0
        for packet in found:
            if packet is None or (packets and total + len(packet) > limit):
                break
            packets.append(packet)
            total += len(packet)
        if conn.closed:
            h.read_done(conn, None)
        elif not packets:
            h.answer_batch_read(conn, req, StatusCode.NO_SUCH_ENTRY)
        elif not self.room(conn):
            return False
        else:
            h.answer_batch_read(conn, req, StatusCode.OK, packets)
            self._served(conn)
        return True

    async def _wait_for_room(self) -> None:
        """Until some answers are taken (``answers_taken``), a read slot is wanted, or
        ``_ROOM_RECHECK``. Over the total, connections whose peers read nothing are closed
        first (``_evict_unread``)."""
        h = self._handler
        if self._stats.unsent_bytes >= h.config.max_unsent_bytes_total:
            self._evict_unread()
        self._waiting += 1
        try:
            with anyio.move_on_after(_ROOM_RECHECK):
                await self._wake.wait()
        finally:
            self._waiting -= 1
        self._wake = anyio.Event()

    def _evict_unread(self) -> None:
        """The answers queued over all connections are at ``max_unsent_bytes_total`` and reads
        wait for room: close the connections whose peers have taken none of their answers for
        ``evict_unread_after`` s, the longest stuck first, until the total is under. Without
        this the budget belongs to whoever filled it."""
        h = self._handler
        config = h.config
        over = self._stats.unsent_bytes - config.max_unsent_bytes_total
        before = anyio.current_time() - config.evict_unread_after
        stuck = [
            c for c in h.client_connections if c.unsent and not c.closed and c.taken_at <= before
        ]
        stuck.sort(key=lambda c: c.taken_at)
        for conn in stuck:
            if over < 0:
                break
            over -= conn.unsent
            conn.evict_unread()

    def _refuse(self, conn: Peer, req: _Read) -> None:
        h = self._handler
        self._stats.requests_refused += 1
        self.refused += 1
        why = (
            f"too many answers not yet read by this client ({conn.unsent} bytes queued for "
            f"this connection, {self._stats.unsent_bytes} for all)"
        )
        h.read_done(
            conn, encode_frame(ErrorResponse(req.request_id, StatusCode.TOO_MANY_REQUESTS, why))
        )


def _client(conn: Peer) -> str:
    """Whose turn a read waits for: the connection's principal, else its host address."""
    return conn.principal if conn.principal is not None else f"address {conn.address}"
