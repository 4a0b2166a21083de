"""Violations of one key's history that need no search: reads of values that cannot be there.

The search has to rule out every order of the operations before a violation, which is slow
when many requests got no answer. The commonest violations are plain to see, though, when the
value a read returned was written by exactly one operation:

- the value was never written (and is not the initial value);
- the only write of it was a cas that answered "refused";
- its write was sent only after the read was answered (a read from the future);
- its write was answered, and then another write, a delete or a successful cas ran entirely
  after that answer and entirely before the read was sent (a stale read, or a lost write).

And for a read that found the key absent, when the key has no delete at all (nothing but a
delete makes a key absent): the key held a value from the start, or a write or successful cas
was answered before the read was sent.

Each of these proves the history is not linearizable; finding none proves nothing, and the
search runs as usual. Intervals are closed, as in the search: only strict order counts.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Protocol, TypeVar


class _Op(Protocol):
    @property
    def kind(self) -> str: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def invoked(self) -> float: ...
    @property
    def completed(self) -> float | None: ...
    @property
    def found(self) -> bool | None: ...


Op = TypeVar("Op", bound=_Op)


def find_stale_read(
    ops: Sequence[Op], initial: bytes | None, describe: Callable[[Op], str]
) -> str | None:
    """An explanation of a violation the search is not needed for, or None."""
    writers: dict[bytes | None, list[Op]] = defaultdict(list)
    for op in ops:
        if op.kind in ("write", "cas"):
            writers[op.value].append(op)
    # Operations that surely left the key not holding the value of an earlier unique write:
    # answered writes, deletes and successful cas, by invocation time.
    setters = sorted(
        (
            op
            for op in ops
            if op.completed is not None
            and (op.kind in ("write", "delete") or (op.kind == "cas" and op.found is True))
        ),
        key=lambda op: op.invoked,
    )
    starts = [op.invoked for op in setters]
    # earliest[i]: the setter among setters[i:] answered first.
    earliest: list[int] = [0] * len(setters)
    for i in range(len(setters) - 1, -1, -1):
        later = earliest[i + 1] if i + 1 < len(setters) else i
        first = setters[later].completed
        assert first is not None
        done = setters[i].completed
        assert done is not None
        earliest[i] = i if done <= first else later
    absent = _absent_after_a_write(ops, initial, describe)
    if absent is not None:
        return absent
    for read in ops:
        if read.kind != "read" or read.completed is None or read.value is None:
            continue
        if read.value == initial:
            continue
        sources = writers.get(read.value, [])
        if not sources:
            return f"{describe(read)}: nothing wrote that value"
        if len(sources) > 1:
            continue
        (write,) = sources
        if write.kind == "cas" and write.completed is not None and write.found is False:
            return f"{describe(read)}: the only write of that value was refused: {describe(write)}"
        if write.invoked > read.completed:
            return f"{describe(read)}: read before its only write was sent: {describe(write)}"
        if write.completed is None:
            continue
        i = bisect.bisect_right(starts, write.completed)
        if i < len(setters):
            over = setters[earliest[i]]
            assert over.completed is not None
            if over.completed < read.invoked:
                return (
                    f"{describe(read)}: a stale read; its value was written by "
                    f"{describe(write)}, and then {describe(over)} ran entirely after that "
                    "write and before the read"
                )
    return None


def _absent_after_a_write(
    ops: Sequence[Op], initial: bytes | None, describe: Callable[[Op], str]
) -> str | None:
    if any(op.kind == "delete" for op in ops):
        return None
    first: Op | None = None  # the write (or successful cas) answered first
    first_done = float("inf")
    for op in ops:
        sets = op.kind == "write" or (op.kind == "cas" and op.found is True)
        if sets and op.completed is not None and op.completed < first_done:
            first, first_done = op, op.completed
    for read in ops:
        if read.kind != "read" or read.completed is None or read.value is not None:
            continue
        if initial is not None:
            return f"{describe(read)}: the key held a value from the start and nothing deletes it"
        if first is not None and first_done < read.invoked:
            return (
                f"{describe(read)}: a lost write; {describe(first)} was answered before the "
                "read was sent, and nothing deletes the key"
            )
    return None
