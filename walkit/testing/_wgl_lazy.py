"""The same search as :mod:`walkit.testing._wgl`, ordered for refuting histories with many
unanswered operations.

Every operation without an end (unanswered, no deadline) leaves the list. The search tries
them only when no listed call can go next (at a return entry), and its cache keeps, per
(linearized listed ops, state), which of them were used: a configuration is pruned when an
explored one had the same listed ops and state with a subset of them used (fewer used
dominates: more are left). Interchangeable ones (``classes``) are counted, not named.

Greedy order (the list's) finds a linearization of a correct history fastest; this one
refutes a failing history with many unanswered operations in far fewer steps, so
:func:`walkit.testing.check_kv_linearizable` runs the first with part of the budget, then
this one.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Sequence

from walkit.testing._wgl import (
    Budget,
    Model,
    Op,
    S,
    TimedOperation,
    _build_list,
    _ends,
    _Entry,
    _explain,
    _lift,
    _unlift,
    _validate,
)

__all__ = ["search_lazy"]


def search_lazy(
    ops: Sequence[Op],
    model: Model[S, Op],
    budget: Budget,
    classes: Sequence[Hashable | None] | None = None,
    deadlines: Sequence[float | None] | None = None,
) -> tuple[bool | None, str]:
    """:func:`walkit.testing._wgl.search` (same arguments and answer), trying unanswered
    operations last and pruning by domination (see the module docstring)."""
    _validate(ops)
    ends = _ends(ops, deadlines)
    members = _classes(ops, ends, classes)
    class_of = [-1] * len(ops)
    for cls, ids in enumerate(members):
        for i in ids:
            class_of[i] = cls
    head = _build_list(ops, ends, [c < 0 for c in class_of])
    remaining = sum(1 for end in ends if end is not None)
    invoked = [[ops[i].invoked for i in m] for m in members]
    # A class of one is a bit of `used`; a bigger one has a slot in `counts`.
    slot: list[int] = []
    n_single = n_multi = 0
    for m in members:
        if len(m) == 1:
            slot.append(n_single)
            n_single += 1
        else:
            slot.append(n_multi)
            n_multi += 1
    used = 0
    counts = [0] * n_multi
    state = model.init()
    bits = 0  # the linearized listed ops
    cache: dict[tuple[int, S], list[tuple[int, tuple[int, ...]]]] = {}

    def fresh(key: tuple[int, S]) -> bool:
        """Record (key, used, counts) unless an explored configuration dominates it."""
        now = tuple(counts)
        seen = cache.get(key)
        if seen is None:
            cache[key] = [(used, now)]
            return True
        for old_used, old in seen:
            if old_used & ~used == 0 and (
                old == now or all(a <= b for a, b in zip(old, now, strict=True))
            ):
                return False
        seen.append((used, now))
        return True

    fresh((0, state))
    # Frames: (listed call entry, or None for a class op; class; op id; state before; the
    # return entry the search was blocked at, for a class op).
    stack: list[tuple[_Entry | None, int, int, S, _Entry | None]] = []
    best: tuple[int, list[int], S, int] | None = None  # (depth, order, state, blocking op)
    entry = head.next
    next_class = 0
    while remaining > 0:
        if not budget.spend():
            return None, budget.describe()
        assert entry is not None  # a completed, unlinearized op's return is still ahead
        if entry.is_call:
            legal, new_state = model.step(state, ops[entry.id])
            if legal and fresh((bits | (1 << entry.id), new_state)):
                stack.append((entry, -1, entry.id, state, None))
                state = new_state
                bits |= 1 << entry.id
                if entry.match is not None:
                    remaining -= 1
                _lift(entry)
                entry = head.next
                next_class = 0
                continue
            entry = entry.next
            continue
        # The first return entry: its op must have taken effect by now, and no listed call
        # before it can go next. Try the classes, then backtrack.
        horizon = ends[entry.id]
        assert horizon is not None
        pushed = False
        for cls in range(next_class, len(members)):
            if invoked[cls][0] > horizon:
                break  # classes are in order of their first invocation
            single = len(members[cls]) == 1
            if single:
                if used >> slot[cls] & 1:
                    continue
                op_id = members[cls][0]
            else:
                taken = counts[slot[cls]]
                if bisect.bisect_right(invoked[cls], horizon) <= taken:
                    continue  # none left that was sent by now
                op_id = members[cls][taken]
            legal, new_state = model.step(state, ops[op_id])
            if not legal:
                continue
            if single:
                used |= 1 << slot[cls]
            else:
                counts[slot[cls]] += 1
            if fresh((bits, new_state)):
                stack.append((None, cls, op_id, state, entry))
                state = new_state
                entry = head.next
                next_class = 0
                pushed = True
                break
            if single:
                used &= ~(1 << slot[cls])
            else:
                counts[slot[cls]] -= 1
        if pushed:
            continue
        assert entry is not None
        if best is None or len(stack) > best[0]:
            best = (len(stack), [frame[2] for frame in stack], state, entry.id)
        if not stack:
            break
        popped, cls, op_id, state, blocked = stack.pop()
        if popped is None:
            if len(members[cls]) == 1:
                used &= ~(1 << slot[cls])
            else:
                counts[slot[cls]] -= 1
            entry = blocked
            next_class = cls + 1
            continue
        bits &= ~(1 << op_id)
        if popped.match is not None:
            remaining += 1
        _unlift(popped)
        entry = popped.next
        next_class = 0
    else:
        return True, ""
    assert best is not None
    return False, _explain(ops, ends, model, best)


def _classes(
    ops: Sequence[TimedOperation],
    ends: Sequence[float | None],
    classes: Sequence[Hashable | None] | None,
) -> list[list[int]]:
    """The ops without an end, grouped by class (an op without one is alone), each group in
    invocation order, the groups in order of their first invocation."""
    if classes is not None and len(classes) != len(ends):
        raise ValueError(f"{len(classes)} classes for {len(ends)} operations")
    groups: dict[Hashable, list[int]] = {}
    for i in sorted(range(len(ops)), key=lambda i: ops[i].invoked):
        cls = None if classes is None else classes[i]
        if ends[i] is not None:
            if cls is not None:
                raise ValueError(f"operation {i} has an end and cannot be interchangeable")
            continue
        groups.setdefault(("op", i) if cls is None else ("class", cls), []).append(i)
    return list(groups.values())
