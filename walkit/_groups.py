"""One way to surface a task group's ExceptionGroup from a public call: one error.

No raw ExceptionGroup escapes a public call. :func:`collapse` picks the error to raise (the
first :class:`~walkit.errors.WalkitError`, else the first other error, cancellations last) and
keeps every other error of the group on it as a note (``__notes__``, printed by tracebacks), so
a secondary failure is never silently dropped.
"""

from __future__ import annotations

from walkit._loop import is_cancellation
from walkit.errors import WalkitError

__all__ = ["collapse", "leaves"]


def leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    """The errors of a group, nested groups flattened, in order."""
    out: list[BaseException] = []
    stack: list[BaseException] = [group]
    while stack:
        exc = stack.pop()
        if isinstance(exc, BaseExceptionGroup):
            stack.extend(reversed(exc.exceptions))
        else:
            out.append(exc)
    return out


def collapse(group: BaseExceptionGroup[BaseException]) -> BaseException:
    """The one error to raise for ``group`` (raise it ``from None``), the others as its notes.

    Cancellations only count when there is nothing else (then the first one is returned, for
    its cancel scope to catch).
    """
    found = leaves(group)
    real = [exc for exc in found if not is_cancellation(exc)]
    if not real:
        return found[0] if found else group
    chosen = next((exc for exc in real if isinstance(exc, WalkitError)), real[0])
    for other in real:
        if other is not chosen:
            note = f"also raised: {type(other).__name__}: {other}"
            if note not in getattr(chosen, "__notes__", ()):
                chosen.add_note(note)
    return chosen
