"""Replicated state machines on a walkit log: apply records in order, snapshot every N,
restore from the latest snapshot and replay the log after it, take over as leader.

See docs/log.md ("Replicated state machines").
"""

from walkit.statemachine._replica import Leader, Replica, StateMachine

__all__ = ["Leader", "Replica", "StateMachine"]
