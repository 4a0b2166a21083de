"""The ledger reader handle (from :meth:`walkit.Client.open_ledger`)."""

from __future__ import annotations

import weakref
from collections.abc import AsyncIterator
from typing import final

import anyio

from walkit._core.digest import DigestManager
from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.types import Entry
from walkit._logging import get_logger
from walkit._loop import EventLoop
from walkit.errors import (
    BookieTimeoutError,
    BookieUnavailableError,
    ClientClosedError,
    InvalidArgumentError,
    LedgerClosedError,
    NoSuchEntryError,
    TooManyRequestsError,
    WalkitError,
)
from walkit.ledger._context import ClientContext
from walkit.ledger._reads import long_poll_lac, read_entries, read_lac
from walkit.ledger._writer import _check_range
from walkit.metadata import WatchEvent

log = get_logger(__name__)

__all__ = ["LedgerReader"]


@final
class _MetadataWatch:
    """A reader's watch of its ledger's metadata, kept armed from one wait to the next while
    it tails (arming a watch and re-reading the metadata for every entry cost more than the
    rest of a tailing reader's work). ``changed``: something changed since the reader last
    looked (or the watch ended): re-read before trusting the metadata."""

    __slots__ = ("changed", "live", "scope", "wake")

    def __init__(self) -> None:
        self.changed = False
        self.live = True
        self.wake = anyio.Event()
        self.scope = anyio.CancelScope()


async def _follow_metadata(watch: _MetadataWatch, events: AsyncIterator[WatchEvent]) -> None:
    """Flag and wake the reader on every change of the metadata (holds no reference to the
    reader: it stops when the reader is closed, collected or its ledger closed)."""
    try:
        with watch.scope:
            async for _event in events:
                watch.changed = True
                watch.wake.set()
    except WalkitError as exc:
        log.debug("ledger_watch_ended", error=str(exc))
    finally:
        watch.live = False
        watch.changed = True
        watch.wake.set()
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True):
                await aclose()


def _stop_watch(watch: _MetadataWatch, loop: EventLoop) -> None:
    """Cancel a reader's watch from wherever the reader was collected (a loop that has ended
    cancelled it already)."""
    loop.run_sync_soon(watch.scope.cancel)


@final
class LedgerReader:
    """Reads one ledger. A reader of a ledger that is still open sees entries up to the LAC
    (everything there is acknowledged and stays readable); it never fences the writer unless it
    was opened with ``recovery=True`` (then the ledger is closed and the reader sees it all)."""

    def __init__(
        self, context: ClientContext, metadata: LedgerMetadata, password: bytes, lac: int
    ) -> None:
        self._context = context
        self._md = metadata
        self.id = metadata.ledger_id
        self._digest: DigestManager = context.digest_manager(metadata, password)
        self._lac = metadata.last_entry_id if metadata.is_closed else lac
        self._watch: _MetadataWatch | None = None

    def __repr__(self) -> str:
        return f"LedgerReader(id={self.id}, lac={self._lac}, state={self._md.state.value})"

    @property
    def metadata(self) -> LedgerMetadata:
        """The ledger's metadata as last read."""
        return self._md

    @property
    def is_closed(self) -> bool:
        """Whether the ledger was CLOSED when its metadata was last read."""
        return self._md.is_closed

    @property
    def last_add_confirmed(self) -> int:
        """The highest entry known to be acknowledged (the last entry once closed)."""
        return self._lac

    async def read(self, first: int, last: int) -> list[Entry]:
        """Entries ``first..last`` (inclusive), in order. ``last`` may not pass the LAC (it is
        refreshed from the bookies once if it does): NoSuchEntryError otherwise."""
        _check_range(first, last)
        if last > self._lac:
            await self._refresh_lac()
            if last > self._lac:
                raise NoSuchEntryError(
                    f"ledger {self.id}: entry {last} is past the last add confirmed {self._lac}"
                )
        try:
            return await read_entries(self._context, self._md, self._digest, first, last)
        except (NoSuchEntryError, BookieUnavailableError, BookieTimeoutError):
            # The writer may have changed the ensemble since we read the metadata.
            if self._md.is_closed or not await self._refresh_metadata():
                raise
            return await read_entries(self._context, self._md, self._digest, first, last)

    async def read_last_add_confirmed(self) -> int:
        """Ask the bookies for the LAC (the metadata's last entry once the ledger is closed)."""
        await self._refresh_lac()
        return self._lac

    async def wait_for_entry(self, entry_id: int, *, timeout: float = 10.0) -> Entry | None:
        """The entry ``entry_id`` once it is acknowledged; None if that takes over ``timeout``
        seconds. Tails with long-poll LAC reads (the entry usually comes along with the
        answer). Raises LedgerClosedError if the ledger is closed before that entry."""
        if not isinstance(entry_id, int) or isinstance(entry_id, bool) or entry_id < 0:
            raise InvalidArgumentError(f"entry id must be an int >= 0, not {entry_id!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout < 0:
            raise InvalidArgumentError(f"timeout must be a number >= 0, not {timeout!r}")
        if entry_id <= self._lac:
            return (await self.read(entry_id, entry_id))[0]
        watch = self._watch
        if watch is None or not watch.live:
            # Arm the metadata watch first, then re-read: a close (or ensemble change) that
            # lands before the watch is in place is then seen by the read, never left to the
            # timeout. The watch stays armed for the next waits (see _MetadataWatch).
            watch = self._start_watch()
            watch.changed = True
        if watch.changed:
            watch.changed = False
            await self._refresh_metadata()
            if entry_id <= self._lac:
                return (await self.read(entry_id, entry_id))[0]
        self._check_not_past_end(entry_id)
        with anyio.move_on_after(timeout):
            return await self._tail(entry_id, watch)
        return None

    async def aclose(self) -> None:
        """Stop following the ledger's metadata (a tailing reader's watch); the reader can
        still read what it knows. Idempotent; ``async with reader:`` calls it at the end."""
        if self._watch is not None:
            self._watch.scope.cancel()
            self._watch = None
        await anyio.lowlevel.checkpoint()

    async def __aenter__(self) -> LedgerReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _start_watch(self) -> _MetadataWatch:
        watch = _MetadataWatch()
        events = self._context.ledgers.watch(self.id)
        try:
            self._context.task_group.start_soon(_follow_metadata, watch, events)
        except RuntimeError:
            raise ClientClosedError("the client is closed") from None
        weakref.finalize(self, _stop_watch, watch, self._context.loop)
        self._watch = watch
        return watch

    async def _tail(self, entry_id: int, watch: _MetadataWatch) -> Entry:
        round_time = self._context.options.long_poll_round
        backoff = 0.0
        while True:
            if entry_id <= self._lac:
                return (await self.read(entry_id, entry_id))[0]
            self._check_not_past_end(entry_id)
            watch.wake = anyio.Event()
            try:
                lac, entry = await long_poll_lac(
                    self._context, self._md, self._digest, self._lac, round_time, watch.wake
                )
            except (BookieUnavailableError, BookieTimeoutError) as exc:
                # No bookie of the ensemble answered: the writer may have moved on.
                log.info("long_poll_failed", ledger_id=self.id, error=str(exc))
                lac, entry = self._lac, None
                watch.changed = True
            except TooManyRequestsError as exc:
                # The bookies are at their long-poll limits: ask for the LAC without waiting
                # (then back off below if nothing is new).
                log.info("long_poll_refused", ledger_id=self.id, error=str(exc))
                entry = None
                try:
                    lac = max(self._lac, await read_lac(self._context, self._md))
                except WalkitError as lac_error:
                    log.info("lac_read_failed", ledger_id=self.id, error=str(lac_error))
                    lac = self._lac
            if lac > self._lac:
                self._lac = lac
                backoff = 0.0
                if entry is not None and entry.entry_id == entry_id:
                    return entry
                continue
            # Nothing new: was the ledger closed, or its ensemble changed (then the bookies
            # asked are not the right ones)? Bookies also answer at once while they have no
            # entry of the ledger: back off a little then.
            if watch.changed:
                watch.changed = False
                if await self._refresh_metadata():
                    backoff = 0.0
                    continue
            backoff = min(max(backoff * 2, 0.002), round_time / 10)
            await anyio.sleep(backoff)

    # --- internals -------------------------------------------------------------------------

    def _check_not_past_end(self, entry_id: int) -> None:
        if self._md.is_closed and entry_id > self._md.last_entry_id:
            raise LedgerClosedError(
                f"ledger {self.id} is closed at entry {self._md.last_entry_id}; "
                f"entry {entry_id} will never exist"
            )

    async def _refresh_lac(self) -> None:
        if self._md.is_closed:
            await anyio.lowlevel.checkpoint()
            return
        lac = await read_lac(self._context, self._md)
        if lac > self._lac:
            self._lac = lac

    async def _refresh_metadata(self) -> bool:
        """Re-read the metadata; True if it changed (a new fragment, or closed)."""
        md, _version = await self._context.read_metadata(self.id)
        changed = md != self._md
        self._md = md
        if md.is_closed:
            self._lac = md.last_entry_id
            if self._watch is not None:  # nothing more can change that a reader needs
                self._watch.scope.cancel()
                self._watch = None
        return changed
