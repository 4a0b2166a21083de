"""The explicit LAC: telling the bookies the last entries are acknowledged when no entry
follows to carry it.

Every entry carries the LAC known when it was sent (the protocol document), so the bookies
learn that the last entries of a burst are acknowledged only with the next entry. A reader
that long-polls the LAC would wait for it as long as the writer is quiet. So once the LAC has
moved and no entry was sent for ``interval`` seconds since (nor since the last entry went out),
the writer sends the LAC by itself (BookKeeper's explicit LAC, ``WRITE_LAC``). Counting from
the move, not only from the last send, matters to a writer that keeps writing: its acks come
more than ``interval`` after the entries they acknowledge, and the next entry, a moment later,
carries the LAC anyway.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import final

import anyio

from walkit._core.add_tracker import AddTracker
from walkit._core.wire import Response, WriteLacRequest, encode_frame
from walkit._logging import get_logger
from walkit.errors import ClientClosedError, WalkitError
from walkit.net._connection import BookieConnection

log = get_logger(__name__)

__all__ = ["ExplicitLac", "write_lac"]


@final
class _Ignore:
    """Answers nobody waits for (explicit LAC writes)."""

    __slots__ = ()

    def on_response(self, tag: int, status: int, msg: Response | None) -> None:
        pass

    def on_error(self, tag: int, error: WalkitError) -> None:
        pass


_IGNORE = _Ignore()


def write_lac(
    ledger_id: int,
    key: bytes,
    conns: Sequence[BookieConnection],
    tracker: AddTracker,
    timeout: float,
    lac: int,
) -> None:
    """Send ``lac`` to the writer's bookies (``conns``, by slot; not the blocked ones)."""
    for slot, conn in enumerate(conns):
        if tracker.is_blocked(slot):
            continue
        rid = conn.new_request_id()
        frame = encode_frame(WriteLacRequest(rid, ledger_id, lac, key))
        try:
            conn.send((frame,), rid, _IGNORE, 0, timeout)
        except ClientClosedError:
            return


@final
class ExplicitLac:
    """When to send the LAC by itself (see the module docs). ``lac()`` is the writer's LAC now,
    ``write(lac)`` sends it to the bookies, and ``failed()`` says the writer has stopped."""

    __slots__ = (
        "_failed",
        "_lac",
        "_moved",
        "_timer",
        "_write",
        "carried",
        "interval",
        "last_send",
    )

    def __init__(
        self,
        interval: float,
        lac: Callable[[], int],
        write: Callable[[int], None],
        failed: Callable[[], bool],
    ) -> None:
        self.interval = interval
        self._lac = lac
        self._write = write
        self._failed = failed
        self._moved = anyio.Event()
        #: The timer while it runs: each send pushes its deadline, so under load it never fires
        #: (sleeping ``interval`` at a time woke the writer 200 times a second for nothing).
        self._timer: anyio.CancelScope | None = None
        #: When entries were last sent, and the highest LAC they carried.
        self.last_send = 0.0
        self.carried = -1

    def moved(self) -> None:
        """The LAC moved."""
        self._moved.set()

    def sent(self, now: float, lac: int) -> None:
        """Entries carrying ``lac`` went out at ``now`` (the loop's clock)."""
        self.last_send = now
        if lac > self.carried:  # (entries sent again after an ensemble change carry older ones)
            self.carried = lac
        timer = self._timer
        if timer is not None:  # moving a cancel scope's deadline costs ~10 µs: only if it runs
            timer.deadline = now + self.interval

    async def run(self) -> None:
        """Send the LAC whenever it moved and nothing carried it for ``interval`` seconds;
        until cancelled."""
        try:
            while True:
                await self._moved.wait()
                self._moved = anyio.Event()
                start = max(self.last_send, anyio.current_time())
                with anyio.CancelScope(deadline=start + self.interval) as timer:
                    self._timer = timer
                    try:
                        await anyio.sleep_forever()
                    finally:
                        self._timer = None
                lac = self._lac()
                if lac > self.carried and not self._failed():
                    self.carried = lac
                    self._write(lac)
        except Exception:  # pragma: no cover - a bug must not take the client down
            log.exception("explicit_lac_crashed")
