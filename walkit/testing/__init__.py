"""walkit's public test kit: the real client and bookie code, run deterministically.

- :class:`SimNetwork`: the :class:`walkit.net.Network` seam in memory, with faults (delay, stall,
  pause, partitions, refused connects, resets), all driven by one seeded ``random.Random``.
- :func:`run`: ``trio.run`` on a ``MockClock`` with trio's scheduler seeded, so a seed replays.
"""

from walkit.testing._network import LinkFaults, SimNetwork, SimNode, SimStream
from walkit.testing._runner import (
    SEED_ENV,
    deterministic_scheduling,
    replay_hint,
    run,
    seed_from_env,
)

__all__ = [
    "SEED_ENV",
    "LinkFaults",
    "SimNetwork",
    "SimNode",
    "SimStream",
    "deterministic_scheduling",
    "replay_hint",
    "run",
    "seed_from_env",
]
