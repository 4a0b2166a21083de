"""A writer's copy of its ledger's metadata, and the two updates only the writer makes.

The writer adds a fragment at each ensemble change and records the last entry at close
(BookKeeper's protocol document, "Ensemble changes" and "Closing a ledger"). Both go through
the one read-decide-compare-and-set loop (:func:`walkit.metadata.cas_update`), starting from
the copy the writer holds, and keep the version written for the next update.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import final

from walkit._core.ensemble_change import decide_close, new_fragment
from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.types import BookieId
from walkit._logging import get_logger
from walkit.ledger._context import ClientContext
from walkit.metadata import Decision, cas_update

log = get_logger(__name__)

__all__ = ["WriterMetadata"]


@final
class WriterMetadata:
    """The metadata of the ledger one writer writes (see the module docs)."""

    __slots__ = ("_context", "current", "ledger_id", "version")

    def __init__(self, context: ClientContext, metadata: LedgerMetadata, version: int) -> None:
        self._context = context
        self.ledger_id = metadata.ledger_id
        #: The metadata as last read or written by this writer, and its version.
        self.current = metadata
        self.version = version

    async def _read(self) -> tuple[LedgerMetadata, int]:
        context = self._context
        return await context.retry_metadata(functools.partial(context.ledgers.read, self.ledger_id))

    async def _write(self, md: LedgerMetadata, version: int) -> int:
        context = self._context
        return await context.retry_metadata(functools.partial(context.ledgers.write, md, version))

    async def add_fragment(
        self, ensemble: Sequence[BookieId], first_entry: int, replacements: Mapping[int, BookieId]
    ) -> None:
        """Record that entries from ``first_entry`` go to ``ensemble`` with ``replacements``."""
        current = tuple(ensemble)
        self.current, self.version, _ = await cas_update(
            f"ledger {self.ledger_id}: ensemble change",
            read=self._read,
            write=self._write,
            decide=lambda md: Decision(None, new_fragment(md, current, first_entry, replacements)),
            rng=self._context.rng,
            current=(self.current, self.version),
        )

    async def close(self, lac: int, length: int, custom: Mapping[str, bytes] | None) -> None:
        """Record the ledger closed at ``lac`` (already closed the same way is success; closed
        otherwise, or in recovery, raises)."""

        def decide(md: LedgerMetadata) -> Decision[LedgerMetadata, None]:
            decision = decide_close(md, lac, length, custom)
            if decision.error is not None:
                raise decision.error
            return Decision(None, None if decision.done else decision.write)

        self.current, self.version, _ = await cas_update(
            f"ledger {self.ledger_id}: close",
            read=self._read,
            write=self._write,
            decide=decide,
            rng=self._context.rng,
            current=(self.current, self.version),
        )
        log.debug("ledger_closed", ledger_id=self.ledger_id, last_entry_id=lac)
