"""Liveness and readiness of one KV replica (``GET /livez``, ``GET /readyz``), for
orchestrators that ask for them separately (etcd's ``/livez`` and ``/readyz``).

- Live: the replica answers, and its follow loop has not been failing for
  ``FOLLOW_FAILING_LIMIT`` seconds without applying a record (a restart is the remedy then).
- Ready: it knows its role, and
  - as the leader: it has taken the log over and caught up, and its lease is confirmed by a
    read of the election node (at most about the lease timeout when the store is unreachable);
  - as a follower: a leader is known, its follow loop is not failing, and it has applied the
    log: the first record after what it applied, read from the log now, gets applied within
    ``CATCH_UP`` seconds (or there is none).

Each answers 200, or 503 with the reasons, as JSON.
"""

from __future__ import annotations

from typing import Any, Final, Protocol

import trio

import walkit
from walkit.recipes import LeaderElection
from walkit.statemachine import Replica

#: Seconds a follow loop may keep failing, without applying a record, before the replica is
#: no longer live.
FOLLOW_FAILING_LIMIT: Final = 30.0
#: Seconds a follower has to apply the first record it has not applied yet.
CATCH_UP: Final = 1.0
#: Seconds a probe waits to read the next record from the log.
READ_TIMEOUT: Final = 2.0


class FollowFailure(Protocol):
    since: float
    error: str
    applied: int


class Service(Protocol):
    """What the probes read of a replica (a ``KVService``)."""

    replica: Replica
    election: LeaderElection | None

    @property
    def leading(self) -> bool: ...

    @property
    def follow_failure(self) -> FollowFailure | None: ...


Check = tuple[str, bool, str]


def _answer(checks: list[Check], role: str) -> tuple[int, dict[str, Any]]:
    ok = all(passed for _, passed, _ in checks)
    doc: dict[str, Any] = {
        "status": "ok" if ok else "failed",
        "role": role,
        "checks": {name: {"ok": passed, "detail": detail} for name, passed, detail in checks},
    }
    if not ok:
        doc["reasons"] = [f"{name}: {detail}" for name, passed, detail in checks if not passed]
    return (200 if ok else 503), doc


def _role(service: Service) -> str:
    election = service.election
    if election is None:
        return "starting"
    return "leader" if service.leading else election.role.value


def _follow_failing(service: Service, limit: float) -> Check:
    failure = service.follow_failure
    if failure is not None and failure.applied == service.replica.applied_count:
        failing = trio.current_time() - failure.since
        if failing > limit:
            return (
                "follow",
                False,
                f"following the log has failed for {failing:.1f} s without applying a record "
                f"(last error: {failure.error})",
            )
    return ("follow", True, "not failing")


def liveness(service: Service) -> tuple[int, dict[str, Any]]:
    checks = [("http", True, "answering"), _follow_failing(service, FOLLOW_FAILING_LIMIT)]
    return _answer(checks, _role(service))


async def _lease(election: LeaderElection) -> Check:
    confirmed = False
    with trio.move_on_after(election.lease_timeout):
        confirmed = await election.confirm()
    if confirmed:
        return ("lease", True, "held: confirmed by a read of the election node just now")
    return (
        "lease",
        False,
        f"not confirmed within {election.lease_timeout:g} s (the metadata store is "
        "unreachable, or the lease was lost)",
    )


async def _applied(replica: Replica) -> Check:
    applied = replica.applied_position
    record: walkit.LogRecord | None = None
    with trio.move_on_after(READ_TIMEOUT) as reading:
        try:
            reader = replica.log.reader(replica.next_position, follow=False, skip_truncated=False)
            record = await reader.next()
        except walkit.errors.WalkitError as exc:
            return ("applied", False, f"cannot read the log after {applied}: {exc}")
    if reading.cancelled_caught:
        return (
            "applied",
            False,
            f"the log after {applied} could not be read in {READ_TIMEOUT:g} s",
        )
    if record is None or record.position <= applied:
        return ("applied", True, f"applied the whole log (up to {applied})")
    with trio.move_on_after(CATCH_UP):
        await replica.wait_applied(record.position)
        return ("applied", True, f"applied the log up to {record.position} within {CATCH_UP:g} s")
    return (
        "applied",
        False,
        f"behind: the log holds {record.position}, not applied within {CATCH_UP:g} s (applied "
        f"up to {replica.applied_position})",
    )


async def readiness(service: Service) -> tuple[int, dict[str, Any]]:
    election = service.election
    role = _role(service)
    if election is None:
        return _answer([("role", False, "starting: the election has not begun")], role)
    if election.is_leader and not service.leading:
        return _answer([("role", False, "won the lease; taking the log over")], role)
    if service.leading:
        return _answer([("role", True, "leader"), await _lease(election)], role)
    checks: list[Check] = []
    if election.leader is None:
        checks.append(("role", False, f"{role}, and no leader is known"))
    else:
        checks.append(("role", True, f"follower of {election.leader}"))
    checks.append(_follow_failing(service, 0.0))
    checks.append(await _applied(service.replica))
    return _answer(checks, role)
