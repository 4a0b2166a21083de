"""The decisions of leader election on one ephemeral node, without I/O (h11 style).

ZooKeeper's recipe, in its "one ephemeral leader node, created with compare-and-set" form
(it works the same on every metadata driver): each candidate tries to create the node as an
ephemeral of its own session, holding its identity; whoever succeeds leads until its session
ends (close, crash, partition longer than the session timeout); the others watch the node and
try again when it goes away.

:class:`LeaseState` is fed what the store answered and says what to do next; the async driver
(:class:`walkit.recipes.LeaderElection`) does the store calls and the waiting.
"""

from __future__ import annotations

import enum
import json
from typing import final

import attrs

from walkit.errors import InvalidMetadataError

__all__ = ["Action", "Claim", "LeaseState", "Role"]


class Role(enum.Enum):
    CANDIDATE = "candidate"  # no leader known to this candidate: trying to become one
    LEADER = "leader"  # this candidate holds the node
    FOLLOWER = "follower"  # someone else holds the node
    STOPPED = "stopped"


class Action(enum.Enum):
    """What the driver does next."""

    CREATE = "create"  # try to create the node (ephemeral, with our claim)
    READ = "read"  # read the node (it exists: whose is it?)
    WAIT = "wait"  # wait for the node to change (watch), then report it
    NEW_SESSION = "new_session"  # the session is gone: open a new one, then CREATE
    BACKOFF = "backoff"  # the store failed: wait ``backoff`` seconds, then READ
    NOTHING = "nothing"


@final
@attrs.frozen
class Claim:
    """What the leader node holds: a token unique to one candidacy (one session) and what the
    candidate advertises (an address, say)."""

    token: str
    advertise: str

    def encode(self) -> bytes:
        return json.dumps({"token": self.token, "advertise": self.advertise}).encode()

    @classmethod
    def decode(cls, data: bytes) -> Claim:
        try:
            obj = json.loads(data)
            return cls(token=str(obj["token"]), advertise=str(obj["advertise"]))
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidMetadataError(f"malformed leader node {data[:100]!r}: {exc}") from None


@final
class LeaseState:
    """One candidate's view of the election. Every method returns the next :class:`Action`.

    ``backoff_base``/``backoff_max``: seconds between attempts while the store fails (doubling).
    ``rejoin_delay``: seconds a leader that lost its session waits before it runs again.
    """

    def __init__(
        self,
        claim: Claim,
        *,
        backoff_base: float = 0.05,
        backoff_max: float = 1.0,
        rejoin_delay: float = 0.25,
    ) -> None:
        self.claim = claim
        self.role = Role.CANDIDATE
        #: The holder's claim, when known (ours when leading).
        self.leader: Claim | None = None
        #: Times this candidate lost the lead (stepped down) since it started.
        self.step_downs = 0
        self.backoff = 0.0
        self._backoff_base = backoff_base
        self._backoff_max = backoff_max
        self._rejoin_delay = rejoin_delay
        self._failures = 0

    def start(self, claim: Claim | None = None) -> Action:
        """Begin (or, with a new session's ``claim``, begin again)."""
        if claim is not None:
            self.claim = claim
        if self.role is not Role.STOPPED:
            self._become(Role.CANDIDATE, None)
        return Action.CREATE

    def created(self) -> Action:
        """Our create went through: we lead."""
        self._ok()
        self._become(Role.LEADER, self.claim)
        return Action.WAIT

    def exists(self) -> Action:
        """Our create found the node there."""
        self._ok()
        return Action.READ

    def read(self, data: bytes | None) -> Action:
        """The node's value (None: it is gone)."""
        self._ok()
        if data is None:
            if self.role is Role.LEADER:
                self._step_down()
            self._become(Role.CANDIDATE, None)
            return Action.CREATE
        try:
            holder = Claim.decode(data)
        except InvalidMetadataError:
            holder = None
        if holder is not None and holder.token == self.claim.token:
            # Ours (a create whose answer was lost, or a plain re-read while leading).
            self._become(Role.LEADER, self.claim)
            return Action.WAIT
        if self.role is Role.LEADER:
            self._step_down()
        self._become(Role.FOLLOWER, holder)
        return Action.WAIT

    def changed(self) -> Action:
        """The watch reported a change of the node (created, set): look again."""
        return Action.READ

    def deleted(self) -> Action:
        """The watch reported the node gone: try to take it."""
        if self.role is Role.LEADER:
            self._step_down()
        self._become(Role.CANDIDATE, None)
        return Action.CREATE

    def session_lost(self) -> Action:
        """Our session expired or was closed: whatever we held is gone. A leader that lost
        its lease waits ``rejoin_delay`` (in :attr:`backoff`) before it runs again, so that
        the candidates that saw it go have the first chance."""
        self.backoff = 0.0
        if self.role is Role.LEADER:
            self._step_down()
            self.backoff = self._rejoin_delay
        self._become(Role.CANDIDATE, None)
        return Action.NEW_SESSION

    def store_failed(self) -> Action:
        """A store call failed (unreachable, busy): back off, then look again.

        A leader stays leader here: its lease lasts until its session expires, which the
        driver learns from the store (or decides itself when it cannot renew in time).
        """
        self._failures += 1
        self.backoff = min(self._backoff_max, self._backoff_base * 2 ** (self._failures - 1))
        return Action.BACKOFF

    def stop(self) -> Action:
        if self.role is Role.LEADER:
            self._step_down()
        self._become(Role.STOPPED, None)
        return Action.NOTHING

    # --- internals -------------------------------------------------------------------------

    def _ok(self) -> None:
        self._failures = 0
        self.backoff = 0.0

    def _step_down(self) -> None:
        self.step_downs += 1

    def _become(self, role: Role, leader: Claim | None) -> None:
        if self.role is Role.STOPPED:
            return
        self.role = role
        self.leader = leader
