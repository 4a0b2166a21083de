"""The writer's state machine (BookKeeper's protocol document, "Writing to the ledger"): pending
adds, ordered acknowledgement, the LAC, and which bookie failures call for an ensemble change.

Pure and synchronous. The trio writer feeds it events (an add, an ack, a bookie failure, an
ensemble change that committed) and acts on its answers (where to send, which entries are now
acknowledged, whether the ensemble must change).

Slots are indexes into the current ensemble. A slot being replaced is *blocked*: nothing is sent
to it and its acks no longer count, because the new fragment will put another bookie there.
"""

from __future__ import annotations

import enum
from typing import Final, final

from walkit._core.distribution import write_set
from walkit._core.types import INVALID_ENTRY_ID
from walkit.errors import InvalidArgumentError

__all__ = ["AddTracker", "EnsembleChangeMode", "PendingAdd"]


class EnsembleChangeMode(enum.Enum):
    """When a failed bookie is replaced."""

    #: At the first failed or timed-out write (BookKeeper's default).
    IMMEDIATE = "immediate"
    #: Only once some write set can no longer reach the ack quorum without the failed bookies
    #: (BookKeeper's "delay ensemble change"); until then entries get fewer copies.
    WHEN_ACK_QUORUM_LOST = "when_ack_quorum_lost"

    @classmethod
    def parse(cls, value: str | EnsembleChangeMode) -> EnsembleChangeMode:
        if isinstance(value, EnsembleChangeMode):
            return value
        try:
            return cls(value)
        except ValueError:
            names = ", ".join(repr(m.value) for m in cls)
            raise InvalidArgumentError(
                f"unknown ensemble_change {value!r} (use one of {names})"
            ) from None


@final
class PendingAdd:
    """One entry sent but not yet acknowledged to the caller."""

    __slots__ = ("acked", "count", "entry_id", "lac", "length", "packet", "write_set")

    def __init__(self, entry_id: int, lac: int, length: int, ws: tuple[int, ...]) -> None:
        self.entry_id = entry_id
        #: The LAC carried by the entry (known when it was sent).
        self.lac = lac
        #: Ledger length up to and including this entry.
        self.length = length
        self.write_set = ws
        #: The encoded packet (set by the caller; kept for re-sends after an ensemble change).
        self.packet = b""
        #: Bit i set = slot i acked.
        self.acked = 0
        self.count = 0

    def __repr__(self) -> str:
        return f"PendingAdd(entry_id={self.entry_id}, count={self.count}, acked={self.acked:b})"


@final
class AddTracker:
    """Pending adds of one writer and its LAC."""

    __slots__ = (
        "_blocked",
        "_changing",
        "_mode",
        "_pending",
        "_write_sets",
        "ack_quorum",
        "acked_length",
        "ensemble_size",
        "last_add_confirmed",
        "length",
        "next_entry_id",
        "write_quorum",
    )

    def __init__(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        *,
        last_add_confirmed: int = INVALID_ENTRY_ID,
        length: int = 0,
        mode: EnsembleChangeMode = EnsembleChangeMode.IMMEDIATE,
    ) -> None:
        if not ensemble_size >= write_quorum >= ack_quorum >= 1:
            raise InvalidArgumentError(
                f"need E >= Qw >= Qa >= 1, got E={ensemble_size} Qw={write_quorum} Qa={ack_quorum}"
            )
        self.ensemble_size: Final = ensemble_size
        self.write_quorum: Final = write_quorum
        self.ack_quorum: Final = ack_quorum
        self._mode = mode
        # Only E distinct write sets exist (BookKeeper's protocol document); compute them once.
        self._write_sets = [
            tuple(write_set(i, ensemble_size, write_quorum)) for i in range(ensemble_size)
        ]
        #: Highest entry acknowledged to the caller (all lower ones are acknowledged too).
        self.last_add_confirmed = last_add_confirmed
        self.next_entry_id = last_add_confirmed + 1
        #: Total payload length of every entry added so far.
        self.length = length
        #: Ledger length up to and including the LAC.
        self.acked_length = length
        self._pending: dict[int, PendingAdd] = {}
        self._blocked: set[int] = set()
        self._changing: frozenset[int] = frozenset()

    # --- queries -----------------------------------------------------------------------

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    def pending(self) -> list[PendingAdd]:
        """Unacknowledged entries, lowest first."""
        return list(self._pending.values())

    @property
    def blocked_slots(self) -> frozenset[int]:
        """Slots that failed and are not (yet) replaced: nothing is sent to them."""
        return frozenset(self._blocked)

    @property
    def changing_slots(self) -> frozenset[int]:
        """Slots whose replacement is being written to the metadata right now."""
        return self._changing

    def is_blocked(self, slot: int) -> bool:
        return slot in self._blocked

    def write_set(self, entry_id: int) -> tuple[int, ...]:
        return self._write_sets[entry_id % self.ensemble_size]

    def targets(self, pa: PendingAdd) -> tuple[int, ...]:
        """The slots ``pa`` should be sent to now (its write set minus blocked slots)."""
        if not self._blocked:
            return pa.write_set
        return tuple(s for s in pa.write_set if s not in self._blocked)

    # --- events ------------------------------------------------------------------------

    def add(self, size: int) -> PendingAdd:
        """Assign the next entry id to a payload of ``size`` bytes; the caller sends it to
        :meth:`targets` after storing the encoded packet in ``packet``."""
        entry_id = self.next_entry_id
        self.next_entry_id = entry_id + 1
        self.length += size
        pa = PendingAdd(
            entry_id,
            self.last_add_confirmed,
            self.length,
            self._write_sets[entry_id % self.ensemble_size],
        )
        self._pending[entry_id] = pa
        return pa

    def on_ack(self, entry_id: int, slot: int) -> bool:
        """A bookie in ``slot`` acked ``entry_id``; True if the LAC moved.

        Acks for unknown (already acknowledged or failed) entries, from slots outside the write
        set, from blocked slots, or repeated, are ignored.
        """
        pa = self._pending.get(entry_id)
        if pa is None:
            return False
        bit = 1 << slot
        if pa.acked & bit or slot in self._blocked or slot not in pa.write_set:
            return False
        pa.acked |= bit
        pa.count += 1
        if pa.count < self.ack_quorum or entry_id != self.last_add_confirmed + 1:
            return False
        # Ordered acknowledgement: this entry and every following one that already has its
        # quorum are acknowledged now.
        pending = self._pending
        lac = entry_id
        del pending[lac]
        qa = self.ack_quorum
        while True:
            nxt = pending.get(lac + 1)
            if nxt is None or nxt.count < qa:
                break
            lac += 1
            pa = nxt
            del pending[lac]
        self.last_add_confirmed = lac
        self.acked_length = pa.length
        return True

    def on_bookie_failure(self, slot: int) -> bool:
        """A write to ``slot`` failed or timed out; True if an ensemble change should start now
        (none may be running: check :attr:`changing_slots`)."""
        if not 0 <= slot < self.ensemble_size:
            raise InvalidArgumentError(f"slot {slot} out of range")
        self._blocked.add(slot)
        return self.needs_change()

    def needs_change(self) -> bool:
        """Whether blocked slots that are not being replaced call for an ensemble change."""
        waiting = self._blocked - self._changing
        if not waiting or self._changing:
            return False
        if self._mode is EnsembleChangeMode.IMMEDIATE:
            return True
        return not self.ack_quorum_reachable()

    def ack_quorum_reachable(self) -> bool:
        """Whether every write set still has Qa slots that are not blocked."""
        blocked = self._blocked
        return all(
            sum(1 for s in ws if s not in blocked) >= self.ack_quorum for ws in self._write_sets
        )

    def start_ensemble_change(self) -> tuple[int, frozenset[int]]:
        """Begin replacing every blocked slot: returns (first entry of the new fragment, slots).

        The new fragment starts at the first unacknowledged entry. Acks already received from
        the slots being replaced no longer count: in the new fragment another bookie stores
        those entries, and an entry is only acknowledged once Qa bookies *of its fragment* have
        it.
        """
        if self._changing:
            raise InvalidArgumentError("an ensemble change is already running")
        slots = frozenset(self._blocked)
        if not slots:
            raise InvalidArgumentError("no slot to replace")
        self._changing = slots
        mask = 0
        for s in slots:
            mask |= 1 << s
        for pa in self._pending.values():
            if pa.acked & mask:
                pa.acked &= ~mask
                pa.count = pa.acked.bit_count()
        return self.last_add_confirmed + 1, slots

    def finish_ensemble_change(self) -> list[tuple[PendingAdd, tuple[int, ...]]]:
        """The new fragment is in the metadata: unblock the replaced slots and return what to
        (re-)send to them: each pending entry with the replaced slots of its write set."""
        slots = self._changing
        self._changing = frozenset()
        self._blocked -= slots
        resend: list[tuple[PendingAdd, tuple[int, ...]]] = []
        for pa in self._pending.values():
            targets = tuple(s for s in pa.write_set if s in slots and s not in self._blocked)
            if targets:
                resend.append((pa, targets))
        return resend

    def abort_ensemble_change(self) -> None:
        """The change failed (the caller fails the writer); forget it."""
        self._changing = frozenset()

    def fail_all(self) -> list[PendingAdd]:
        """Drop every pending add (the writer is fenced or broken); returns them."""
        dropped = list(self._pending.values())
        self._pending.clear()
        return dropped
