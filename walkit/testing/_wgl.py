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
from collections.abc import Hashable, Sequence
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
        self.max_steps = max_steps
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

    def share(self, fraction: float) -> Budget:
        """A budget for one phase: ``fraction`` of what is left (charge it back with
        :meth:`absorb`)."""
        left = None if self.deadline is None else max(self.deadline - time.monotonic(), 1e-3)
        steps = None if self.steps_left is None else max(1, int(self.steps_left * fraction))
        return Budget(None if left is None else left * fraction, steps)

    def absorb(self, phase: Budget) -> None:
        """Charge the steps a phase took to this budget."""
        self.steps += phase.steps
        if self.steps_left is not None:
            self.steps_left -= phase.steps

    @property
    def exhausted(self) -> bool:
        if self.steps_left is not None and self.steps_left <= 0:
            return True
        return self.deadline is not None and time.monotonic() > self.deadline

    def describe(self) -> str:
        limits = []
        if self.time_budget is not None:
            limits.append(f"{self.time_budget:g} s")
        if self.max_steps is not None:
            limits.append(f"{self.max_steps} steps")
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


def _build_list(
    ops: Sequence[TimedOperation],
    ends: Sequence[float | None],
    listed: Sequence[bool] | None = None,
) -> _Entry:
    """The sentinel head of the call/return list, sorted by time, calls first on ties (only
    the ``listed`` ops, when given)."""
    keyed: list[tuple[float, int, int, _Entry]] = []
    for i, (op, end) in enumerate(zip(ops, ends, strict=True)):
        if listed is not None and not listed[i]:
            continue
        call = _Entry(i, True)
        keyed.append((op.invoked, 0, i, call))
        if end is not None:
            ret = _Entry(i, False)
            call.match = ret
            keyed.append((end, 1, i, ret))
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
    classes: Sequence[Hashable | None] | None = None,
    deadlines: Sequence[float | None] | None = None,
) -> tuple[bool | None, str]:
    """Run the search over ``ops`` (one partition); ``(ok, explanation)``.

    ``classes`` (optional, one per operation) names sets of interchangeable operations: ops of
    one class must all be unanswered and have the same effect from every state. The cache then
    records how many of a class took effect instead of which ones, which turns the 2**n
    subsets of n such operations into n + 1 counts.

    ``deadlines`` (optional, one per operation) gives an unanswered operation a time by which it
    must have taken effect (say, the answer of a read that returned what only it wrote): it
    then counts as answered at that time.
    """
    _validate(ops)
    ends = _ends(ops, deadlines)
    head = _build_list(ops, ends)
    remaining = sum(1 for end in ends if end is not None)
    class_of = _class_indexes(ends, classes)
    counts = [0] * (max(class_of, default=-1) + 1)
    state = model.init()
    key_bits = 0  # the linearized ops without a class
    cache: set[tuple[int, S, tuple[int, ...]]] = {(0, state, tuple(counts))}
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
                cls = class_of[entry.id]
                if cls < 0:
                    new_bits = key_bits | (1 << entry.id)
                    key = (new_bits, new_state, tuple(counts))
                else:
                    new_bits = key_bits
                    counts[cls] += 1
                    key = (new_bits, new_state, tuple(counts))
                    counts[cls] -= 1
                if key not in cache:
                    cache.add(key)
                    stack.append((entry, state))
                    state = new_state
                    key_bits = new_bits
                    if cls >= 0:
                        counts[cls] += 1
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
        if class_of[popped.id] < 0:
            key_bits &= ~(1 << popped.id)
        else:
            counts[class_of[popped.id]] -= 1
        if popped.match is not None:
            remaining += 1
        _unlift(popped)
        entry = popped.next
    else:
        return True, ""
    assert best is not None
    return False, _explain(ops, ends, model, best)


def _ends(
    ops: Sequence[TimedOperation], deadlines: Sequence[float | None] | None
) -> list[float | None]:
    """When each operation must have taken effect: its answer, else its deadline, else never."""
    if deadlines is None:
        return [op.completed for op in ops]
    if len(deadlines) != len(ops):
        raise ValueError(f"{len(deadlines)} deadlines for {len(ops)} operations")
    ends = []
    for op, deadline in zip(ops, deadlines, strict=True):
        if deadline is not None and (op.completed is not None or deadline < op.invoked):
            raise ValueError(f"a deadline is for an unanswered operation, after it: {op!r}")
        ends.append(op.completed if deadline is None else deadline)
    return ends


def _class_indexes(
    ends: Sequence[float | None], classes: Sequence[Hashable | None] | None
) -> list[int]:
    """A small index per class, -1 for none."""
    if classes is None:
        return [-1] * len(ends)
    if len(classes) != len(ends):
        raise ValueError(f"{len(classes)} classes for {len(ends)} operations")
    index: dict[Hashable, int] = {}
    out = []
    for i, (end, cls) in enumerate(zip(ends, classes, strict=True)):
        if cls is None:
            out.append(-1)
            continue
        if end is not None:
            raise ValueError(f"operation {i} has an end and cannot be interchangeable")
        out.append(index.setdefault(cls, len(index)))
    return out


def _explain(
    ops: Sequence[Op],
    ends: Sequence[float | None],
    model: Model[S, Op],
    best: tuple[int, list[int], S, int],
) -> str:
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
    blocked_at = ends[blocking]
    assert blocked_at is not None  # only operations with an end have a return entry
    note = "" if ops[blocking].completed is not None else f" (observed by {blocked_at:.6f})"
    lines.append(f"  {model.describe_operation(ops[blocking])}{note}")
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
