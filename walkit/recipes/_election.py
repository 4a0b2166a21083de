"""``LeaderElection``: one leader among candidates, held as an ephemeral node (a lease).

::

    election = LeaderElection(url, "/services/kv/leader", advertise="127.0.0.1:8001",
                              lease_timeout=2.0, rng=random.Random())
    async with anyio.create_task_group() as tasks:  # or a trio nursery
        await tasks.start(election.run)            # returns once the first round is decided
        while True:
            seen = election.generation
            if election.is_leader:
                ...                                # lead; before a linearizable read:
                ok = await election.confirm()      # True: still the holder, checked just now
            await election.wait_changed(seen)

The lease is a metadata session of its own (opened with ``session_timeout=lease_timeout``):
the node vanishes about ``lease_timeout`` after its holder dies or stops renewing, and only
then can another candidate take it. A leader that cannot renew (the store unreachable) for
``lease_timeout`` steps down by itself. The decisions are in :class:`LeaseState`.

It runs under trio and asyncio alike; a candidate belongs to the event loop its ``run`` runs
in, and using it from another thread or loop raises WrongEventLoopError.
"""

from __future__ import annotations

import random
from typing import Any, final

import anyio
import anyio.lowlevel
from anyio.abc import TaskStatus

from walkit._logging import get_logger
from walkit._loop import EventLoop, current_loop
from walkit.errors import (
    ClientClosedError,
    ConfigurationError,
    InvalidArgumentError,
    MetadataStoreError,
    NodeExistsError,
    NoSuchNodeError,
    SessionExpiredError,
    WalkitError,
)
from walkit.metadata import MetadataStore, WatchEventKind, open_metadata_store
from walkit.metadata._paths import check_path
from walkit.recipes._lease_state import Action, Claim, LeaseState, Role

log = get_logger(__name__)

__all__ = ["LeaderElection"]


@final
class LeaderElection:
    """A candidate in the election at ``path`` of the metadata store at ``url`` (see module).

    ``advertise``: what the others see of this candidate while it leads (its address, say).
    ``lease_timeout``: the session timeout of the lease (seconds); a dead leader is replaced
    after about this long. ``rng``: makes this candidacy's token. ``store_options``: more
    options for ``open_metadata_store`` (``poll_interval`` for sqlite, say).
    """

    def __init__(
        self,
        url: str,
        path: str,
        advertise: str,
        *,
        lease_timeout: float = 2.0,
        rng: random.Random,
        store_options: dict[str, Any] | None = None,
    ) -> None:
        if (
            isinstance(lease_timeout, bool)
            or not isinstance(lease_timeout, int | float)
            or lease_timeout <= 0
        ):
            raise ConfigurationError(f"lease_timeout must be > 0 seconds, not {lease_timeout!r}")
        try:
            self.path = check_path(path)
        except InvalidArgumentError as exc:
            raise ConfigurationError(f"bad election path {path!r}: {exc}") from None
        self.url = url
        self.advertise = advertise
        self.lease_timeout = float(lease_timeout)
        self._rng = rng
        self._store_options = dict(store_options or {})
        self._state = LeaseState(self._new_claim(), rejoin_delay=min(0.5, self.lease_timeout / 2))
        self._store: MetadataStore | None = None
        #: Grows by one each time the role or the known leader changes.
        self.generation = 0
        # Events are made when first waited for: a candidate may be made outside an event
        # loop, and belongs to the loop that runs it (``_loop``, set by ``run``).
        self._loop: EventLoop | None = None
        self._changed: anyio.Event | None = None
        self._published: tuple[Role, Claim | None] = (Role.CANDIDATE, None)
        self._confirmed_at = -float("inf")
        # The driver's wait for the node to change, cancelled to make it re-read at once.
        self._waiting: anyio.CancelScope | None = None
        # confirm(): rounds of one read each, shared by the callers that wait for them.
        self._rounds_started = 0
        self._rounds_done = 0
        self._round_ok = False
        self._round_end: anyio.Event | None = None
        self._checking = False

    # --- what the application reads ---------------------------------------------------------

    @property
    def role(self) -> Role:
        return self._published[0]

    @property
    def is_leader(self) -> bool:
        return self._published[0] is Role.LEADER

    @property
    def leader(self) -> str | None:
        """What the current leader advertises (ours when leading), or None if unknown."""
        holder = self._published[1]
        return None if holder is None else holder.advertise

    @property
    def step_downs(self) -> int:
        return self._state.step_downs

    async def wait_changed(self, generation: int) -> None:
        """Return once :attr:`generation` differs from ``generation``."""
        self._check_loop()
        while self.generation == generation:
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    async def confirm(self) -> bool:
        """True if this candidate still held the lease at some instant after the call began
        (one store read, shared by concurrent callers). A linearizable read checks this."""
        self._check_loop()
        wanted = self._rounds_started + 1
        while self._rounds_done < wanted:
            if self._checking:
                if self._round_end is None:
                    self._round_end = anyio.Event()
                await self._round_end.wait()
                continue
            self._checking = True
            self._rounds_started += 1
            number = self._rounds_started
            try:
                ok = await self._check_once()
            finally:
                self._checking = False
                self._rounds_done = number
                end, self._round_end = self._round_end, None
                if end is not None:
                    end.set()
            self._round_ok = ok
        return self._round_ok and self.is_leader

    async def resign(self) -> None:
        """Give the lease up (end the session); candidacy starts again with a new session."""
        self._check_loop()
        store = self._store
        if store is not None:
            await store.aclose()
        self._wake()
        # Say so at once (the driver learns it from the closed session a moment later).
        self._publish_view((Role.CANDIDATE, None))

    # --- the driver ---------------------------------------------------------------------------

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Take part until cancelled; ``task_status.started()`` once the first round is
        decided (leader or follower). Start it with a trio nursery's or an AnyIO task group's
        ``start``."""
        self._loop = current_loop()
        started = False
        state = self._state
        try:
            while True:
                try:
                    store = await open_metadata_store(
                        self.url, session_timeout=self.lease_timeout, **self._store_options
                    )
                except MetadataStoreError as exc:
                    state.store_failed()
                    log.warning("election_store_unreachable", path=self.path, error=str(exc))
                    await anyio.sleep(state.backoff)
                    continue
                self._store = store
                action = state.start(self._new_claim())
                self._publish()
                try:
                    started = await self._session(store, action, started, task_status)
                finally:
                    self._store = None
                    with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                        try:
                            await store.aclose()
                        except WalkitError:
                            pass
                self._publish()
                await anyio.sleep(state.backoff)  # after losing the lead: the rejoin delay
        finally:
            state.stop()
            self._publish()

    async def _session(
        self,
        store: MetadataStore,
        action: Action,
        started: bool,
        task_status: TaskStatus[None],
    ) -> bool:
        """One session: returns when it is lost (expired, closed, or not renewed in time),
        having told the state so."""
        state = self._state
        path = self.path
        events = store.watch(path)
        try:
            while True:
                try:
                    if action is Action.CREATE:
                        try:
                            await store.create(path, state.claim.encode(), ephemeral=True)
                            self._confirmed_at = anyio.current_time()
                            action = state.created()
                            log.info("election_won", path=path, advertise=self.advertise)
                        except NodeExistsError:
                            action = state.exists()
                    elif action is Action.READ:
                        try:
                            value = (await store.get(path)).value
                        except NoSuchNodeError:
                            value = None
                        action = state.read(value)
                        if state.role is Role.LEADER:
                            self._confirmed_at = anyio.current_time()
                    elif action is Action.BACKOFF:
                        await anyio.sleep(state.backoff)
                        action = Action.READ
                    elif action is Action.WAIT:
                        self._publish()
                        if not started:
                            task_status.started()
                            started = True
                        action = await self._wait(events)
                    else:  # NEW_SESSION: session_lost() said so (NOTHING: never here)
                        return started
                except (SessionExpiredError, ClientClosedError):
                    state.session_lost()
                    return started
                except MetadataStoreError as exc:
                    log.warning("election_store_failed", path=path, error=str(exc))
                    action = state.store_failed()
                if (
                    state.role is Role.LEADER
                    and anyio.current_time() - self._confirmed_at > self.lease_timeout
                ):
                    log.warning("election_lease_not_renewed", path=path)
                    state.session_lost()
                    return started
                self._publish()
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                with anyio.CancelScope(shield=True):
                    await aclose()

    async def _wait(self, events: Any) -> Action:
        """Wait for the node to change; a leader also re-reads it every third of the lease."""
        state = self._state
        event = None
        timeout = self.lease_timeout / 3 if state.role is Role.LEADER else float("inf")
        with anyio.move_on_after(timeout) as self._waiting:
            try:
                event = await events.__anext__()
            except StopAsyncIteration:
                return state.session_lost()
            finally:
                self._waiting = None
        if event is None:
            return Action.READ
        if event.kind is WatchEventKind.SESSION_EXPIRED:
            return state.session_lost()
        if event.kind is WatchEventKind.DELETED:
            return state.deleted()
        return state.changed()

    async def _check_once(self) -> bool:
        store = self._store
        if store is None or not self.is_leader:
            await anyio.lowlevel.checkpoint()
            return False
        try:
            value = (await store.get(self.path)).value
        except WalkitError:
            self._wake()  # let the driver find out what happened
            return False
        try:
            mine = Claim.decode(value).token == self._state.claim.token
        except WalkitError:
            mine = False
        if mine:
            self._confirmed_at = anyio.current_time()
        else:
            self._wake()
        return mine

    def _wake(self) -> None:
        """Make the driver re-read the node now, if it is waiting for a change."""
        if self._waiting is not None:
            self._waiting.cancel()

    def _check_loop(self) -> None:
        if self._loop is not None:
            self._loop.check(f"LeaderElection at {self.path}")

    def _new_claim(self) -> Claim:
        return Claim(token=f"{self._rng.getrandbits(64):016x}", advertise=self.advertise)

    def _publish(self) -> None:
        self._publish_view((self._state.role, self._state.leader))

    def _publish_view(self, now: tuple[Role, Claim | None]) -> None:
        if now == self._published:
            return
        self._published = now
        self.generation += 1
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()
        log.info(
            "election_changed",
            path=self.path,
            role=now[0].value,
            leader=None if now[1] is None else now[1].advertise,
        )
