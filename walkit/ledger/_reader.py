"""The ledger reader handle (from :meth:`walkit.Client.open_ledger`)."""

from __future__ import annotations

from typing import final

import structlog
import trio

from walkit._core.digest import DigestManager
from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.types import Entry
from walkit.errors import (
    BookieTimeoutError,
    BookieUnavailableError,
    InvalidArgumentError,
    LedgerClosedError,
    NoSuchEntryError,
)
from walkit.ledger._core import ClientCore
from walkit.ledger._reads import long_poll_lac, read_entries, read_lac
from walkit.ledger._writer import _check_range

log = structlog.get_logger()

__all__ = ["LedgerReader"]


@final
class LedgerReader:
    """Reads one ledger. A reader of a ledger that is still open sees entries up to the LAC
    (everything there is acknowledged and stays readable); it never fences the writer unless it
    was opened with ``recovery=True`` (then the ledger is closed and the reader sees it all)."""

    def __init__(
        self, core: ClientCore, metadata: LedgerMetadata, password: bytes, lac: int
    ) -> None:
        self._core = core
        self._md = metadata
        self.id = metadata.ledger_id
        self._digest: DigestManager = core.digest_manager(metadata, password)
        self._lac = metadata.last_entry_id if metadata.is_closed else lac

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
            return await read_entries(self._core, self._md, self._digest, first, last)
        except (NoSuchEntryError, BookieUnavailableError, BookieTimeoutError):
            # The writer may have changed the ensemble since we read the metadata.
            if self._md.is_closed or not await self._refresh_metadata():
                raise
            return await read_entries(self._core, self._md, self._digest, first, last)

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
        round_time = self._core.options.long_poll_round
        with trio.move_on_after(timeout):
            while True:
                if entry_id <= self._lac:
                    return (await self.read(entry_id, entry_id))[0]
                self._check_not_past_end(entry_id)
                deadline = trio.current_time()
                try:
                    lac, entry = await long_poll_lac(
                        self._core, self._md, self._digest, self._lac, round_time
                    )
                except (BookieUnavailableError, BookieTimeoutError) as exc:
                    # No bookie of the ensemble answered: the writer may have moved on.
                    log.info("long_poll_failed", ledger_id=self.id, error=str(exc))
                    if not await self._refresh_metadata():
                        await trio.sleep(min(0.1, round_time))
                    continue
                if lac > self._lac:
                    self._lac = lac
                    if entry is not None and entry.entry_id == entry_id:
                        return entry
                    continue
                # Nothing new for a whole round: is the ledger closed, or its ensemble changed?
                await self._refresh_metadata()
                if trio.current_time() - deadline < round_time / 10:
                    await trio.sleep(round_time / 10)  # answers came fast but said nothing
        return None

    # --- internals -------------------------------------------------------------------------

    def _check_not_past_end(self, entry_id: int) -> None:
        if self._md.is_closed and entry_id > self._md.last_entry_id:
            raise LedgerClosedError(
                f"ledger {self.id} is closed at entry {self._md.last_entry_id}; "
                f"entry {entry_id} will never exist"
            )

    async def _refresh_lac(self) -> None:
        if self._md.is_closed:
            await trio.lowlevel.checkpoint()
            return
        lac = await read_lac(self._core, self._md)
        if lac > self._lac:
            self._lac = lac

    async def _refresh_metadata(self) -> bool:
        """Re-read the metadata; True if it changed (a new fragment, or closed)."""
        md, _version = await self._core.read_metadata(self.id)
        changed = md != self._md
        self._md = md
        if md.is_closed:
            self._lac = md.last_entry_id
        return changed
