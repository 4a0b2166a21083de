"""Coordination recipes on a metadata store (kazoo style: one recipe per module).

- :class:`LeaderElection`: one leader among candidates, as an ephemeral node (a lease), with
  its decisions in :class:`LeaseState` (no I/O).
"""

from walkit.recipes._election import LeaderElection
from walkit.recipes._lease_state import Action, Claim, LeaseState, Role

__all__ = ["Action", "Claim", "LeaderElection", "LeaseState", "Role"]
