"""Linearizability of a key-value store's history, key by key.

Each key is a register holding bytes or nothing. The history is what clients saw: for each
operation, when it was sent, when (or whether) it was answered, and the answer. Because
operations on different keys never interact, the history is linearizable exactly when each
key's sub-history is (P-compositionality), and each key is checked alone with the generic
search of :mod:`walkit.testing._wgl`.

The register's sequential specification:

- ``read`` observes the state: ``value`` is what it read, None when the key was absent.
- ``write`` sets the state to ``value``.
- ``delete`` makes the key absent; ``found`` (when known) says whether it existed.
- ``cas`` sets ``value`` if the state equals ``expected`` (``found=True``), else refuses and
  leaves it (``found=False``); with ``found=None`` it does whichever the state implies.

An operation with ``completed=None`` got no answer: it may take effect at any point after it was
invoked, or never. Its answer (a read's value, ``found``) is unknown, so it only contributes its
effect; a read without an answer is left out.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping, Sequence
from typing import Final, Literal, final, get_args

import attrs

from walkit.testing._stale_reads import find_stale_read
from walkit.testing._wgl import Budget, LinearizabilityResult, search
from walkit.testing._wgl_lazy import search_lazy

Kind = Literal["read", "write", "delete", "cas"]
_KINDS: Final = frozenset(get_args(Kind))
#: Longest value shown in an explanation.
_SHOW_BYTES: Final = 32


@final
@attrs.frozen
class KVOperation:
    """One client operation on one key, as the client saw it.

    ``value``: for write/cas the value written, for read the value observed (None = absent),
    for delete None. ``invoked``/``completed``: when the request was sent and the answer came
    (any one monotonic clock); ``completed=None`` when no answer came (it may or may not have
    taken effect). ``expected``: cas only, the value the key must hold (None = absent).
    ``found``: delete, True if it answered "deleted", False if "not found"; cas, True if it
    succeeded, False if refused; None if unknown. A client issues one operation at a time.
    """

    client: int
    key: str
    kind: Kind
    value: bytes | None
    invoked: float
    completed: float | None
    expected: bytes | None = None
    found: bool | None = None


def _show(value: bytes | None) -> str:
    if value is None:
        return "<absent>"
    return repr(value if len(value) <= _SHOW_BYTES else value[:_SHOW_BYTES] + b"...")


def describe(op: KVOperation) -> str:
    """One line for an explanation: who, what, the answer and the interval."""
    end = "no answer" if op.completed is None else f"{op.completed:.6f}"
    span = f"[{op.invoked:.6f}, {end}]"
    if op.kind == "read":
        what = f"read -> {_show(op.value)}"
    elif op.kind == "write":
        what = f"write {_show(op.value)}"
    elif op.kind == "delete":
        what = "delete" + (
            "" if op.found is None else f" -> {'deleted' if op.found else 'not found'}"
        )
    else:
        answer = "" if op.found is None else f" -> {'ok' if op.found else 'refused'}"
        what = f"cas {_show(op.expected)} => {_show(op.value)}{answer}"
    return f"client {op.client} {what} {span}"


@final
class RegisterModel:
    """The sequential specification of one key (a :class:`walkit.testing.Model`).

    Given the key's history it also prepares two shortcuts for unanswered operations, which
    otherwise may take effect at any later point or never, and make the search exponential:

    - :meth:`deadline`: an unanswered write (or cas) of a value that nothing else writes, and
      that an answered read returned (or a successful cas expected), took effect before that
      answer: it is searched as if answered then.
    - :meth:`interchangeable`: unanswered deletes, and unanswered writes (cas with one expected
      value) of values nothing observes, have the same effect as each other: such writes all
      write one stand-in value (nothing can tell their values apart), and the search counts
      how many took effect instead of which.
    """

    def __init__(self, initial: bytes | None = None, history: Sequence[KVOperation] = ()) -> None:
        self.initial = initial
        values: set[bytes | None] = {initial}
        writers: Counter[bytes | None] = Counter()
        #: Values some operation compares the state with: answered reads, every cas.
        self.observed: set[bytes | None] = set()
        #: value -> the earliest answer of an operation that saw the key hold it.
        self.seen_by: dict[bytes | None, float] = {}
        for op in history:
            values.update((op.value, op.expected))
            if op.kind in ("write", "cas"):
                writers[op.value] += 1
            if op.kind == "cas":
                self.observed.add(op.expected)
            elif op.kind == "read" and op.completed is not None:
                self.observed.add(op.value)
            seen = op.value if op.kind == "read" else op.expected if op.found else None
            if op.completed is not None and op.kind in ("read", "cas") and seen is not None:
                self.seen_by[seen] = min(self.seen_by.get(seen, op.completed), op.completed)
        self.unique = {v for v, n in writers.items() if n == 1 and v != initial}
        anonymous = b"\0unanswered write"
        while anonymous in values:
            anonymous += b"\0"
        self.anonymous = anonymous

    def deadline(self, op: KVOperation) -> float | None:
        """When an unanswered op must have taken effect, if an answer shows it did."""
        if (
            op.completed is not None
            or op.kind not in ("write", "cas")
            or op.value not in self.unique
        ):
            return None
        seen = self.seen_by.get(op.value)
        return None if seen is None else max(seen, op.invoked)

    def _anonymous(self, op: KVOperation) -> bool:
        return op.completed is None and op.value not in self.observed

    def interchangeable(self, op: KVOperation) -> Hashable | None:
        """The class of an unanswered op with the same effect as the others of it, or None."""
        if op.completed is not None:
            return None
        if op.kind == "delete":
            return "delete"
        if op.kind == "write" and self._anonymous(op):
            return "write"
        if op.kind == "cas" and self._anonymous(op):
            return ("cas", op.expected)
        return None

    def init(self) -> bytes | None:
        return self.initial

    def step(self, state: bytes | None, op: KVOperation) -> tuple[bool, bytes | None]:
        answered = op.completed is not None
        if op.kind == "read":
            return (not answered or op.value == state), state
        value = self.anonymous if self._anonymous(op) else op.value
        if op.kind == "write":
            return True, value
        if op.kind == "delete":
            if not answered or op.found is None:
                return True, None
            return op.found == (state is not None), None
        # cas
        matches = state == op.expected
        if not answered or op.found is None:
            return True, (value if matches else state)
        if op.found:
            return matches, value
        return not matches, state

    def describe_operation(self, op: KVOperation) -> str:
        return describe(op)

    def describe_state(self, state: bytes | None) -> str:
        if state == self.anonymous:
            return "<the value of an unanswered write that nobody read>"
        return _show(state)


def _validate(op: KVOperation) -> None:
    if op.kind not in _KINDS:
        raise ValueError(f"kind must be one of {sorted(_KINDS)}, not {op.kind!r}: {op!r}")
    if op.kind in ("write", "cas") and op.value is None:
        raise ValueError(f"a {op.kind} needs the value it wrote: {op!r}")
    if op.kind == "delete" and op.value is not None:
        raise ValueError(f"a delete has no value: {op!r}")
    if op.kind != "cas" and op.expected is not None:
        raise ValueError(f"only a cas has an expected value: {op!r}")
    if op.kind in ("read", "write") and op.found is not None:
        raise ValueError(f"only a delete or cas has found: {op!r}")
    if op.completed is not None and op.completed < op.invoked:
        raise ValueError(f"completed before it was invoked: {op!r}")


def check_kv_linearizable(
    history: Sequence[KVOperation],
    *,
    initial: Mapping[str, bytes] | None = None,
    time_budget: float | None = 10.0,
    max_steps: int | None = None,
) -> LinearizabilityResult:
    """Whether a key-value history is linearizable, each key a register (absent at first, or
    ``initial[key]``).

    Keys are checked one by one, fewest operations first; the first key that is not
    linearizable decides. ``time_budget`` (seconds of wall-clock time, a safety valve for test
    suites) and ``max_steps`` (search steps, deterministic) bound the whole check; when one runs
    out the result is undecided (``ok=None``) and names the key being searched.
    Raises ``ValueError`` for a malformed operation.
    """
    initial = dict(initial or {})
    by_key: dict[str, list[KVOperation]] = defaultdict(list)
    for op in history:
        _validate(op)
        if op.kind == "read" and op.completed is None:
            continue  # no answer, no effect: it constrains nothing
        by_key[op.key].append(op)
    budget = Budget(time_budget, max_steps)
    for key in sorted(by_key, key=lambda k: (len(by_key[k]), k)):
        ops = by_key[key]
        stale = find_stale_read(ops, initial.get(key), describe)
        if stale is not None:
            return LinearizabilityResult(False, key, f"key {key!r}: {stale}")
        model = RegisterModel(initial.get(key), ops)
        classes = [model.interchangeable(op) for op in ops]
        deadlines = [model.deadline(op) for op in ops]
        # Greedy order first (it finds a linearization fastest), with a third of what is
        # left; then the order that refutes failing histories with unanswered ops fastest.
        phase = budget.share(1 / 3)
        ok, explanation = search(ops, model, phase, classes, deadlines)
        budget.absorb(phase)
        if ok is None and not budget.exhausted:
            phase = budget.share(1.0)
            ok, explanation = search_lazy(ops, model, phase, classes, deadlines)
            budget.absorb(phase)
        if ok is None:
            explanation = budget.describe()
        if ok is not True:
            return LinearizabilityResult(ok, key, f"key {key!r}: {explanation}")
    n = sum(len(ops) for ops in by_key.values())
    return LinearizabilityResult(
        True, None, f"{n} operations on {len(by_key)} keys in {budget.steps} search steps"
    )
