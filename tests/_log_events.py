"""Wait for a structured log event instead of sleeping: ``with log_event(...) as seen: ...``."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import trio


@contextlib.contextmanager
def log_event(logger: str, event: str, count: int = 1) -> Iterator[trio.Event]:
    """A trio.Event set once ``logger`` (or a logger below it) has logged ``event`` ``count``
    times, at any level.

    walkit's records carry the structured event as ``record.walkit_event`` (see
    ``walkit._logging``). Records from other threads are handed to trio through its token.
    """
    seen = trio.Event()
    token = trio.lowlevel.current_trio_token()
    left = count

    def _count() -> None:
        nonlocal left
        left -= 1
        if left <= 0:
            seen.set()

    class _Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            fields = getattr(record, "walkit_event", None)
            if isinstance(fields, dict) and fields.get("event") == event:
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(_count)

    target = logging.getLogger(logger)
    handler = _Handler(logging.DEBUG)
    old_level = target.level
    target.addHandler(handler)
    target.setLevel(logging.DEBUG)  # the event is dropped before any handler sees it otherwise
    try:
        yield seen
    finally:
        target.removeHandler(handler)
        target.setLevel(old_level)
