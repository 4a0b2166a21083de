"""``walkit.sync.LeaderElection``: :class:`walkit.recipes.LeaderElection` for threads."""

from __future__ import annotations

import random
from types import TracebackType
from typing import Any, final

import anyio
import anyio.abc

from walkit.recipes import LeaderElection as AsyncLeaderElection
from walkit.recipes import Role
from walkit.sync._thread import Backend, LoopThread

__all__ = ["LeaderElection"]


@final
class LeaderElection:
    """A candidate in the election at ``path`` of the metadata store at ``url``, driven by an
    event loop thread of its own. ``with LeaderElection(...) as election:`` takes part (it
    returns once the first round is decided) and leaves at the end; the arguments are
    :class:`walkit.recipes.LeaderElection`'s."""

    def __init__(
        self,
        url: str,
        path: str,
        advertise: str,
        *,
        lease_timeout: float = 2.0,
        rng: random.Random | None = None,
        store_options: dict[str, Any] | None = None,
        backend: Backend = "asyncio",
    ) -> None:
        self._thread = LoopThread(backend)
        self._scope: anyio.CancelScope | None = None

        def make() -> AsyncLeaderElection:
            return AsyncLeaderElection(
                url,
                path,
                advertise,
                lease_timeout=lease_timeout,
                rng=rng if rng is not None else random.Random(),
                store_options=store_options,
            )

        try:
            self._election = self._thread.run_sync(make)
        except BaseException:
            self._thread.stop()
            raise

    @property
    def role(self) -> Role:
        return self._election.role

    @property
    def is_leader(self) -> bool:
        return self._election.is_leader

    @property
    def leader(self) -> str | None:
        """What the current leader advertises, or None if unknown."""
        return self._election.leader

    @property
    def generation(self) -> int:
        """Grows by one each time the role or the known leader changes."""
        return self._election.generation

    @property
    def step_downs(self) -> int:
        """How many times this candidate stepped down as leader."""
        return self._election.step_downs

    def start(self) -> None:
        """Take part; returns once the first round is decided (leader or follower)."""

        async def run(*, task_status: anyio.abc.TaskStatus[None]) -> None:
            with anyio.CancelScope() as scope:
                self._scope = scope
                await self._election.run(task_status=task_status)

        async def start() -> None:
            await self._thread.tasks.start(run)

        self._thread.call(start)

    def wait_changed(self, generation: int, *, timeout: float | None = None) -> bool:
        """Wait until :attr:`generation` differs from ``generation``; False on ``timeout``."""

        async def wait() -> bool:
            with anyio.move_on_after(timeout):
                await self._election.wait_changed(generation)
                return True
            return False

        return self._thread.call(wait)

    def confirm(self) -> bool:
        """True if this candidate still held the lease at some instant after the call."""
        return self._thread.call(self._election.confirm)

    def resign(self) -> None:
        """Give the lease up; candidacy starts again with a new session."""
        self._thread.call(self._election.resign)

    def stop(self) -> None:
        """Leave the election (the lease goes at once) and stop the event loop thread."""
        scope = self._scope
        try:
            if scope is not None:
                self._thread.run_sync(scope.cancel)
        finally:
            self._thread.stop()

    def __enter__(self) -> LeaderElection:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
