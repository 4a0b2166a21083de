"""Helpers for the metadata tests (trio or asyncio: they use AnyIO)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio

from walkit.metadata import WatchEvent, WatchEventKind

#: Only a guard against hangs; nothing is asserted about how fast things happen.
HANG_GUARD = 30.0


async def next_event(events: AsyncIterator[WatchEvent]) -> WatchEvent:
    with anyio.fail_after(HANG_GUARD):
        return await events.__anext__()


async def wait_for(events: AsyncIterator[WatchEvent], kind: WatchEventKind) -> WatchEvent:
    """Skip events until one of ``kind`` arrives."""
    with anyio.fail_after(HANG_GUARD):
        async for event in events:
            if event.kind is kind:
                return event
    raise AssertionError(f"the watch ended before a {kind} event")


async def drained(events: AsyncIterator[WatchEvent]) -> list[WatchEvent]:
    """All remaining events of a watch that is ending."""
    with anyio.fail_after(HANG_GUARD):
        return [event async for event in events]
