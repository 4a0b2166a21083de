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

#: Positions remembered per producer (a duplicate older than these is still recognised, but
#: reported without its position).
RECENT_POSITIONS: Final = 64
#: Largest sequence number (they are stored as u64).
MAX_SEQUENCE: Final = 2**64 - 1


@final
@attrs.define
class _Producer:
    highest: int
    recent: deque[tuple[int, LogPosition]] = attrs.field(
        factory=lambda: deque(maxlen=RECENT_POSITIONS)
    )


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
        entry.recent.append((sequence, position))

    def duplicate_of(self, producer_id: str, sequence: int) -> tuple[bool, LogPosition | None]:
        """Whether ``sequence`` is already durable, and the first copy's position if it is
        among the last remembered ones."""
        entry = self._producers.get(producer_id)
        if entry is None or sequence > entry.highest:
            return False, None
        for seq, pos in reversed(entry.recent):
            if seq == sequence:
                return True, pos
            if seq < sequence:
                break
        return True, None
