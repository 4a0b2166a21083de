"""walkit's public test kit: the real client and bookie code, run deterministically.

- :class:`SimNetwork`: the :class:`walkit.net.Network` seam in memory, with faults (delay, stall,
  pause, partitions, refused connects, resets), all driven by one seeded ``random.Random``.
- :class:`SimCluster`: real bookies on simulated storage (crash loses what was not synced),
  a memory metadata store (versions, ephemerals, session expiry) and real clients.
- :func:`run`: ``trio.run`` on a ``MockClock`` with trio's scheduler seeded, so a seed replays;
  :func:`sim_wall_clock`, the wall clock a :class:`SimCluster` gives its clients.
- :class:`History` and the pure checkers (``check_*``): what clients were told, and whether the
  protocol's invariants held; :class:`ConsumerHistory` and :func:`check_consumers` for durable
  consumers (nothing committed is delivered again, nothing uncommitted is lost to retention).
- :func:`check_kv_linearizable`: whether a key-value store's history (:class:`KVOperation`) is
  linearizable; :func:`check_linearizable` does the same for any :class:`Model`.
- :class:`FaultProxy`: a TCP proxy between real processes that adds delay and jitter per
  direction, caps bandwidth, stalls connections half-open and resets them (Toxiproxy's model).
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
from walkit.testing._consumers import ConsumerEvent, ConsumerHistory, check_consumers
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
from walkit.testing._linearizability import KVOperation, check_kv_linearizable
from walkit.testing._network import LinkFaults, SimClientStream, SimNetwork, SimNode, SimStream
from walkit.testing._proxy import Direction, FaultProxy
from walkit.testing._runner import (
    SEED_ENV,
    SIM_EPOCH,
    STALL_STEPS,
    SimulationStalled,
    StallGuard,
    deterministic_scheduling,
    replay_hint,
    run,
    seed_from_env,
    sim_wall_clock,
)
from walkit.testing._wgl import LinearizabilityResult, Model, TimedOperation, check_linearizable

__all__ = [
    "BOOKIE_PORT",
    "SEED_ENV",
    "SIM_EPOCH",
    "STALL_STEPS",
    "AddAcked",
    "AddFailed",
    "AddInvoked",
    "CheckResult",
    "CloseAcked",
    "ConsumerEvent",
    "ConsumerHistory",
    "Direction",
    "Event",
    "FaultProxy",
    "FenceCompleted",
    "History",
    "KVOperation",
    "LedgerClosedObserved",
    "LinearizabilityResult",
    "LinkFaults",
    "Model",
    "ReadObserved",
    "SimBookie",
    "SimClientStream",
    "SimCluster",
    "SimNetwork",
    "SimNode",
    "SimStream",
    "SimulationStalled",
    "StallGuard",
    "StoredCopies",
    "TimedOperation",
    "assert_ok",
    "check_all",
    "check_closed_ledgers_replicated",
    "check_consumers",
    "check_entry_replication",
    "check_fenced_writer",
    "check_kv_linearizable",
    "check_linearizable",
    "check_no_divergence",
    "check_no_lost_acks",
    "check_readers_agree",
    "derive_rng",
    "deterministic_scheduling",
    "replay_hint",
    "run",
    "seed_from_env",
    "sim_wall_clock",
]
