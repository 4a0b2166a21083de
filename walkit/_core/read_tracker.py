"""The reader's decisions (BookKeeper's protocol document and the original BookKeeper overview):
which replica of an entry to ask next after an error, a timeout or a bad digest; when to ask another
one speculatively; and when a LAC read of an ensemble has heard enough.

Pure and synchronous; slots are indexes into the ensemble of the entry's fragment.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, final

from walkit._core.distribution import ensemble_coverage
from walkit.errors import (
    BookieTimeoutError,
    BookieUnavailableError,
    DigestMismatchError,
    NoSuchEntryError,
    NoSuchLedgerError,
    UnauthorizedAccessError,
    WalkitError,
)

__all__ = ["WAIT", "LacRead", "ReplicaRead", "pick_read_error"]

#: :meth:`ReplicaRead.on_error` answer: nothing to send now, another request is still out.
WAIT: Final = -1


def pick_read_error(entry_id: int, errors: Sequence[WalkitError]) -> WalkitError:
    """The error to report when every replica failed: the most telling one.

    A wrong password beats a bad digest, which beats "not there"; "not there" is only reported
    when *every* replica said so; otherwise the bookies could not be asked (unavailable or slow).
    """
    if not errors:
        return BookieUnavailableError(f"entry {entry_id}: no replica to read from")
    for kind in (UnauthorizedAccessError, DigestMismatchError):
        for err in errors:
            if isinstance(err, kind):
                return err
    if all(isinstance(e, NoSuchEntryError | NoSuchLedgerError) for e in errors):
        return NoSuchEntryError(f"entry {entry_id}: no replica has it")
    for kind2 in (BookieTimeoutError, BookieUnavailableError):
        for err in errors:
            if isinstance(err, kind2):
                return type(err)(f"entry {entry_id}: no replica answered ({err})")
    for err in errors:
        if not isinstance(err, NoSuchEntryError | NoSuchLedgerError):
            return err
    return errors[-1]


@final
class ReplicaRead:
    """Reading one entry from the replicas of its write set, in a given order.

    ``start()`` gives the first slot to ask; each error gives the next one (or :data:`WAIT` if
    a speculative request is still out); ``speculate()`` gives another slot to ask while
    waiting. :attr:`failed` is set once every replica failed.
    """

    __slots__ = ("_next", "_order", "errors", "failed", "outstanding")

    def __init__(self, order: Sequence[int]) -> None:
        self._order = tuple(order)
        self._next = 0
        self.outstanding = 0
        self.errors: list[WalkitError] = []
        self.failed = False

    def _take(self) -> int:
        slot = self._order[self._next]
        self._next += 1
        self.outstanding += 1
        return slot

    def start(self) -> int:
        if not self._order:
            self.failed = True
            return WAIT
        return self._take()

    def speculate(self) -> int:
        """Another slot to ask while the first is slow, or WAIT if none is left."""
        if self.failed or self._next >= len(self._order):
            return WAIT
        return self._take()

    def on_error(self, error: WalkitError) -> int:
        """A request failed (error, timeout, or bad digest): the next slot, or WAIT."""
        self.outstanding -= 1
        self.errors.append(error)
        if self._next < len(self._order):
            return self._take()
        if self.outstanding <= 0:
            self.failed = True
        return WAIT

    def on_success(self) -> None:
        self.outstanding -= 1

    def final_error(self, entry_id: int) -> WalkitError:
        return pick_read_error(entry_id, self.errors)


@final
class LacRead:
    """Reading the LAC from a fragment's ensemble: the answer is the highest LAC heard.

    Every answered LAC is a safe lower bound (entries up to it were acknowledged), so the read
    is done once every bookie answered, or as soon as ensemble coverage (E - Qa + 1) answered
    successfully.
    """

    __slots__ = ("_coverage", "_size", "answered", "errors", "lac", "successes")

    def __init__(self, ensemble_size: int, ack_quorum: int, floor: int = -1) -> None:
        self._size = ensemble_size
        self._coverage = ensemble_coverage(ensemble_size, ack_quorum)
        self.lac = floor
        self.answered = 0
        self.successes = 0
        self.errors: list[WalkitError] = []

    def on_response(self, lac: int) -> None:
        self.answered += 1
        self.successes += 1
        if lac > self.lac:
            self.lac = lac

    def on_error(self, error: WalkitError) -> None:
        self.answered += 1
        # A bookie that has no entry of the ledger yet (nothing was written to it) knows no LAC:
        # that is an answer, not a failure.
        if isinstance(error, NoSuchLedgerError | NoSuchEntryError):
            self.successes += 1
        else:
            self.errors.append(error)

    @property
    def done(self) -> bool:
        return self.answered >= self._size or self.successes >= self._coverage

    @property
    def ok(self) -> bool:
        return self.successes > 0

    def error(self, ledger_id: int) -> WalkitError:
        return (
            pick_read_error(-1, self.errors)
            if self.errors
            else BookieUnavailableError(f"ledger {ledger_id}: no bookie answered the LAC read")
        )
