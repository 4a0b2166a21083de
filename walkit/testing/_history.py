"""A history of what clients were told, for the checkers in :mod:`walkit.testing._checkers`.

Events are plain frozen records with a sequence number (their order in the history, which in a
single-threaded trio run is the real order) and the trio time at which they were recorded. A
history is built either with the ``record_*`` methods (from any code, sync) or with the async
helpers (:meth:`History.append`, :meth:`History.read`, :meth:`History.close`) that wrap the
client's ledger handles and record what each call returned.

Payloads should be unique per append (for example ``b"w1-17"``): the checkers use them to tell
write order and duplicates apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar, final

import attrs
import trio

from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.types import BookieId
from walkit.errors import WalkitError


@attrs.frozen
class AddInvoked:
    """A writer called append with ``payload`` (its entry id is not known yet)."""

    seq: int
    time: float
    writer: str
    ledger_id: int
    payload: bytes


@attrs.frozen
class AddAcked:
    """The append of ``invoked_seq`` returned: entry ``entry_id`` is durable, the writer was told."""

    seq: int
    time: float
    writer: str
    ledger_id: int
    entry_id: int
    payload: bytes
    invoked_seq: int


@attrs.frozen
class AddFailed:
    """The append of ``invoked_seq`` raised: the entry may or may not be written."""

    seq: int
    time: float
    writer: str
    ledger_id: int
    payload: bytes
    invoked_seq: int
    error: str


@attrs.frozen
class CloseAcked:
    """A writer's close succeeded at ``last_entry_id``."""

    seq: int
    time: float
    writer: str
    ledger_id: int
    last_entry_id: int


@attrs.frozen
class ReadObserved:
    """A reader got ``entries`` (entry id, payload), asking from ``first_entry_id``.

    ``final`` marks the read-back of the whole ledger after the run, against which acknowledged
    entries are checked.
    """

    seq: int
    time: float
    reader: str
    ledger_id: int
    first_entry_id: int
    entries: tuple[tuple[int, bytes], ...]
    final: bool = False


@attrs.frozen
class FenceCompleted:
    """``client`` finished fencing the ledger (its open with recovery returned)."""

    seq: int
    time: float
    client: str
    ledger_id: int


@attrs.frozen
class LedgerClosedObserved:
    """The metadata of the ledger was seen CLOSED at ``last_entry_id``."""

    seq: int
    time: float
    observer: str
    ledger_id: int
    last_entry_id: int


@attrs.frozen
class StoredCopies:
    """What the bookies hold of a closed ledger: ``copies[bookie][entry_id] = payload``."""

    seq: int
    time: float
    metadata: LedgerMetadata
    copies: Mapping[BookieId, Mapping[int, bytes]]


Event = (
    AddInvoked
    | AddAcked
    | AddFailed
    | CloseAcked
    | ReadObserved
    | FenceCompleted
    | LedgerClosedObserved
    | StoredCopies
)

E = TypeVar("E")
T = TypeVar("T")


class _Appender(Protocol):
    id: int

    async def append(self, payload: bytes) -> int: ...


class _Closer(Protocol):
    id: int

    async def close(self) -> None: ...

    @property
    def last_add_confirmed(self) -> int: ...


class _Reader(Protocol):
    async def read(self, first: int, last: int) -> Sequence[Any]: ...


def _default_clock() -> float:
    try:
        return trio.current_time()
    except RuntimeError:
        return 0.0


@final
class History:
    """An append-only list of events, with helpers that record around real client calls."""

    def __init__(self, clock: Callable[[], float] = _default_clock) -> None:
        self._clock = clock
        self.events: list[Event] = []

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    def of_type(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]

    def _next(self) -> tuple[int, float]:
        return len(self.events), self._clock()

    # --- recording -------------------------------------------------------------------------

    def record_add_invoked(self, writer: str, ledger_id: int, payload: bytes) -> AddInvoked:
        seq, now = self._next()
        event = AddInvoked(seq, now, writer, ledger_id, bytes(payload))
        self.events.append(event)
        return event

    def record_add_acked(self, invoked: AddInvoked, entry_id: int) -> AddAcked:
        seq, now = self._next()
        event = AddAcked(
            seq, now, invoked.writer, invoked.ledger_id, entry_id, invoked.payload, invoked.seq
        )
        self.events.append(event)
        return event

    def record_add_failed(self, invoked: AddInvoked, error: BaseException | str) -> AddFailed:
        seq, now = self._next()
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        event = AddFailed(
            seq, now, invoked.writer, invoked.ledger_id, invoked.payload, invoked.seq, text
        )
        self.events.append(event)
        return event

    def record_close_acked(self, writer: str, ledger_id: int, last_entry_id: int) -> CloseAcked:
        seq, now = self._next()
        event = CloseAcked(seq, now, writer, ledger_id, last_entry_id)
        self.events.append(event)
        return event

    def record_read(
        self,
        reader: str,
        ledger_id: int,
        first_entry_id: int,
        entries: Iterable[tuple[int, bytes]],
        *,
        final: bool = False,
    ) -> ReadObserved:
        seq, now = self._next()
        got = tuple((int(e), bytes(p)) for e, p in entries)
        event = ReadObserved(seq, now, reader, ledger_id, first_entry_id, got, final)
        self.events.append(event)
        return event

    def record_fence_completed(self, client: str, ledger_id: int) -> FenceCompleted:
        seq, now = self._next()
        event = FenceCompleted(seq, now, client, ledger_id)
        self.events.append(event)
        return event

    def record_ledger_closed(
        self, observer: str, ledger_id: int, last_entry_id: int
    ) -> LedgerClosedObserved:
        seq, now = self._next()
        event = LedgerClosedObserved(seq, now, observer, ledger_id, last_entry_id)
        self.events.append(event)
        return event

    def record_stored_copies(
        self, metadata: LedgerMetadata, copies: Mapping[BookieId, Mapping[int, bytes]]
    ) -> StoredCopies:
        seq, now = self._next()
        frozen = {b: dict(entries) for b, entries in copies.items()}
        event = StoredCopies(seq, now, metadata, frozen)
        self.events.append(event)
        return event

    # --- async helpers around the client's handles -----------------------------------------

    async def append(self, writer: str, handle: _Appender, payload: bytes) -> int:
        """``handle.append(payload)``, recording the call and its outcome (errors re-raised)."""
        invoked = self.record_add_invoked(writer, handle.id, payload)
        try:
            entry_id = await handle.append(payload)
        except WalkitError as exc:
            self.record_add_failed(invoked, exc)
            raise
        except trio.Cancelled:
            self.record_add_failed(invoked, "cancelled")
            raise
        self.record_add_acked(invoked, entry_id)
        return entry_id

    async def close(self, writer: str, handle: _Closer) -> None:
        """``handle.close()``, recording a successful close at the writer's LAC."""
        await handle.close()
        self.record_close_acked(writer, handle.id, handle.last_add_confirmed)

    async def read(
        self,
        reader: str,
        handle: _Reader,
        ledger_id: int,
        first: int,
        last: int,
        *,
        final: bool = False,
    ) -> list[Any]:
        """``handle.read(first, last)``, recording the entries it returned."""
        entries = list(await handle.read(first, last))
        self.record_read(
            reader, ledger_id, first, [(e.entry_id, e.payload) for e in entries], final=final
        )
        return entries
