"""The :class:`LogHandle` protocol: a :class:`~walkit.log._context.LogContext` that also makes
readers (the log writer reads its recovered tail to learn its producers).

Apart from ``_context`` so that ``_reader``, which names ``LogContext``, is not named back by
it (see ``docs/architecture.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from walkit.log._context import LogContext

if TYPE_CHECKING:
    from walkit._core.log_position import LogPosition
    from walkit.log._reader import LogReader

__all__ = ["LogHandle"]


class LogHandle(LogContext, Protocol):
    """A log handle as its writer sees it."""

    def reader(
        self,
        start: LogPosition | str = ...,
        *,
        end: LogPosition | str | None = None,
        follow: bool = True,
        skip_truncated: bool = True,
    ) -> LogReader[Any]: ...
