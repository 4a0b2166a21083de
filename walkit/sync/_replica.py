"""``walkit.sync.Replica``: :class:`walkit.statemachine.Replica` for threaded programs.

The machine's ``apply``, ``snapshot`` and ``restore`` run in the client's event loop thread
(one at a time, in log order, as under the async API); the blocking calls wait for them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any, Generic, final

from walkit._core.log_position import LogPosition
from walkit.log._values import V
from walkit.statemachine import Leader as AsyncLeader
from walkit.statemachine import Replica as AsyncReplica
from walkit.statemachine import StateMachine
from walkit.sync._log import Log, LogWriter
from walkit.sync._thread import LoopThread

__all__ = ["Leader", "Replica"]


@final
class Leader(Generic[V]):
    """:class:`walkit.statemachine.Leader`, blocking (from :meth:`Replica.lead`)."""

    def __init__(self, thread: LoopThread, leader: AsyncLeader[V], writer: LogWriter[V]) -> None:
        self._thread = thread
        self._leader = leader
        self._writer = writer

    @property
    def writer(self) -> LogWriter[V]:
        return self._writer

    def submit(
        self, command: V, *, producer_id: str | None = None, sequence: int | None = None
    ) -> Any:
        """:meth:`walkit.statemachine.Leader.submit`, blocking: what ``apply`` returned."""

        async def submit() -> Any:
            return await self._leader.submit(command, producer_id=producer_id, sequence=sequence)

        return self._thread.call(submit)

    def submit_batch(self, commands: Sequence[V], *, flush: bool = False) -> list[Any]:
        """:meth:`walkit.statemachine.Leader.submit_batch`, blocking."""

        async def submit() -> list[Any]:
            return await self._leader.submit_batch(commands, flush=flush)

        return self._thread.call(submit)

    def snapshot(self) -> None:
        """Save a snapshot of the current state now (and truncate, if the replica does)."""
        self._thread.call(self._leader.snapshot)


@final
class Replica(Generic[V]):
    """:class:`walkit.statemachine.Replica` on a :class:`walkit.sync.Log`, blocking; the
    arguments are the async one's."""

    def __init__(
        self,
        log: Log[V],
        machine: StateMachine[V],
        *,
        snapshot_every: int | None = 10_000,
        snapshot_ratio: float | None = None,
        truncate: bool = True,
    ) -> None:
        self._thread = log.client.thread
        self.log = log

        def make() -> AsyncReplica[V]:
            return AsyncReplica(
                log.async_log,
                machine,
                snapshot_every=snapshot_every,
                snapshot_ratio=snapshot_ratio,
                truncate=truncate,
            )

        self._replica = self._thread.run_sync(make)
        self.machine = machine

    def __repr__(self) -> str:
        return f"walkit.sync.{self._replica!r}"

    @property
    def async_replica(self) -> AsyncReplica[V]:
        return self._replica

    @property
    def applied_position(self) -> LogPosition:
        """The position of the last record applied (EARLIEST before any)."""
        return self._replica.applied_position

    @property
    def applied_count(self) -> int:
        return self._replica.applied_count

    @property
    def next_position(self) -> LogPosition:
        """Where the next record to apply is looked for."""
        return self._replica.next_position

    def wait_applied(self, position: LogPosition) -> None:
        """Return once this replica has applied the record at ``position`` (or a later one)."""
        self._thread.call(self._replica.wait_applied, position)

    def recover(self) -> None:
        """Restore the latest snapshot, then apply the records readable now."""
        self._thread.call(self._replica.recover)

    def follow(self) -> None:
        """Apply new records as they are appended; blocks until interrupted
        (KeyboardInterrupt) or the client closes (a standby thread)."""
        self._thread.call(self._replica.follow)

    @contextlib.contextmanager
    def lead(self) -> Iterator[Leader[V]]:
        """Take the log over (fencing the previous leader), catch up, then yield a
        :class:`Leader`; leaving the block closes the writer."""
        with self._thread.context(self._replica.lead()) as leader:
            writer = LogWriter(self._thread, leader.writer)
            try:
                yield Leader(self._thread, leader, writer)
            finally:
                writer._queue.stop()
