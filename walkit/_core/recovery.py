"""Ledger recovery decisions (BookKeeper's protocol document "Opening as reader with recovery", the
TLA+ protocol guide step 1 and 2).

Recovery has three phases, each a small state machine fed with bookie answers:

1. :class:`FenceTracker` — fencing LAC reads to the last fragment's ensemble. Done once ensemble
   coverage EC = (E - Qa) + 1 bookies answered (or QC in every write quorum): then no write quorum
   has Qa bookies that still accept the old writer's adds, so it is never acknowledged again.
2. :class:`RecoveryReadTracker` — one per entry from max(LAC) + 1 on, reading (and fencing) the
   entry's write set. Confirmed with Qa positive answers; absent with QC = (Qw - Qa) + 1 "no such
   entry" answers; if every bookie answered and neither holds, recovery aborts (retryable).
3. :class:`WriteBackTracker` — each confirmed entry is re-sent to its whole write set as a
   recovery add; it is safe once Qa of them acknowledged.

:func:`recovery_outcome` turns the per-entry decisions into the ledger's last entry.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from typing import final

import attrs

from walkit._core.distribution import ensemble_coverage, quorum_coverage, write_set
from walkit._core.types import INVALID_ENTRY_ID


class Answer(enum.Enum):
    """How one bookie answered a recovery request, as far as the protocol cares."""

    #: Fence: OK with a LAC. Read: the entry, with a valid digest. Write-back: OK.
    OK = "ok"
    #: Read only: NoSuchEntry or NoSuchLedger (the bookie never stored the entry).
    MISSING = "missing"
    #: Anything else: timeout, connection failure, digest mismatch, I/O error, read-only bookie.
    ERROR = "error"
    #: UNAUTHORIZED: the bookie holds another key for this ledger id. See
    #: :func:`refused_holds_nothing` for what it counts as.
    REFUSED = "refused"


@final
@attrs.frozen
class RecoveryRules:
    """The two fixes a recovery applies, each tied to a BookKeeper bug it prevents. Always on
    in use; a regression test injects one turned off (``ClientCore.recovery_rules``) to show
    that the fix is what prevents the bug."""

    #: Recovery reads fence (apache/bookkeeper#2614: without it, a late add reaching a bookie
    #: that missed the fence is acknowledged after the ledger was closed without it).
    fence_reads: bool = True
    #: Reading forward starts no lower than the last fragment (apache/bookkeeper#2615: from a
    #: LAC below it, an empty last fragment closes the ledger empty).
    start_at_last_fragment: bool = True


#: Answers that count as a failed bookie.
FAILED: frozenset[Answer] = frozenset({Answer.ERROR, Answer.REFUSED})


def refused_answer(password_verified: bool) -> Answer:
    """What an UNAUTHORIZED answer to a fence or recovery read counts as.

    A bookie keeps the master key of the first request it saw for a ledger id and refuses every
    other key. When the recovering client's password matched the hash in the ledger's metadata, its
    key is the writer's key, so a bookie that refuses it never accepted one of the writer's adds,
    and never will: the id was claimed there first with a junk key (a stranger can claim any ledger
    id on a bookie before its writer does). For the quorum rules such a bookie is a fenced bookie
    that holds nothing: fenced with LAC -1, and "no such entry" for every entry
    (:attr:`Answer.MISSING`).

    Without a verified password (a ledger whose metadata has no password hash) the refusal
    may mean that the password is wrong: the bookie counts as failed (:attr:`Answer.REFUSED`),
    so recovery can never cut acknowledged entries off a ledger because of a wrong password.
    """
    return Answer.MISSING if password_verified else Answer.REFUSED


class EntryDecision(enum.Enum):
    PENDING = "pending"
    CONFIRMED = "confirmed"
    ABSENT = "absent"
    #: Every bookie of the write set answered and neither threshold was reached.
    UNDECIDABLE = "undecidable"


@final
class FenceTracker:
    """Counts fencing answers from the last fragment's ensemble.

    Fencing is complete when either ensemble coverage EC = (E - Qa) + 1 bookies answered (the
    TLA+ protocol guide), or every write quorum of the ensemble has QC = (Qw - Qa) + 1 answers
    (BookKeeper's protocol document). Both
    leave no write quorum with Qa unfenced bookies; the second can need fewer answers when
    entries are striped (E > Qw), which keeps recovery possible with more bookies down.
    """

    def __init__(self, ensemble_size: int, write_quorum: int, ack_quorum: int) -> None:
        self.ensemble_size = ensemble_size
        self.write_quorum = write_quorum
        self.needed = ensemble_coverage(ensemble_size, ack_quorum)
        self._quorum_coverage = quorum_coverage(write_quorum, ack_quorum)
        self._answers: dict[int, Answer] = {}
        self.max_lac = INVALID_ENTRY_ID

    def on_answer(self, bookie_index: int, answer: Answer, lac: int = INVALID_ENTRY_ID) -> None:
        if not 0 <= bookie_index < self.ensemble_size:
            raise ValueError(
                f"bookie index {bookie_index} outside ensemble of {self.ensemble_size}"
            )
        if bookie_index in self._answers:
            return  # a bookie answers once; a duplicate must not count twice
        if answer is Answer.MISSING:
            # A fenced bookie that never saw the ledger answers with LAC -1 (fenced all the same).
            answer, lac = Answer.OK, INVALID_ENTRY_ID
        self._answers[bookie_index] = answer
        if answer is Answer.OK:
            self.max_lac = max(self.max_lac, lac)

    @property
    def fenced(self) -> int:
        return sum(1 for a in self._answers.values() if a is Answer.OK)

    def _covered(self, fenced: set[int]) -> bool:
        if len(fenced) >= self.needed:
            return True
        return all(
            sum(1 for i in write_set(first, self.ensemble_size, self.write_quorum) if i in fenced)
            >= self._quorum_coverage
            for first in range(self.ensemble_size)
        )

    @property
    def done(self) -> bool:
        """The old writer can no longer get Qa acks for any entry."""
        return self._covered({i for i, a in self._answers.items() if a is Answer.OK})

    @property
    def failed(self) -> bool:
        """Too many bookies failed for coverage ever to be reached."""
        possible = {i for i in range(self.ensemble_size) if self._answers.get(i) not in FAILED}
        return not self._covered(possible)

    @property
    def refused(self) -> int:
        """Bookies that refused the ledger's key."""
        return sum(1 for a in self._answers.values() if a is Answer.REFUSED)

    def unanswered(self) -> list[int]:
        return [i for i in range(self.ensemble_size) if i not in self._answers]


@final
class RecoveryReadTracker:
    """Collects recovery-read answers for one entry from its write set."""

    def __init__(
        self, entry_id: int, ensemble_size: int, write_quorum: int, ack_quorum: int
    ) -> None:
        self.entry_id = entry_id
        self.write_set = write_set(entry_id, ensemble_size, write_quorum)
        self.ack_quorum = ack_quorum
        self.quorum_coverage = quorum_coverage(write_quorum, ack_quorum)
        self._answers: dict[int, Answer] = {}
        #: The first verified packet received (what recovery writes back).
        self.packet: bytes | None = None

    def on_answer(
        self, bookie_index: int, answer: Answer, packet: bytes | None = None
    ) -> EntryDecision:
        if bookie_index not in self.write_set:
            raise ValueError(
                f"bookie index {bookie_index} is not in the write set {self.write_set}"
            )
        if bookie_index not in self._answers:
            self._answers[bookie_index] = answer
            if answer is Answer.OK and self.packet is None:
                if packet is None:
                    raise ValueError("an OK read answer needs its packet")
                self.packet = packet
        return self.decision

    def count(self, answer: Answer) -> int:
        return sum(1 for a in self._answers.values() if a is answer)

    @property
    def decision(self) -> EntryDecision:
        if self.count(Answer.OK) >= self.ack_quorum:
            return EntryDecision.CONFIRMED
        if self.count(Answer.MISSING) >= self.quorum_coverage:
            return EntryDecision.ABSENT
        if len(self._answers) == len(self.write_set):
            return EntryDecision.UNDECIDABLE
        return EntryDecision.PENDING

    def unanswered(self) -> list[int]:
        return [i for i in self.write_set if i not in self._answers]


@attrs.frozen
class RecoveryOutcome:
    """Where the ledger ends: entries ``first_recovered .. last_entry_id`` must be written back."""

    last_entry_id: int
    #: Entries after the fenced LAC that recovery found confirmed, in order.
    confirmed: tuple[int, ...]
    #: The first absent entry (None if the scan stopped for another reason).
    first_absent: int | None


def recovery_outcome(
    max_lac: int, decisions: Iterable[tuple[int, EntryDecision]]
) -> RecoveryOutcome:
    """Fold per-entry decisions (entry ids max_lac+1, max_lac+2, ... in order) into the outcome.

    The ledger ends just before the first absent entry. Entries after it are never part of the
    ledger even if some bookies hold them: they were never acknowledged, since acknowledgements
    are in order. An undecidable or pending entry before the first absent one means this run of
    recovery cannot decide; the caller aborts (retryable).
    """
    confirmed: list[int] = []
    expected = max_lac + 1
    for entry_id, decision in decisions:
        if entry_id != expected:
            raise ValueError(f"decisions out of order: got entry {entry_id}, expected {expected}")
        expected += 1
        if decision is EntryDecision.CONFIRMED:
            confirmed.append(entry_id)
            continue
        if decision is EntryDecision.ABSENT:
            return RecoveryOutcome(entry_id - 1, tuple(confirmed), entry_id)
        raise RecoveryUndecidable(entry_id, decision)
    last = confirmed[-1] if confirmed else max_lac
    return RecoveryOutcome(last, tuple(confirmed), None)


class RecoveryUndecidable(Exception):
    """An entry's fate could not be decided in this run."""

    def __init__(self, entry_id: int, decision: EntryDecision) -> None:
        super().__init__(f"entry {entry_id} is {decision.value}")
        self.entry_id = entry_id
        self.decision = decision


@final
class WriteBackTracker:
    """Counts recovery-add answers for one entry; safe once Qa of its write set acknowledged."""

    def __init__(self, entry_id: int, write_set_indexes: Sequence[int], ack_quorum: int) -> None:
        self.entry_id = entry_id
        self.write_set = list(write_set_indexes)
        self.ack_quorum = ack_quorum
        self._answers: dict[int, Answer] = {}

    def on_answer(self, bookie_index: int, answer: Answer) -> None:
        if bookie_index in self.write_set:
            self._answers[bookie_index] = answer

    @property
    def acked(self) -> int:
        return sum(1 for a in self._answers.values() if a is Answer.OK)

    @property
    def done(self) -> bool:
        return self.acked >= self.ack_quorum

    @property
    def failed_bookies(self) -> list[int]:
        return [i for i, a in self._answers.items() if a in FAILED]

    @property
    def failed(self) -> bool:
        """Too many bookies failed for the ack quorum to be reached on this write set."""
        return len(self.write_set) - len(self.failed_bookies) < self.ack_quorum


def recovery_start_lac(fenced_lac: int, last_fragment_first_entry: int) -> int:
    """The LAC recovery reads forward from: the fenced LAC, but never below the last fragment.

    Every entry before the last fragment's first entry was acknowledged (a fragment starts at the
    first unacknowledged entry), and earlier fragments are immutable. An empty last fragment
    answers LAC -1; reading from there would drag entries of earlier fragments into recovery
    and, on a write-back failure, create a fragment that starts before the last one
    (apache/bookkeeper#2615).
    """
    return max(fenced_lac, last_fragment_first_entry - 1)


def recovery_fragment_start(start_lac: int) -> int:
    """Where a fragment created during recovery's write-back starts: just after the start LAC.

    Only entries after it are written back. If recovery then finds no entry there, closing drops
    that fragment, so a closed ledger never has a fragment past its last entry.
    """
    return start_lac + 1
