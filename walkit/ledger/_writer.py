"""The ledger writer: appends, ordered acknowledgement, ensemble changes, close.

The decisions are :class:`walkit._core.add_tracker.AddTracker`'s and
:mod:`walkit._core.ensemble_change`'s; this module moves bytes and waits. An append encodes its
packet once, queues one frame per bookie of its write set on the shared connections (no task
per entry), and waits until the tracker says its entry is acknowledged. Answers come back as
calls on per-slot handlers. A failed add goes to :mod:`walkit.ledger._ensemble_changes`, which
stops the writer or replaces the bookie.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, final

import anyio
import anyio.abc

from walkit._core.add_tracker import AddTracker, PendingAdd
from walkit._core.digest import DigestManager
from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.types import BookieId, Entry
from walkit._core.wire import Response, StatusCode
from walkit._logging import get_logger
from walkit.errors import (
    ClientClosedError,
    InvalidArgumentError,
    LedgerClosedError,
    NoSuchEntryError,
    WalkitError,
)
from walkit.ledger._context import ClientContext, status_error
from walkit.ledger._ensemble_changes import EnsembleChanges
from walkit.ledger._explicit_lac import ExplicitLac, write_lac
from walkit.ledger._reads import read_entries
from walkit.ledger._writer_metadata import WriterMetadata
from walkit.net._connection import BookieConnection

log = get_logger(__name__)

__all__ = ["LedgerWriter"]

_OK = int(StatusCode.OK)


def _copy(error: WalkitError) -> WalkitError:
    """A fresh instance: one exception object must not be raised in several tasks."""
    new = type(error)(*error.args)
    new.__cause__ = error.__cause__
    return new


class EntryWaiter(Protocol):
    """Woken (``set()``) when an entry is acknowledged or the writer fails: an anyio.Event, or
    the log writer's record set (which then sends the next one)."""

    def set(self) -> None: ...


def _payload(data: object) -> bytes:
    if isinstance(data, bytes):
        return data
    if isinstance(data, bytearray | memoryview):
        return bytes(data)
    raise InvalidArgumentError(f"an entry must be bytes, not {type(data).__name__}")


@final
class _SlotSink:
    """Receives add answers from the bookie in one slot; replaced when the slot is."""

    __slots__ = ("slot", "writer")

    def __init__(self, writer: LedgerWriter, slot: int) -> None:
        self.writer = writer
        self.slot = slot

    def on_response(self, tag: int, status: int, msg: Response | None) -> None:
        w = self.writer
        if w._sinks[self.slot] is not self:
            return  # the slot was replaced since: this bookie no longer counts
        if status == _OK:
            if w._tracker.on_ack(tag, self.slot):
                w._acknowledged()
        else:
            w._write_failed(
                self.slot,
                status_error(status, f"ledger {w.id} entry {tag} on {w._ensemble[self.slot]}"),
            )

    def on_error(self, tag: int, error: WalkitError) -> None:
        w = self.writer
        if w._sinks[self.slot] is self:
            w._write_failed(self.slot, error)


@final
class LedgerWriter:
    """The single writer of one ledger (from :meth:`walkit.Client.create_ledger`).

    ``append``/``append_batch`` return once the entries are acknowledged: stored durably on an
    ack quorum of their write set, and every lower entry too. Appends from concurrent tasks are
    pipelined and get consecutive ids in call order. ``close`` (or leaving ``async with``)
    records the last acknowledged entry in the metadata.
    """

    def __init__(
        self, context: ClientContext, metadata: LedgerMetadata, version: int, password: bytes
    ) -> None:
        self._context = context
        self._time = context.loop.time
        #: Where direct appends report their latency when the client keeps metrics.
        self._appends = None if context.metrics is None else context.metrics.ledger_appends
        self._md = WriterMetadata(context, metadata, version)
        self.id = metadata.ledger_id
        self._digest: DigestManager = context.digest_manager(metadata, password)
        self._key = context.master_key(password)
        opts = context.options
        self._add_timeout = opts.add_timeout
        self._max_pending = opts.max_pending_adds
        self._max_entry = opts.max_entry_size
        self._tracker = AddTracker(
            metadata.ensemble_size,
            metadata.write_quorum,
            metadata.ack_quorum,
            mode=opts.ensemble_change,
        )
        self._ensemble: list[BookieId] = list(metadata.current_ensemble)
        self._conns: list[BookieConnection] = [context.pool.get(b) for b in self._ensemble]
        self._sinks = [_SlotSink(self, s) for s in range(metadata.ensemble_size)]
        #: (entry id, what to wake when the LAC reaches it or the writer fails), in id order.
        self._waiters: deque[tuple[int, EntryWaiter]] = deque()
        self._room = anyio.Event()
        self._admission = anyio.Lock()
        self._idle = anyio.Event()
        self._idle.set()
        interval = context.options.explicit_lac_interval
        self._explicit_lac = (
            None
            if interval is None
            else ExplicitLac(
                interval,
                lambda: self._tracker.last_add_confirmed,
                functools.partial(
                    write_lac, self.id, self._key, self._conns, self._tracker, opts.add_timeout
                ),
                lambda: self._error is not None,
            )
        )
        self._error: WalkitError | None = None
        self._closing = False
        self._closed = False
        self._changes = EnsembleChanges(
            context,
            self._md,
            self._tracker,
            self._ensemble,
            repoint=self._repoint,
            resend=self._queue,
            fail=self._fail,
            failed=lambda: self._error is not None,
        )
        self._scope = anyio.CancelScope()
        self._tasks: anyio.abc.TaskGroup | None = None
        #: Custom metadata the close adds (see ``close``).
        self._close_custom: Mapping[str, bytes] | Callable[[], Mapping[str, bytes]] | None = None

    def __repr__(self) -> str:
        return (
            f"LedgerWriter(id={self.id}, lac={self.last_add_confirmed}, "
            f"pending={self._tracker.pending_count})"
        )

    # --- public ----------------------------------------------------------------------------

    @property
    def last_add_confirmed(self) -> int:
        """The highest acknowledged entry id (-1 before the first)."""
        return self._tracker.last_add_confirmed

    @property
    def metadata(self) -> LedgerMetadata:
        """The ledger's metadata as this writer last wrote or read it."""
        return self._md.current

    @property
    def is_closed(self) -> bool:
        return self._closed

    @property
    def length(self) -> int:
        """Total payload bytes of the acknowledged entries."""
        return self._tracker.acked_length

    @property
    def pending_count(self) -> int:
        """Entries sent and not acknowledged yet."""
        return self._tracker.pending_count

    @property
    def has_room(self) -> bool:
        """Whether another entry fits under ``max_pending_adds`` now."""
        return self._tracker.pending_count < self._max_pending

    def submit(self, payload: bytes, waiter: EntryWaiter) -> int:
        """Send one entry now, without waiting (for writers that batch on top of the ledger,
        such as the log writer); returns its id. ``waiter.set()`` is called, from the task
        that sees it, once the entry is acknowledged or the writer fails (see
        :meth:`check_acknowledged`). The caller keeps under ``max_pending_adds``
        (:attr:`has_room`). Raises like :meth:`append`."""
        data = _payload(payload)
        self._check_appendable(len(data))
        entry_id = self._add((data,))
        if self._error is not None:
            raise _copy(self._error)
        self._waiters.append((entry_id, waiter))
        return entry_id

    def check_acknowledged(self, entry_id: int) -> None:
        """Raise the writer's error unless ``entry_id`` is acknowledged."""
        if entry_id > self._tracker.last_add_confirmed:
            if self._error is None:
                raise LedgerClosedError(f"ledger {self.id}: entry {entry_id} is not acknowledged")
            raise _copy(self._error)

    async def append(self, payload: bytes) -> int:
        """Append one entry; returns its id once it is acknowledged.

        Raises LedgerClosedError after ``close``; WriterFencedError if another client took the
        ledger over (the entry *may* be written); NotEnoughBookiesError if a failed bookie
        could not be replaced; InvalidArgumentError for a payload that is not bytes or too big.
        """
        data = _payload(payload)
        self._check_appendable(len(data))
        t0 = self._time()
        if self._admission.locked() or self._tracker.pending_count >= self._max_pending:
            async with self._admission:  # FIFO: ids follow the order of the calls
                while self._tracker.pending_count >= self._max_pending:
                    await self._wait_for_room()
                self._check_appendable(len(data))
                entry_id = self._add((data,))
        else:
            entry_id = self._add((data,))
        acknowledged = await self._wait_acknowledged(entry_id)
        if self._appends is not None:
            self._appends.observe(self._time() - t0, 1, len(data))
        return acknowledged

    async def append_batch(self, payloads: Sequence[bytes]) -> list[int]:
        """Append several entries, pipelined; returns their (consecutive) ids once all are
        acknowledged."""
        if isinstance(payloads, bytes | bytearray | memoryview | str):
            raise InvalidArgumentError("append_batch takes a sequence of payloads")
        datas = [_payload(p) for p in payloads]
        for data in datas:
            self._check_size(len(data))
        self._check_appendable(0)
        if not datas:
            await anyio.lowlevel.checkpoint()
            return []
        t0 = self._time()
        first = self._tracker.next_entry_id
        if (
            not self._admission.locked()
            and self._tracker.pending_count + len(datas) <= self._max_pending
        ):
            last = self._add(datas)
        else:
            # Over the limit: admit it in chunks as room frees up, holding the admission lock
            # so no other append slips between two chunks.
            async with self._admission:
                first = self._tracker.next_entry_id
                done = 0
                while done < len(datas):
                    room = self._max_pending - self._tracker.pending_count
                    if room <= 0:
                        await self._wait_for_room()
                        self._check_appendable(0)
                        continue
                    chunk = datas[done : done + room]
                    last = self._add(chunk)
                    done += len(chunk)
        await self._wait_acknowledged(last)
        if self._appends is not None:
            self._appends.observe(self._time() - t0, len(datas), sum(len(d) for d in datas))
        return list(range(first, last + 1))

    async def read(self, first: int, last: int) -> list[Entry]:
        """Read back acknowledged entries ``first..last`` (inclusive)."""
        _check_range(first, last)
        if last > self.last_add_confirmed:
            raise NoSuchEntryError(
                f"ledger {self.id}: entry {last} is past the last add confirmed "
                f"{self.last_add_confirmed}"
            )
        return await read_entries(self._context, self._md.current, self._digest, first, last)

    async def close(
        self,
        *,
        custom_metadata: Mapping[str, bytes] | Callable[[], Mapping[str, bytes]] | None = None,
    ) -> None:
        """Wait for pending appends, then CAS the metadata to CLOSED at the last acknowledged entry
        (BookKeeper's protocol document), with ``custom_metadata`` merged into the ledger's (a
        mapping, or a function called once the pending appends are done: a log writer records its
        record count there). Already closed the same way is success; closed elsewhere or being
        recovered raises (WriterFencedError / LedgerInRecoveryError). Idempotent."""
        if custom_metadata is not None:
            self._close_custom = custom_metadata
        if self._closed:
            await anyio.lowlevel.checkpoint()
            return
        self._closing = True
        try:
            # Let in-flight adds finish (acknowledged or failed) and any ensemble change end.
            while self._tracker.pending_count and self._error is None:
                if self._idle.is_set():
                    self._idle = anyio.Event()
                await self._idle.wait()
            await self._changes.done.wait()
            await self._close_metadata()
            self._closed = True
        finally:
            self._stop()

    async def aclose(
        self,
        *,
        custom_metadata: Mapping[str, bytes] | Callable[[], Mapping[str, bytes]] | None = None,
    ) -> None:
        """:meth:`close` under the name every async handle closes with (``close`` stays:
        it is BookKeeper's name for sealing a ledger)."""
        await self.close(custom_metadata=custom_metadata)

    async def __aenter__(self) -> LedgerWriter:
        return self

    async def __aexit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc is None:
            await self.close()
            return
        try:
            await self.close()
        except WalkitError as close_error:  # the body's error is the one to report
            log.warning("ledger_close_failed", ledger_id=self.id, error=str(close_error))

    # --- appending -------------------------------------------------------------------------

    def _check_size(self, size: int) -> None:
        if size > self._max_entry:
            raise InvalidArgumentError(
                f"entry of {size} bytes is larger than the maximum {self._max_entry}"
            )

    def _check_appendable(self, size: int) -> None:
        if self._closing or self._closed:
            raise LedgerClosedError(f"ledger {self.id} is closed")
        if self._error is not None:
            raise _copy(self._error)
        self._check_size(size)

    def _add(self, datas: Sequence[bytes]) -> int:
        """Assign ids to ``datas``, encode them and queue them to their bookies; returns the
        last id."""
        tracker = self._tracker
        encode = self._digest.encode
        per_slot: list[list[tuple[int, bytes]]] = [[] for _ in self._conns]
        pa: PendingAdd | None = None
        for data in datas:
            pa = tracker.add(len(data))
            packet = pa.packet = encode(pa.entry_id, pa.lac, pa.length, data)
            item = (pa.entry_id, packet)
            for slot in tracker.targets(pa):
                per_slot[slot].append(item)
        assert pa is not None
        self._queue(per_slot, pa.lac)
        return pa.entry_id

    def _queue(self, per_slot: list[list[tuple[int, bytes]]], lac: int) -> None:
        """Send each slot's entries (which carry ``lac``) to its bookie."""
        now = self._time()
        for slot, items in enumerate(per_slot):
            if items:
                try:
                    self._conns[slot].send_adds(
                        self.id, self._key, items, self._sinks[slot], self._add_timeout, now
                    )
                except ClientClosedError as exc:
                    self._fail(exc)
                    return
        explicit = self._explicit_lac
        if explicit is not None:  # (after the sends: off the path to the bookies)
            explicit.sent(now, lac)

    async def _wait_for_room(self) -> None:
        if self._room.is_set():  # several tasks may wait on the same event
            self._room = anyio.Event()
        await self._room.wait()
        if self._error is not None:
            raise _copy(self._error)

    async def _wait_acknowledged(self, entry_id: int) -> int:
        if entry_id <= self._tracker.last_add_confirmed:
            await anyio.lowlevel.checkpoint()
            return entry_id
        if self._error is None:
            event = anyio.Event()
            self._waiters.append((entry_id, event))
            await event.wait()
        if entry_id <= self._tracker.last_add_confirmed:
            return entry_id
        assert self._error is not None
        raise _copy(self._error)

    def _acknowledged(self) -> None:
        """The LAC moved: wake whoever waits for entries up to it."""
        lac = self._tracker.last_add_confirmed
        waiters = self._waiters
        while waiters and waiters[0][0] <= lac:
            waiters.popleft()[1].set()
        explicit = self._explicit_lac
        if explicit is not None:
            explicit.moved()
        pending = self._tracker.pending_count
        if pending < self._max_pending:
            self._room.set()
        if not pending:
            self._idle.set()

    # --- failures --------------------------------------------------------------------------

    def _write_failed(self, slot: int, error: WalkitError) -> None:
        if self._error is None and not self._closed:
            self._changes.write_failed(slot, error, self._tasks)

    def _fail(self, error: WalkitError) -> None:
        """The writer cannot go on: fail every pending append with ``error``."""
        if self._error is not None:
            return
        self._error = error
        dropped = self._tracker.fail_all()
        # The application closed its client under an idle writer: its own doing, no news.
        quiet = isinstance(error, ClientClosedError) and not dropped
        (log.info if quiet else log.warning)(
            "ledger_writer_failed",
            ledger_id=self.id,
            lac=self.last_add_confirmed,
            dropped=len(dropped),
            error=str(error),
        )
        waiters = self._waiters
        self._waiters = deque()
        for _, event in waiters:
            event.set()
        self._room.set()
        self._idle.set()

    # --- ensemble change -------------------------------------------------------------------

    def _repoint(self, replacements: Mapping[int, BookieId]) -> None:
        """An ensemble change committed: the replaced slots send to their new bookies, and
        answers from the old ones no longer count."""
        for slot, bookie in replacements.items():
            self._ensemble[slot] = bookie
            self._conns[slot] = self._context.pool.get(bookie)
            self._sinks[slot] = _SlotSink(self, slot)

    # --- background ------------------------------------------------------------------------

    async def start_background(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        """Run the writer's background tasks (explicit LAC, ensemble changes) until closed."""
        with self._scope:
            async with anyio.create_task_group() as tasks:
                self._tasks = tasks
                if self._explicit_lac is not None:
                    tasks.start_soon(self._explicit_lac.run)
                task_status.started()
                await anyio.sleep_forever()

    def _stop(self) -> None:
        self._scope.cancel()

    # --- close -----------------------------------------------------------------------------

    async def _close_metadata(self) -> None:
        custom = self._close_custom() if callable(self._close_custom) else self._close_custom
        await self._md.close(self._tracker.last_add_confirmed, self._tracker.acked_length, custom)


def _check_range(first: Any, last: Any) -> None:
    for name, value in (("first", first), ("last", last)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise InvalidArgumentError(f"{name} must be an int, not {value!r}")
    if first < 0 or last < first:
        raise InvalidArgumentError(f"bad entry range {first}..{last}")
