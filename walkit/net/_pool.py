"""The client's bookie connections: one per bookie, shared by all ledgers, plus the failure
history that read ordering uses and the task that enforces request deadlines."""

from __future__ import annotations

from typing import final

import anyio
import anyio.abc

from walkit._core.types import BookieId
from walkit._core.wire import DEFAULT_MAX_FRAME_SIZE
from walkit._logging import get_logger
from walkit._loop import EventLoop, current_loop
from walkit.errors import ClientClosedError
from walkit.net._connection import BookieConnection
from walkit.net._network import Network

log = get_logger(__name__)

__all__ = ["ConnectionPool"]


@final
class ConnectionPool:
    """Connections to bookies, made on first use; run :meth:`run` in a task group first."""

    def __init__(
        self,
        network: Network,
        *,
        loop: EventLoop | None = None,
        connect_timeout: float = 5.0,
        timeout_check_interval: float = 0.05,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ) -> None:
        self.network = network
        #: The running event loop, unless given (create the pool on the loop it serves).
        self._loop = loop if loop is not None else current_loop()
        self._connect_timeout = connect_timeout
        self._interval = timeout_check_interval
        self._max_frame_size = max_frame_size
        self._connections: dict[BookieId, BookieConnection] = {}
        self._tasks: anyio.abc.TaskGroup | None = None
        self._activity = anyio.Event()
        self._closed = False
        #: Bookie -> the loop's time of its last failure (a refused or broken connection, a timeout).
        #: Read ordering puts recently failed bookies last.
        self.failure_history: dict[BookieId, float] = {}

    def get(self, bookie: BookieId) -> BookieConnection:
        """The connection to ``bookie`` (created, not yet connected, on first use)."""
        conn = self._connections.get(bookie)
        if conn is not None:
            return conn
        if self._closed or self._tasks is None:
            raise ClientClosedError("the client is closed" if self._closed else "pool not running")
        conn = BookieConnection(
            bookie,
            self.network,
            loop=self._loop,
            connect_timeout=self._connect_timeout,
            on_failure=self._record_failure,
            on_activity=self._kick,
            max_frame_size=self._max_frame_size,
        )
        run = conn.run()
        try:
            self._tasks.start_soon(lambda: run)
        except RuntimeError:  # the task group is shutting down
            run.close()  # (never started: no "never awaited" warning)
            self._closed = True
            raise ClientClosedError("the client is closed") from None
        self._connections[bookie] = conn
        return conn

    def connections(self) -> list[BookieConnection]:
        return list(self._connections.values())

    def _kick(self) -> None:
        self._activity.set()

    def _record_failure(self, bookie: BookieId) -> None:
        self.failure_history[bookie] = self._loop.time()

    def record_failure(self, bookie: BookieId) -> None:
        """Note a failure seen above the connection (for example a bad digest)."""
        self._record_failure(bookie)

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Own the connections' tasks and expire overdue requests, until cancelled."""
        try:
            async with anyio.create_task_group() as tasks:
                self._tasks = tasks
                task_status.started()
                await self._expire_loop()
        finally:
            self._closed = True

    async def _expire_loop(self) -> None:
        while True:
            # Sleep while nothing is pending anywhere; a send wakes us.
            self._activity = anyio.Event()
            if not any(c.pending_count for c in self._connections.values()):
                await self._activity.wait()
            await anyio.sleep(self._interval)
            now = self._loop.time()
            for conn in list(self._connections.values()):
                conn.expire(now)
