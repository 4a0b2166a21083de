"""A history of durable consumers (``log.consumer(name)``) and its checker.

A :class:`ConsumerHistory` records what a log's writer and its consumers were told: the
records acknowledged, each consumer object's registration (where it resumes), the records it
handed out, the commits it started and those that returned, ConsumerBackloggedError, and the
log's truncation points as an observer saw them move. Each consumer *object* is an instance
(a process that restarts makes a new one). In a single-threaded trio run the order of the
events is the real order.

:func:`check_consumers` checks what durable consumers promise:

- ``no_redelivery``: an instance never hands out a record at or before a position whose
  commit returned before it registered (committed records are not delivered again after a
  restart), and hands out records in log order, each once;
- ``no_uncommitted_lost``: every acknowledged record at or after a consumer's first
  registered position was handed out by some instance of it, no instance was told it was
  behind (unless ``quota`` says the log has a backlog quota), and whenever the log's
  truncation point was seen to move, no acknowledged record at or after the consumer's
  registered position lay between the furthest commit it had started and that point
  (retention deleted nothing it had not committed; a commit that started may have landed
  before it returned, so only a truncation past every started commit counts).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import final

import attrs
import trio

from walkit._core.log_position import LogPosition
from walkit.testing._checkers import CheckResult, _Tally

__all__ = ["ConsumerHistory", "check_consumers"]


@final
@attrs.frozen
class ConsumerEvent:
    """One thing a writer or consumer instance was told (``kind``: appended, registered,
    delivered, committed, backlogged)."""

    seq: int
    time: float
    kind: str
    #: The consumer's name ("" for appends).
    consumer: str
    #: The consumer object ("" for appends).
    instance: str
    position: LogPosition
    payload: bytes = b""


@final
class ConsumerHistory:
    """What a log's writer and consumers were told (record from sync code, in a trio run)."""

    def __init__(self) -> None:
        self.events: list[ConsumerEvent] = []

    def _record(
        self, kind: str, consumer: str, instance: str, position: LogPosition, payload: bytes = b""
    ) -> None:
        try:
            now = trio.current_time()
        except RuntimeError:
            now = 0.0
        event = ConsumerEvent(len(self.events), now, kind, consumer, instance, position, payload)
        self.events.append(event)

    def appended(self, position: LogPosition, payload: bytes) -> None:
        """An append returned ``position``: the record is durable."""
        self._record("appended", "", "", position, payload)

    def registered(self, consumer: str, instance: str, position: LogPosition) -> None:
        """Instance ``instance`` of ``consumer`` registered: it resumes at ``position``."""
        self._record("registered", consumer, instance, position)

    def delivered(
        self, consumer: str, instance: str, position: LogPosition, payload: bytes
    ) -> None:
        self._record("delivered", consumer, instance, position, payload)

    def committed(self, consumer: str, instance: str, resume: LogPosition) -> None:
        """A commit returned: every record before ``resume`` is committed."""
        self._record("committed", consumer, instance, resume)

    def backlogged(self, consumer: str, instance: str, position: LogPosition) -> None:
        self._record("backlogged", consumer, instance, position)

    def commit_started(self, consumer: str, instance: str, resume: LogPosition) -> None:
        """A commit to ``resume`` was called (it may land before it returns, or never)."""
        self._record("commit_started", consumer, instance, resume)

    def truncated(self, position: LogPosition) -> None:
        """An observer saw the log's truncation point at ``position``."""
        self._record("truncated", "", "", position)


def check_consumers(history: ConsumerHistory, *, quota: bool = False) -> list[CheckResult]:
    """The two checks of the module docs; ``quota``: the log had a backlog quota (consumers
    may be told they are behind)."""
    return [_no_redelivery(history.events), _no_uncommitted_lost(history.events, quota)]


def _no_redelivery(events: Sequence[ConsumerEvent]) -> CheckResult:
    tally = _Tally("no_redelivery", "instances", "delivered", "redelivered", "out_of_order")
    committed: dict[str, LogPosition] = {}
    #: Per instance: what was committed when it registered, and its last record.
    floor: dict[str, LogPosition] = {}
    last: dict[str, LogPosition] = {}
    for ev in events:
        if ev.kind == "committed":
            committed[ev.consumer] = max(committed.get(ev.consumer, ev.position), ev.position)
        elif ev.kind == "registered":
            tally.count("instances")
            floor[ev.instance] = committed.get(ev.consumer, LogPosition.EARLIEST)
        elif ev.kind == "delivered":
            tally.count("delivered")
            before = floor.get(ev.instance, LogPosition.EARLIEST)
            if ev.position < before:
                tally.violation(
                    "redelivered",
                    f"{ev.instance} of consumer {ev.consumer} handed out {ev.position} at "
                    f"t={ev.time:.3f}, but everything before {before} was committed before it "
                    "registered",
                )
            previous = last.get(ev.instance)
            if previous is not None and ev.position <= previous:
                tally.violation(
                    "out_of_order",
                    f"{ev.instance} of consumer {ev.consumer} handed out {ev.position} after "
                    f"{previous}",
                )
            last[ev.instance] = ev.position
    return tally.result()


def _no_uncommitted_lost(events: Sequence[ConsumerEvent], quota: bool) -> CheckResult:
    tally = _Tally(
        "no_uncommitted_lost", "acked", "consumers", "missing", "mismatched", "behind", "passed"
    )
    acked = [(ev.position, ev.payload) for ev in events if ev.kind == "appended"]
    tally.count("acked", len(acked))
    first: dict[str, LogPosition] = {}
    delivered: dict[str, dict[LogPosition, bytes]] = defaultdict(dict)
    #: The furthest commit each consumer started (it may have landed).
    started: dict[str, LogPosition] = {}
    for ev in events:
        if ev.kind == "registered":
            first.setdefault(ev.consumer, ev.position)
        elif ev.kind == "delivered":
            delivered[ev.consumer][ev.position] = ev.payload
        elif ev.kind == "commit_started":
            started[ev.consumer] = max(started.get(ev.consumer, ev.position), ev.position)
        elif ev.kind == "truncated" and not quota:
            for name, start in first.items():
                bound = max(start, started.get(name, start))
                gone = [p for p, _payload in acked if bound <= p < ev.position]
                if gone:
                    tally.violation(
                        "passed",
                        f"the log was truncated at {ev.position} (seen at t={ev.time:.3f}), "
                        f"past consumer {name}'s furthest commit {bound}: {len(gone)} "
                        f"acknowledged records from {gone[0]} on were not committed",
                    )
        elif ev.kind == "backlogged" and not quota:
            tally.violation(
                "behind",
                f"{ev.instance} of consumer {ev.consumer} was told at t={ev.time:.3f} that "
                f"records from {ev.position} were deleted before it committed them",
            )
    for name, start in sorted(first.items()):
        tally.count("consumers")
        got = delivered[name]
        for position, payload in acked:
            if position < start:
                continue
            seen = got.get(position)
            if seen is None and not quota:
                tally.violation(
                    "missing",
                    f"consumer {name} (registered at {start}) never got the record acknowledged "
                    f"at {position}",
                )
            elif seen is not None and seen != payload:
                tally.violation(
                    "mismatched", f"consumer {name} got other bytes at {position} than were acked"
                )
    return tally.result()
