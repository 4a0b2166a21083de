"""The watch iterator every bundled driver returns, and the mapping from changes to events."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, final

import anyio

from walkit._loop import current_loop
from walkit.metadata._store import WatchEvent, WatchEventKind

#: What a driver records about one change of one node.
ChangeKind = Literal["created", "changed", "deleted", "children"]


def event_for(target: str, children: bool, path: str, kind: ChangeKind) -> WatchEvent | None:
    """The event a watch on ``target`` sees for a change of ``path``, or None if it is not its."""
    if path != target:
        return None
    if kind == "deleted":
        return WatchEvent(WatchEventKind.DELETED, path)
    if kind == "created":
        return WatchEvent(WatchEventKind.CHANGED, path)
    if kind == "children":
        return WatchEvent(WatchEventKind.CHILDREN, path) if children else None
    return None if children else WatchEvent(WatchEventKind.CHANGED, path)


def catch_up_event(path: str, children: bool) -> WatchEvent:
    """The event to send when changes may have been missed (the reader re-reads anyway)."""
    return WatchEvent(WatchEventKind.CHILDREN if children else WatchEventKind.CHANGED, path)


@final
class WatchStream:
    """Async iterator of :class:`WatchEvent` returned by ``MetadataStore.watch``.

    Pending events are coalesced: an event already waiting is moved to the end rather than
    queued twice, so a slow reader sees each kind of change once, in the order of the latest
    occurrences. Use ``aclose()`` (or ``async with``) to stop watching early.

    A stream belongs to the event loop it was created in (its store's); iterating it from
    another thread or loop raises WrongEventLoopError.
    """

    def __init__(
        self,
        targets: Sequence[tuple[str, bool]],
        on_close: Callable[[WatchStream], None] | None = None,
    ) -> None:
        #: ``(path, children)`` pairs this stream watches.
        self.targets = tuple(targets)
        #: Driver objects that must live as long as the stream (ZooKeeper watch re-armers).
        self.keepalive: list[object] = []
        self._pending: dict[WatchEvent, None] = {}
        self._done = False
        self._loop = current_loop()
        self._wakeup = anyio.Event()
        self._on_close = on_close

    @property
    def done(self) -> bool:
        return self._done

    def push(self, event: WatchEvent) -> None:
        """Queue an event (from the event loop's thread; never blocks)."""
        if self._done:
            return
        self._pending.pop(event, None)
        self._pending[event] = None
        self._wakeup.set()

    def finish(self, last: WatchEvent | None = None) -> None:
        """End the stream after the pending events (and ``last``, if given)."""
        if self._done:
            return
        if last is not None:
            self.push(last)
        self._done = True
        self._wakeup.set()
        on_close, self._on_close = self._on_close, None
        if on_close is not None:
            on_close(self)

    async def aclose(self) -> None:
        """Stop watching now; pending events are dropped."""
        self._pending.clear()
        self._loop.check("a metadata watch")
        self.finish()
        await self._loop.checkpoint()

    def __aiter__(self) -> WatchStream:
        return self

    async def __anext__(self) -> WatchEvent:
        loop = self._loop
        loop.check("a metadata watch")
        while True:
            if self._pending:
                await loop.checkpoint()
                if self._pending:
                    event = next(iter(self._pending))
                    del self._pending[event]
                    return event
                continue
            if self._done:
                await loop.checkpoint()
                raise StopAsyncIteration
            await self._wakeup.wait()
            self._wakeup = anyio.Event()

    async def __aenter__(self) -> WatchStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
