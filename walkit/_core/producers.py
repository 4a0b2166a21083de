"""Idempotent producers (Kafka's idempotent producer, on a log).

A writer may tag each record with a producer id and a sequence number that grows with every
record that producer sends. The log writer keeps, per producer, the highest sequence number
durable in the log (and the positions of the last few), so that an append retried after an
unknown outcome (a timeout, a fenced writer, a crash) is stored once: a sequence number at or
below the producer's highest is a duplicate, reported with the first copy's position.

Pure bookkeeping: the writer feeds it the records that became durable (its own, and those of
the log's tail that a new writer recovers) and asks it about each tagged append.
"""

from __future__ import annotations

from collections import deque
from typing import Final, final

import attrs

from walkit._core.log_position import LogPosition

__all__ = ["MAX_SEQUENCE", "RECENT_POSITIONS", "ProducerTable"]

#: Runs of positions remembered per producer: a run is the producer's records with consecutive
#: sequence numbers in consecutive slots of one entry (a batch of many records costs a run per
#: entry). A duplicate older than these is still recognised, but reported without its position.
RECENT_POSITIONS: Final = 64
#: Largest sequence number (they are stored as u64).
MAX_SEQUENCE: Final = 2**64 - 1


@final
@attrs.define
class _Run:
    """Sequence numbers ``first`` .. ``last`` at slots ``at.slot`` .. of one entry."""

    first: int
    last: int
    at: LogPosition

    def extends_to(self, sequence: int, position: LogPosition) -> bool:
        at = self.at
        return (
            sequence == self.last + 1
            and position.ledger_seq == at.ledger_seq
            and position.entry_id == at.entry_id
            and position.slot == at.slot + (sequence - self.first)
        )

    def position_of(self, sequence: int) -> LogPosition:
        at = self.at
        return LogPosition._of(at.ledger_seq, at.entry_id, at.slot + (sequence - self.first))


@final
@attrs.define
class _Producer:
    highest: int
    recent: deque[_Run] = attrs.field(factory=lambda: deque(maxlen=RECENT_POSITIONS))


@final
class ProducerTable:
    """Per producer: the highest durable sequence number and the last positions."""

    def __init__(self) -> None:
        self._producers: dict[str, _Producer] = {}

    def __len__(self) -> int:
        return len(self._producers)

    def highest(self, producer_id: str) -> int | None:
        """The producer's highest durable sequence number (None: nothing seen)."""
        entry = self._producers.get(producer_id)
        return None if entry is None else entry.highest

    def durable(self, producer_id: str, sequence: int, position: LogPosition) -> None:
        """A record of the producer is durable at ``position`` (fed in log order)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            entry = self._producers[producer_id] = _Producer(sequence)
        elif sequence <= entry.highest:
            return  # a copy the log holds twice (written before idempotence): keep the first
        entry.highest = sequence
        recent = entry.recent
        if recent and recent[-1].extends_to(sequence, position):
            recent[-1].last = sequence
        else:
            recent.append(_Run(sequence, sequence, position))

    def duplicate_of(self, producer_id: str, sequence: int) -> tuple[bool, LogPosition | None]:
        """Whether ``sequence`` is already durable, and the first copy's position if it is
        among the last remembered ones."""
        entry = self._producers.get(producer_id)
        if entry is None or sequence > entry.highest:
            return False, None
        for run in reversed(entry.recent):
            if run.first <= sequence <= run.last:
                return True, run.position_of(sequence)
            if run.last < sequence:
                break
        return True, None
