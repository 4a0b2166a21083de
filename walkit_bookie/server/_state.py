"""What the writes (``_writes``) and the reads (``_reads``) of one bookie share."""

from __future__ import annotations

from typing import final

import attrs

from walkit.shared import ParkingLot
from walkit_bookie._config import BookieConfig
from walkit_bookie.server._admission import RequestAdmission
from walkit_bookie.server._connection import Cork
from walkit_bookie.server._stats import BookieStats
from walkit_bookie.storage import BookieStorage, LedgerInfo

__all__ = ["RequestState"]


@final
@attrs.frozen
class RequestState:
    """The bookie's configuration and storage, what it knows of each ledger, the long polls
    waiting on each ledger (the group commit wakes them), its counters, its admission, and the
    cork that batches a group commit's answers."""

    config: BookieConfig
    storage: BookieStorage
    stats: BookieStats
    admission: RequestAdmission
    ledgers: dict[int, LedgerInfo] = attrs.field(factory=dict)
    lac_waiters: dict[int, ParkingLot] = attrs.field(factory=dict)
    #: Held while a group commit answers its requests (``_connection.Cork``).
    cork: Cork = attrs.field(factory=Cork)
