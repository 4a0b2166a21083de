"""Reading from bookies: ranges of entries, the LAC, and long-poll tailing.

No task per entry: requests go out through the shared connections with a handler; each answer
is checked (status, digest) where it arrives and the next request (another replica, or the next
entry of the window) is sent from there. The calling task only waits for the end, and wakes up
now and then to send speculative reads for entries whose replica is slow.
"""

from __future__ import annotations

import bisect
from typing import final

import anyio

from walkit._core.digest import DigestManager
from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.read_tracker import WAIT, LacRead, ReplicaRead
from walkit._core.types import BookieId, Entry
from walkit._core.wire import (
    ReadLacFlag,
    ReadLacRequest,
    ReadLacResponse,
    ReadResponse,
    Response,
    StatusCode,
    encode_frame,
    encode_read_request,
)
from walkit._logging import get_logger
from walkit.errors import DigestMismatchError, RemoteProtocolError, WalkitError
from walkit.ledger._context import ClientContext, status_error

log = get_logger(__name__)

__all__ = ["long_poll_lac", "read_entries", "read_lac", "unreachable"]

_OK = int(StatusCode.OK)


@final
class _EntryRead:
    __slots__ = ("ensemble", "entry_id", "handlers", "replicas", "sent_at", "speculated")

    def __init__(
        self,
        entry_id: int,
        ensemble: tuple[BookieId, ...],
        handlers: list[_SlotHandler],
        order: tuple[int, ...],
        now: float,
    ) -> None:
        self.entry_id = entry_id
        self.ensemble = ensemble
        self.handlers = handlers
        self.replicas = ReplicaRead(order)
        self.sent_at = now
        self.speculated = False


@final
class _SlotHandler:
    """Answers for one slot of one fragment's ensemble (``tag`` is the entry id)."""

    __slots__ = ("batch", "slot")

    def __init__(self, batch: _BatchRead, slot: int) -> None:
        self.batch = batch
        self.slot = slot

    def on_response(self, tag: int, status: int, msg: Response | None) -> None:
        self.batch.on_answer(tag, self.slot, status, msg)

    def on_error(self, tag: int, error: WalkitError) -> None:
        self.batch.on_failure(tag, self.slot, error)


@final
class _BatchRead:
    """Entries ``first..last`` of one ledger, a window of them in flight."""

    def __init__(
        self,
        context: ClientContext,
        metadata: LedgerMetadata,
        digest: DigestManager,
        first: int,
        last: int,
    ) -> None:
        self.context = context
        self.md = metadata
        self.digest = digest
        self.ledger_id = metadata.ledger_id
        self.first = first
        self.last = last
        self.results: list[Entry | None] = [None] * (last - first + 1)
        self.remaining = len(self.results)
        self.next_entry = first
        self.outstanding: dict[int, _EntryRead] = {}
        self.error: WalkitError | None = None
        self.finished = False
        self.done = anyio.Event()
        self.window = context.options.read_window
        self.timeout = context.options.read_timeout
        self._firsts = [first_entry for first_entry, _ in metadata.fragments]
        self._handlers: dict[int, list[_SlotHandler]] = {}
        self._orders: dict[tuple[int, int], tuple[int, ...]] = {}

    # --- sending ---------------------------------------------------------------------------

    def _fragment(self, entry_id: int) -> int:
        return bisect.bisect_right(self._firsts, entry_id) - 1

    def _start(self, entry_id: int, now: float) -> None:
        md = self.md
        frag = self._fragment(entry_id)
        ensemble = md.fragments[frag][1]
        handlers = self._handlers.get(frag)
        if handlers is None:
            handlers = [_SlotHandler(self, s) for s in range(md.ensemble_size)]
            self._handlers[frag] = handlers
        key = (frag, entry_id % md.ensemble_size)
        order = self._orders.get(key)
        if order is None:
            start = key[1]
            ws = [(start + i) % md.ensemble_size for i in range(md.write_quorum)]
            order = tuple(self.context.read_order(ensemble, ws))
            self._orders[key] = order
        state = _EntryRead(entry_id, ensemble, handlers, order, now)
        self.outstanding[entry_id] = state
        self._send(state, state.replicas.start())

    def _send(self, state: _EntryRead, slot: int) -> None:
        if slot == WAIT:
            return
        try:
            conn = self.context.pool.get(state.ensemble[slot])
        except WalkitError as exc:
            self._fail(exc)
            return
        rid = conn.new_request_id()
        frame = encode_read_request(rid, self.ledger_id, state.entry_id)
        conn.send((frame,), rid, state.handlers[slot], state.entry_id, self.timeout)

    def fill_window(self) -> None:
        if self.error is not None:
            return
        now = self.context.loop.time()
        while len(self.outstanding) < self.window and self.next_entry <= self.last:
            entry_id = self.next_entry
            self.next_entry = entry_id + 1
            self._start(entry_id, now)

    def speculate(self, now: float, delay: float) -> float | None:
        """Ask another replica for entries waiting longer than ``delay``; returns when the next
        entry will be due (None when nothing is waiting)."""
        due: list[_EntryRead] = []
        next_due: float | None = None
        for state in self.outstanding.values():
            if state.speculated:
                continue
            if state.sent_at + delay > now:
                next_due = state.sent_at + delay
                break  # in send order: the rest are later
            due.append(state)
        for state in due:
            state.speculated = True
            self._send(state, state.replicas.speculate())
        return next_due

    # --- answers ---------------------------------------------------------------------------

    def on_answer(self, entry_id: int, slot: int, status: int, msg: Response | None) -> None:
        state = self.outstanding.get(entry_id)
        if state is None or self.finished:
            return  # already read from another replica
        if status != _OK:
            self.on_failure(
                entry_id,
                slot,
                status_error(
                    status, f"ledger {self.ledger_id} entry {entry_id} from {state.ensemble[slot]}"
                ),
            )
            return
        if not isinstance(msg, ReadResponse):
            self.on_failure(
                entry_id, slot, RemoteProtocolError(f"unexpected answer {type(msg).__name__}")
            )
            return
        try:
            _header, payload = self.digest.verify(msg.packet, expected_entry_id=entry_id)
        except DigestMismatchError as exc:
            self.context.pool.record_failure(state.ensemble[slot])
            log.warning(
                "read_digest_mismatch",
                ledger_id=self.ledger_id,
                entry_id=entry_id,
                bookie=str(state.ensemble[slot]),
            )
            self.on_failure(entry_id, slot, exc)
            return
        state.replicas.on_success()
        del self.outstanding[entry_id]
        self.results[entry_id - self.first] = Entry(self.ledger_id, entry_id, payload)
        self.remaining -= 1
        if self.remaining == 0:
            self.done.set()
        else:
            self.fill_window()

    def on_failure(self, entry_id: int, slot: int, error: WalkitError) -> None:
        state = self.outstanding.get(entry_id)
        if state is None or self.finished:
            return
        nxt = state.replicas.on_error(error)
        if nxt != WAIT:
            self._send(state, nxt)
        elif state.replicas.failed:
            self._fail(state.replicas.final_error(entry_id))

    def _fail(self, error: WalkitError) -> None:
        if self.error is None:
            self.error = error
        self.done.set()

    async def run(self) -> list[Entry]:
        delay = self.context.options.speculative_read_timeout
        try:
            self.fill_window()
            while not self.done.is_set():
                if delay is None:
                    await self.done.wait()
                    break
                next_due = self.speculate(self.context.loop.time(), delay)
                if next_due is None:
                    next_due = self.context.loop.time() + delay
                with anyio.CancelScope(deadline=next_due):
                    await self.done.wait()
        finally:
            self.finished = True
        if self.error is not None:
            raise self.error
        return self.results  # type: ignore[return-value]  # all filled: remaining == 0


async def read_entries(
    context: ClientContext, metadata: LedgerMetadata, digest: DigestManager, first: int, last: int
) -> list[Entry]:
    """Entries ``first..last`` (inclusive); each from the first replica that gives a good one."""
    if last < first:
        return []
    return await _BatchRead(context, metadata, digest, first, last).run()


# --- LAC -----------------------------------------------------------------------------------


@final
class _LacHandler:
    __slots__ = ("done", "tracker", "what")

    def __init__(self, tracker: LacRead, what: str) -> None:
        self.tracker = tracker
        self.done = anyio.Event()
        self.what = what

    def on_response(self, tag: int, status: int, msg: Response | None) -> None:
        if status == _OK and isinstance(msg, ReadLacResponse):
            self.tracker.on_response(msg.lac)
        else:
            self.tracker.on_error(status_error(status, self.what))
        if self.tracker.done:
            self.done.set()

    def on_error(self, tag: int, error: WalkitError) -> None:
        self.tracker.on_error(error)
        if self.tracker.done:
            self.done.set()


async def read_lac(context: ClientContext, metadata: LedgerMetadata) -> int:
    """The highest LAC the last fragment's bookies know (done at ensemble coverage)."""
    ensemble = metadata.current_ensemble
    handler = _LacHandler(
        LacRead(metadata.ensemble_size, metadata.ack_quorum),
        f"ledger {metadata.ledger_id} LAC read",
    )
    # Every bookie is asked; the placement policy's LAC order says which first.
    for index in context.read_lac_order(ensemble, range(len(ensemble))):
        conn = context.pool.get(ensemble[index])
        rid = conn.new_request_id()
        frame = encode_frame(ReadLacRequest(rid, metadata.ledger_id))
        conn.send((frame,), rid, handler, 0, context.options.read_timeout)
    await handler.done.wait()
    if not handler.tracker.ok:
        raise handler.tracker.error(metadata.ledger_id)
    return handler.tracker.lac


@final
class _PollHandler:
    """Long-poll answers: the first that moves the LAC past ``previous`` wins."""

    __slots__ = (
        "answered",
        "digest",
        "done",
        "entry",
        "errors",
        "expected",
        "finished",
        "lac",
        "previous",
    )

    def __init__(
        self, previous: int, expected: int, digest: DigestManager, done: anyio.Event
    ) -> None:
        self.previous = previous
        self.lac = previous
        self.expected = expected
        self.answered = 0
        self.digest = digest
        self.entry: Entry | None = None
        self.errors: list[WalkitError] = []
        self.finished = False
        self.done = done

    def on_response(self, tag: int, status: int, msg: Response | None) -> None:
        self.answered += 1
        if status == _OK and isinstance(msg, ReadLacResponse):
            if msg.lac > self.lac:
                self.lac = msg.lac
                if msg.packet and self.entry is None:
                    try:
                        _h, payload = self.digest.verify(msg.packet, self.previous + 1)
                        self.entry = Entry(self.digest.ledger_id, self.previous + 1, payload)
                    except DigestMismatchError:
                        pass  # read it the normal way
                self.finished = True
                self.done.set()
        elif status not in (int(StatusCode.NO_SUCH_LEDGER), int(StatusCode.NO_SUCH_ENTRY)):
            self.errors.append(status_error(status, "long poll"))
        self._check()

    def on_error(self, tag: int, error: WalkitError) -> None:
        self.answered += 1
        self.errors.append(error)
        self._check()

    def _check(self) -> None:
        if self.answered >= self.expected:
            self.finished = True
            self.done.set()


async def long_poll_lac(
    context: ClientContext,
    metadata: LedgerMetadata,
    digest: DigestManager,
    previous_lac: int,
    wait: float,
    wake: anyio.Event | None = None,
) -> tuple[int, Entry | None]:
    """Ask the last fragment's bookies to answer once their LAC passes ``previous_lac`` (or
    after ``wait`` seconds); returns (highest LAC heard, entry previous_lac + 1 if it came
    along). Bookies that cannot be reached do not count; if none answers, raise.

    Setting ``wake`` (also set when the answer is in) ends the wait early with what was heard.
    """
    ensemble = metadata.current_ensemble
    handler = _PollHandler(
        previous_lac, len(ensemble), digest, wake if wake is not None else anyio.Event()
    )
    timeout_ms = max(1, int(wait * 1000))
    flags = ReadLacFlag.LONG_POLL | ReadLacFlag.PIGGYBACK_ENTRY
    for index in context.read_lac_order(ensemble, range(len(ensemble))):
        conn = context.pool.get(ensemble[index])
        rid = conn.new_request_id()
        frame = encode_frame(
            ReadLacRequest(rid, metadata.ledger_id, flags, previous_lac, timeout_ms)
        )
        conn.send((frame,), rid, handler, 0, wait + context.options.read_timeout)
    await handler.done.wait()
    handler.expected = -1  # later answers change nothing
    if handler.finished and handler.lac == previous_lac and len(handler.errors) >= len(ensemble):
        raise handler.errors[0]
    return handler.lac, handler.entry


@final
class _Probe:
    """Any answer means the bookie is there; only a failure to get one counts."""

    __slots__ = ("done", "left", "silent")

    def __init__(self, count: int) -> None:
        self.left = count
        self.silent: dict[int, WalkitError] = {}
        self.done = anyio.Event()

    def on_response(self, tag: int, status: int, msg: Response | None) -> None:
        self._count()

    def on_error(self, tag: int, error: WalkitError) -> None:
        self.silent[tag] = error
        self._count()

    def _count(self) -> None:
        self.left -= 1
        if self.left <= 0:
            self.done.set()


async def unreachable(
    context: ClientContext, bookies: list[BookieId], ledger_id: int
) -> dict[BookieId, WalkitError]:
    """The bookies among ``bookies`` that do not answer a (harmless) LAC read in time, each
    with the error it gave."""
    probe = _Probe(len(bookies))
    timeout = min(context.options.connect_timeout, context.options.read_timeout)
    for index, bookie in enumerate(bookies):
        conn = context.pool.get(bookie)
        rid = conn.new_request_id()
        conn.send((encode_frame(ReadLacRequest(rid, ledger_id)),), rid, probe, index, timeout)
    await probe.done.wait()
    return {bookies[i]: error for i, error in probe.silent.items()}
