"""The client's bookie connections: one per bookie, shared by all ledgers, plus the failure
history that read ordering uses and the task that enforces request deadlines."""

from __future__ import annotations

from typing import final

import trio

from walkit._core.types import BookieId
from walkit._core.wire import DEFAULT_MAX_FRAME_SIZE
from walkit._logging import get_logger
from walkit.errors import ClientClosedError
from walkit.net._connection import BookieConnection
from walkit.net._transport import Network

log = get_logger(__name__)

__all__ = ["ConnectionPool"]


@final
class ConnectionPool:
    """Connections to bookies, made on first use; run :meth:`run` in a nursery first."""

    def __init__(
        self,
        network: Network,
        *,
        connect_timeout: float = 5.0,
        timeout_check_interval: float = 0.05,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self.network = network
        self._connect_timeout = connect_timeout
        self._interval = timeout_check_interval
        self._max_frame_size = max_frame_size
        self._connections: dict[BookieId, BookieConnection] = {}
        self._nursery: trio.Nursery | None = None
        self._activity = trio.Event()
        self._closed = False
        #: Bookie -> trio time of its last failure (a refused or broken connection, a timeout).
        #: Read ordering puts recently failed bookies last.
        self.failure_history: dict[BookieId, float] = {}

    def get(self, bookie: BookieId) -> BookieConnection:
        """The connection to ``bookie`` (created, not yet connected, on first use)."""
        conn = self._connections.get(bookie)
        if conn is not None:
            return conn
        if self._closed or self._nursery is None:
            raise ClientClosedError("the client is closed" if self._closed else "pool not running")
        conn = BookieConnection(
            bookie,
            self.network,
            connect_timeout=self._connect_timeout,
            on_failure=self._record_failure,
            on_activity=self._kick,
            max_frame_size=self._max_frame_size,
        )
        try:
            self._nursery.start_soon(conn.run)
        except RuntimeError:  # the nursery is shutting down
            self._closed = True
            raise ClientClosedError("the client is closed") from None
        self._connections[bookie] = conn
        return conn

    def connections(self) -> list[BookieConnection]:
        return list(self._connections.values())

    def _kick(self) -> None:
        self._activity.set()

    def _record_failure(self, bookie: BookieId) -> None:
        self.failure_history[bookie] = trio.current_time()

    def record_failure(self, bookie: BookieId) -> None:
        """Note a failure seen above the connection (for example a bad digest)."""
        self._record_failure(bookie)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the connections' tasks and expire overdue requests, until cancelled."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await self._expire_loop()
        finally:
            self._closed = True

    async def _expire_loop(self) -> None:
        while True:
            # Sleep while nothing is pending anywhere; a send wakes us.
            self._activity = trio.Event()
            if not any(c.pending_count for c in self._connections.values()):
                await self._activity.wait()
            await trio.sleep(self._interval)
            now = trio.current_time()
            for conn in list(self._connections.values()):
                conn.expire(now)
