"""walkit's public test kit: the real client and bookie code, run deterministically.

- :class:`SimNetwork`: the :class:`walkit.net.Network` seam in memory, with faults (delay, stall,
  pause, partitions, refused connects, resets), all driven by one seeded ``random.Random``.
- :class:`SimCluster`: real bookies on simulated storage (crash loses what was not synced),
  a memory metadata store (versions, ephemerals, session expiry) and real clients.
- :func:`run`: ``trio.run`` on a ``MockClock`` with trio's scheduler seeded, so a seed replays.
- :class:`History` and the pure checkers (``check_*``): what clients were told, and whether the
  protocol's invariants held.
"""

from walkit.testing._checkers import (
    CheckResult,
    assert_ok,
    check_all,
    check_closed_ledgers_replicated,
    check_entry_replication,
    check_fenced_writer,
    check_no_divergence,
    check_no_lost_acks,
    check_readers_agree,
)
from walkit.testing._cluster import BOOKIE_PORT, SimBookie, SimCluster, derive_rng
from walkit.testing._history import (
    AddAcked,
    AddFailed,
    AddInvoked,
    CloseAcked,
    Event,
    FenceCompleted,
    History,
    LedgerClosedObserved,
    ReadObserved,
    StoredCopies,
)
from walkit.testing._network import LinkFaults, SimNetwork, SimNode, SimStream
from walkit.testing._runner import (
    SEED_ENV,
    STALL_STEPS,
    SimulationStalled,
    StallGuard,
    deterministic_scheduling,
    replay_hint,
    run,
    seed_from_env,
)

__all__ = [
    "BOOKIE_PORT",
    "SEED_ENV",
    "STALL_STEPS",
    "AddAcked",
    "AddFailed",
    "AddInvoked",
    "CheckResult",
    "CloseAcked",
    "Event",
    "FenceCompleted",
    "History",
    "LedgerClosedObserved",
    "LinkFaults",
    "ReadObserved",
    "SimBookie",
    "SimCluster",
    "SimNetwork",
    "SimNode",
    "SimStream",
    "SimulationStalled",
    "StallGuard",
    "StoredCopies",
    "assert_ok",
    "check_all",
    "check_closed_ledgers_replicated",
    "check_entry_replication",
    "check_fenced_writer",
    "check_no_divergence",
    "check_no_lost_acks",
    "check_readers_agree",
    "derive_rng",
    "deterministic_scheduling",
    "replay_hint",
    "run",
    "seed_from_env",
]
