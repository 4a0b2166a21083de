"""A generic linearizability checker: Wing & Gong's search with Lowe's memoization.

This is the algorithm of Porcupine (and Knossos' "wgl"): the history becomes a doubly linked
list of call and return entries sorted by time. The search walks it from the front; at a call
it tries to linearize that operation now (the model's ``step`` must accept it from the current
state), lifts it out of the list and restarts from the front; at a return it has met an
operation that must already have taken effect, so it backtracks. A cache of
``(set of linearized operations, state)`` pairs (Lowe's memoization) cuts every branch that
reaches a configuration already explored.

Operations with ``completed=None`` (no answer: a timeout, a lost connection) may take effect at
any point after their invocation, or never: they have no return entry, and the search succeeds
once every *completed* operation is linearized.

Intervals are closed: an operation invoked at the very instant another completed counts as
concurrent with it (at equal times calls sort before returns), so a coarse clock never makes a
correct history fail.

The budget is a testing-time safety valve: a wall-clock limit (``time.monotonic``) and an
optional count of search steps (deterministic). When either runs out the answer is "undecided"
(``ok=None``), never a guess.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final, Protocol, TypeVar, final

import attrs

S = TypeVar("S")
O_contra = TypeVar("O_contra", contravariant=True)

#: Search steps between two looks at the clock.
_CLOCK_EVERY: Final = 1024
#: How many operations an explanation lists at most.
_EXPLAIN_OPS: Final = 12


class TimedOperation(Protocol):
    """What the generic checker needs of an operation: when it was sent and answered."""

    @property
    def invoked(self) -> float: ...

    @property
    def completed(self) -> float | None: ...


Op = TypeVar("Op", bound=TimedOperation)


class Model(Protocol[S, O_contra]):
    """A sequential specification: states must be hashable and compare by value.

    ``step(state, op)`` returns ``(legal, next_state)``: whether ``op`` could have happened,
    with the answer it got, on an object in ``state``, and the state after it.
    """

    def init(self) -> S: ...

    def step(self, state: S, op: O_contra) -> tuple[bool, S]: ...

    def describe_operation(self, op: O_contra) -> str: ...

    def describe_state(self, state: S) -> str: ...


@final
@attrs.frozen
class LinearizabilityResult:
    """``ok``: True linearizable, False not, None undecided (the budget ran out).

    ``key`` names the first partition (a KV key) found not linearizable or undecided;
    ``explanation`` says why (the longest linearizable prefix and the operation that could not
    follow it). Truthy only when ``ok is True``.
    """

    ok: bool | None
    key: str | None
    explanation: str

    def __bool__(self) -> bool:
        return self.ok is True

    def __str__(self) -> str:
        verdict = {True: "linearizable", False: "NOT linearizable", None: "undecided"}[self.ok]
        where = f" (key {self.key!r})" if self.key is not None else ""
        return f"{verdict}{where}: {self.explanation}" if self.explanation else verdict


@final
class Budget:
    """A shared budget for one check: a wall-clock deadline and/or a number of search steps."""

    def __init__(self, time_budget: float | None, max_steps: int | None) -> None:
        if time_budget is not None and time_budget <= 0:
            raise ValueError(f"time_budget must be > 0 seconds or None, not {time_budget!r}")
        if max_steps is not None and max_steps <= 0:
            raise ValueError(f"max_steps must be > 0 or None, not {max_steps!r}")
        self.time_budget = time_budget
        self.deadline = None if time_budget is None else time.monotonic() + time_budget
        self.steps_left = max_steps
        self.steps = 0
        self._until_clock = _CLOCK_EVERY

    def spend(self) -> bool:
        """Count one step; False once the budget is exhausted."""
        self.steps += 1
        if self.steps_left is not None:
            self.steps_left -= 1
            if self.steps_left < 0:
                return False
        self._until_clock -= 1
        if self._until_clock <= 0:
            self._until_clock = _CLOCK_EVERY
            if self.deadline is not None and time.monotonic() > self.deadline:
                return False
        return True

    def describe(self) -> str:
        limits = []
        if self.time_budget is not None:
            limits.append(f"{self.time_budget:g} s")
        if self.steps_left is not None:
            limits.append(f"{self.steps} steps")
        return f"search budget ({' / '.join(limits)}) exhausted after {self.steps} steps"


class _Entry:
    """A call (``is_call``) or return entry in the doubly linked list."""

    __slots__ = ("id", "is_call", "match", "next", "prev")

    def __init__(self, op_id: int, is_call: bool) -> None:
        self.id = op_id
        self.is_call = is_call
        self.match: _Entry | None = None  # a call's return entry (None: never answered)
        self.prev: _Entry | None = None
        self.next: _Entry | None = None


def _build_list(ops: Sequence[TimedOperation]) -> _Entry:
    """The sentinel head of the call/return list, sorted by time, calls first on ties."""
    keyed: list[tuple[float, int, int, _Entry]] = []
    for i, op in enumerate(ops):
        call = _Entry(i, True)
        keyed.append((op.invoked, 0, i, call))
        if op.completed is not None:
            ret = _Entry(i, False)
            call.match = ret
            keyed.append((op.completed, 1, i, ret))
    keyed.sort(key=lambda k: k[:3])
    head = _Entry(-1, False)
    prev = head
    for *_, entry in keyed:
        prev.next = entry
        entry.prev = prev
        prev = entry
    return head


def _unlink(entry: _Entry) -> None:
    assert entry.prev is not None
    entry.prev.next = entry.next
    if entry.next is not None:
        entry.next.prev = entry.prev


def _relink(entry: _Entry) -> None:
    assert entry.prev is not None
    entry.prev.next = entry
    if entry.next is not None:
        entry.next.prev = entry


def _lift(call: _Entry) -> None:
    _unlink(call)
    if call.match is not None:
        _unlink(call.match)


def _unlift(call: _Entry) -> None:
    if call.match is not None:
        _relink(call.match)
    _relink(call)


def _validate(ops: Sequence[TimedOperation]) -> None:
    for i, op in enumerate(ops):
        if op.completed is not None and op.completed < op.invoked:
            raise ValueError(
                f"operation {i} completed ({op.completed!r}) before it was invoked "
                f"({op.invoked!r}): {op!r}"
            )


def search(
    ops: Sequence[Op],
    model: Model[S, Op],
    budget: Budget,
) -> tuple[bool | None, str]:
    """Run the search over ``ops`` (one partition); ``(ok, explanation)``."""
    _validate(ops)
    head = _build_list(ops)
    remaining = sum(1 for op in ops if op.completed is not None)
    state = model.init()
    linearized = 0
    cache: set[tuple[int, S]] = {(0, state)}
    stack: list[tuple[_Entry, S]] = []
    best: tuple[int, list[int], S, int] | None = None  # (depth, order, state, blocking op)
    entry = head.next
    while remaining > 0:
        if not budget.spend():
            return None, budget.describe()
        assert entry is not None  # a completed, unlinearized op's return is still ahead
        if entry.is_call:
            legal, new_state = model.step(state, ops[entry.id])
            if legal:
                new_linearized = linearized | (1 << entry.id)
                if (new_linearized, new_state) not in cache:
                    cache.add((new_linearized, new_state))
                    stack.append((entry, state))
                    state = new_state
                    linearized = new_linearized
                    if entry.match is not None:
                        remaining -= 1
                    _lift(entry)
                    entry = head.next
                    continue
            entry = entry.next
            continue
        # A return entry: its operation must have taken effect by now, and no call before it
        # can be linearized next. Remember the deepest such dead end, then backtrack.
        if best is None or len(stack) > best[0]:
            best = (len(stack), [e.id for e, _ in stack], state, entry.id)
        if not stack:
            break
        popped, state = stack.pop()
        linearized &= ~(1 << popped.id)
        if popped.match is not None:
            remaining += 1
        _unlift(popped)
        entry = popped.next
    else:
        return True, ""
    assert best is not None
    return False, _explain(ops, model, best)


def _explain(ops: Sequence[Op], model: Model[S, Op], best: tuple[int, list[int], S, int]) -> str:
    depth, order, state, blocking = best
    done = set(order)
    answered = [i for i, op in enumerate(ops) if op.completed is not None]
    lines = [
        f"{len(ops)} operations ({len(answered)} answered); the longest linearizable prefix "
        f"has {depth}:"
    ]
    shown = order if len(order) <= _EXPLAIN_OPS else order[-_EXPLAIN_OPS:]
    if len(shown) < len(order):
        lines.append(f"  ... {len(order) - len(shown)} earlier operations")
    lines.extend(f"  {model.describe_operation(ops[i])}" for i in shown)
    lines.append(
        f"then the state is {model.describe_state(state)}, and this must take effect next:"
    )
    lines.append(f"  {model.describe_operation(ops[blocking])}")
    blocked_at = ops[blocking].completed
    assert blocked_at is not None  # only answered operations have a return entry
    rivals = [
        i
        for i, op in enumerate(ops)
        if i not in done and i != blocking and op.invoked <= blocked_at
    ]
    if rivals:
        lines.append("other operations that could have come first:")
        lines.extend(f"  {model.describe_operation(ops[i])}" for i in rivals[:_EXPLAIN_OPS])
        if len(rivals) > _EXPLAIN_OPS:
            lines.append(f"  ... and {len(rivals) - _EXPLAIN_OPS} more")
    return "\n".join(lines)


def check_linearizable(
    history: Sequence[Op],
    model: Model[S, Op],
    *,
    time_budget: float | None = 10.0,
    max_steps: int | None = None,
) -> LinearizabilityResult:
    """Whether ``history`` (objects with ``invoked``/``completed``) is linearizable for ``model``.

    Checks the history as one object; split it yourself when operations on different parts are
    independent (as :func:`check_kv_linearizable` does per key): that is exponentially cheaper.
    """
    ok, explanation = search(history, model, Budget(time_budget, max_steps))
    return LinearizabilityResult(ok, None, explanation)
