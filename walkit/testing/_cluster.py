"""SimCluster: real bookies on simulated storage behind a SimNetwork, a memory metadata store,
and clients, all seeded from one number.

::

    async with SimCluster(bookies=4, seed=7) as cluster:
        async with cluster.client("writer") as client:
            lw = await client.create_ledger(3, 2, 2)
            await cluster.history.append("writer", lw, b"w-0")
            await cluster.crash_bookie(0)          # loses what bookie-0 had not synced
            await cluster.restart_bookie(0)
        ...
        cluster.assert_ok()                        # every checker, with the seed on failure

Run it under ``walkit.testing.run`` (or pytest-trio's ``autojump_clock``) so that time is
trio's MockClock: timeouts and delays then cost no real time.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any, final

import trio

from walkit._core.digest import DigestManager
from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.types import BookieId
from walkit._logging import get_logger
from walkit.client import Client
from walkit.errors import DigestMismatchError, InvalidArgumentError, WalkitError
from walkit.metadata import forget_memory_tree, open_metadata_store
from walkit.testing._checkers import CheckResult, assert_ok, check_all
from walkit.testing._history import History
from walkit.testing._network import SimNetwork
from walkit.testing._runner import (
    STALL_STEPS,
    StallGuard,
    deterministic_scheduling,
    replay_hint,
    seed_from_env,
    sim_wall_clock,
)
from walkit_bookie import Bookie, BookieConfig, MemoryStorage

log = get_logger(__name__)

#: Port every simulated bookie listens on (each has its own host name).
BOOKIE_PORT = 3181

_names = itertools.count()


def derive_rng(seed: int, label: str) -> random.Random:
    """An independent generator for one part of a run (stable across processes and Pythons:
    a str seed goes through SHA-512, unlike ``hash``)."""
    return random.Random(f"{seed}:{label}")


@final
class SimBookie:
    """One simulated bookie: its name (network node), address and storage, across restarts."""

    def __init__(self, index: int, name: str, storage: MemoryStorage) -> None:
        self.index = index
        self.name = name
        self.address = BookieId(name, BOOKIE_PORT)
        self.storage = storage
        #: The running incarnation (None while stopped or crashed).
        self.bookie: Bookie | None = None
        self.incarnations = 0
        #: Adds refused by earlier incarnations because they would rewrite a stored entry.
        self.past_refused_rewrites = 0
        self._scope: trio.CancelScope | None = None
        self._stopped = trio.Event()
        self._stopped.set()

    @property
    def running(self) -> bool:
        return self.bookie is not None

    @property
    def refused_rewrites(self) -> int:
        """Adds this bookie refused, over all its incarnations, because they carried other
        bytes for a stored entry: a legitimate writer or recovery never sends those."""
        current = 0 if self.bookie is None else self.bookie.handler.stats.adds_refused_rewrite
        return self.past_refused_rewrites + current

    def __repr__(self) -> str:
        state = "running" if self.running else "down"
        return f"<SimBookie {self.name} {state} incarnations={self.incarnations}>"


@final
class SimCluster:
    """An in-process cluster for deterministic tests of the real client and bookie code.

    ``seed`` (default: ``WALKIT_SIM_SEED``, else random) seeds the network, the bookies, the
    clients' generators and placement, and trio's scheduler (``deterministic``). It is printed
    on entry with the options, and is part of every failure message of :meth:`assert_ok`.

    If simulated time stands still for more than ``stall_steps`` task steps (a livelock), the
    cluster and the body of its ``async with`` are cancelled and :class:`SimulationStalled` is
    raised on exit.
    """

    def __init__(
        self,
        bookies: int = 3,
        *,
        seed: int | None = None,
        network: SimNetwork | None = None,
        sync_latency: float = 0.0005,
        bookie_options: Mapping[str, Any] | None = None,
        client_options: Mapping[str, Any] | None = None,
        deterministic: bool = True,
        announce: bool = True,
        stall_steps: int | None = STALL_STEPS,
    ) -> None:
        if not isinstance(bookies, int) or bookies < 0:
            raise InvalidArgumentError(f"bookies must be an int >= 0, not {bookies!r}")
        self.seed = seed if seed is not None else seed_from_env()
        #: For the test's own random decisions (separate from the system's generators).
        self.rng = derive_rng(self.seed, "test")
        self.network = (
            network if network is not None else SimNetwork(rng=derive_rng(self.seed, "network"))
        )
        self.history = History()
        self.sync_latency = sync_latency
        self.bookie_options = dict(bookie_options or {})
        self.client_options = dict(client_options or {})
        self.metadata_name = f"walkit-sim-{self.seed}-{next(_names)}"
        self.metadata_url = f"memory://{self.metadata_name}"
        self.bookies: list[SimBookie] = []
        self._initial_bookies = bookies
        self._deterministic = deterministic
        self._announce = announce
        self._stack: contextlib.AsyncExitStack | None = None
        self._nursery: trio.Nursery | None = None
        self._clients: dict[str, int] = {}
        self._guard = StallGuard(stall_steps) if stall_steps is not None else None

    # --- description -----------------------------------------------------------------------

    def describe(self) -> str:
        """The seed and options, as printed at start."""
        parts = [f"bookies={self._initial_bookies}", f"sync_latency={self.sync_latency}"]
        if self.bookie_options:
            parts.append(f"bookie_options={self.bookie_options}")
        if self.client_options:
            parts.append(f"client_options={self.client_options}")
        return replay_hint(self.seed, ", ".join(parts))

    # --- lifetime --------------------------------------------------------------------------

    async def __aenter__(self) -> SimCluster:
        if self._stack is not None:
            raise InvalidArgumentError("a SimCluster is entered once")
        if self._announce:
            print(self.describe(), file=sys.stderr)
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            if self._deterministic:
                stack.enter_context(deterministic_scheduling(self.seed))
            stack.callback(forget_memory_tree, self.metadata_name)
            self._nursery = await stack.enter_async_context(trio.open_nursery())
            stack.callback(self._nursery.cancel_scope.cancel)
            if self._guard is not None:
                # A livelock (simulated time standing still) cancels the cluster and its body.
                self._guard.scope = self._nursery.cancel_scope
                trio.lowlevel.add_instrument(self._guard)
                stack.callback(trio.lowlevel.remove_instrument, self._guard)
            self._stack = stack
            for _ in range(self._initial_bookies):
                await self.add_bookie()
        except BaseException:
            self._stack = None
            await stack.__aexit__(*sys.exc_info())
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        stack, self._stack = self._stack, None
        if stack is None:  # pragma: no cover
            return None
        guard = self._guard
        try:
            suppress = await stack.__aexit__(exc_type, exc, tb)
        except BaseException as error:
            if guard is not None and guard.stalled_at is not None:
                raise guard.error(self.failure_context()) from error
            if isinstance(error, BaseExceptionGroup):
                # A bookie failed on its own: that is a bug worth the seed.
                error.add_note(self.describe())
            raise
        if guard is not None and guard.stalled_at is not None:
            raise guard.error(self.failure_context())
        return suppress

    def _check_running(self) -> trio.Nursery:
        if self._nursery is None or self._stack is None:
            raise InvalidArgumentError("use the SimCluster inside `async with`")
        return self._nursery

    # --- bookies ---------------------------------------------------------------------------

    def bookie(self, which: int | str | BookieId) -> SimBookie:
        """A bookie by index, node name or address."""
        for b in self.bookies:
            if which in (b.index, b.name, b.address):
                return b
        raise InvalidArgumentError(f"no simulated bookie {which!r}")

    @property
    def bookie_ids(self) -> list[BookieId]:
        return [b.address for b in self.bookies]

    async def add_bookie(self) -> SimBookie:
        """Start one more bookie (``bookie-<n>``) on fresh storage."""
        self._check_running()
        index = len(self.bookies)
        sim = SimBookie(index, f"bookie-{index}", MemoryStorage(sync_latency=self.sync_latency))
        self.bookies.append(sim)
        await self.start_bookie(index)
        return sim

    async def start_bookie(self, which: int | str | BookieId) -> BookieId:
        """Start a stopped or crashed bookie again on its storage (same address)."""
        nursery = self._check_running()
        sim = self.bookie(which)
        if sim.running:
            raise InvalidArgumentError(f"{sim.name} is already running")
        address: BookieId = await nursery.start(self._run_bookie, sim)
        return address

    restart_bookie = start_bookie

    async def stop_bookie(self, which: int | str | BookieId) -> None:
        """A clean stop: in-flight requests get no answer, synced data stays."""
        sim = self.bookie(which)
        if sim._scope is not None:
            sim._scope.cancel()
        await sim._stopped.wait()

    async def crash_bookie(self, which: int | str | BookieId) -> None:
        """Kill a bookie: its connections are reset and whatever it had not synced is lost."""
        sim = self.bookie(which)
        self.network.note("crash bookie", sim.name)
        self.network.reset(sim.name)
        sim.storage.crash()
        await self.stop_bookie(sim.index)

    def pause_bookie(self, which: int | str | BookieId) -> None:
        """Hold all its traffic (a stopped process) until :meth:`resume_bookie`."""
        self.network.pause(self.bookie(which).name)

    def resume_bookie(self, which: int | str | BookieId) -> None:
        self.network.resume(self.bookie(which).name)

    async def _run_bookie(self, sim: SimBookie, task_status: trio.TaskStatus[BookieId]) -> None:
        sim._stopped = stopped = trio.Event()
        sim.incarnations += 1
        store = await open_metadata_store(self.metadata_url)
        try:
            with trio.CancelScope() as scope:
                sim._scope = scope
                config = BookieConfig(
                    data_dirs=[f"/walkit-sim/{sim.name}"],
                    host=sim.name,
                    port=BOOKIE_PORT,
                    **self.bookie_options,
                )
                bookie = Bookie(
                    config,
                    network=self.network.node(sim.name),
                    storage=sim.storage,
                    metadata=store,
                    rng=derive_rng(self.seed, f"{sim.name}#{sim.incarnations}"),
                )
                sim.bookie = bookie
                await bookie.run(task_status=task_status)
        finally:
            if sim.bookie is not None:
                sim.past_refused_rewrites += sim.bookie.handler.stats.adds_refused_rewrite
            sim.bookie = None
            sim._scope = None
            with trio.CancelScope(shield=True), contextlib.suppress(WalkitError):
                await store.aclose()
            stopped.set()

    # --- network shortcuts -----------------------------------------------------------------

    def node(self, which: int | str | BookieId) -> str:
        """The network node name of a bookie (index or address) or of a client (its name)."""
        if isinstance(which, str) and not any(b.name == which for b in self.bookies):
            return which
        return self.bookie(which).name

    def partition(
        self,
        side_a: int | str | BookieId | Sequence[int | str | BookieId],
        side_b: int | str | BookieId | Sequence[int | str | BookieId],
        *,
        reset: bool = False,
    ) -> None:
        """Partition two sets of nodes (bookie indexes, addresses, or node names)."""
        self.network.partition(self._nodes(side_a), self._nodes(side_b), reset=reset)

    def heal(self) -> None:
        self.network.heal()

    def _nodes(self, side: int | str | BookieId | Sequence[int | str | BookieId]) -> list[str]:
        if isinstance(side, int | str | BookieId):
            return [self.node(side)]
        return [self.node(x) for x in side]

    # --- clients ---------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def client(self, name: str = "client", **options: Any) -> AsyncIterator[Client]:
        """A real :class:`walkit.Client` on the network node ``name``, seeded from the run's seed.

        ``options`` are client options (they override the cluster's ``client_options``). Its
        wall clock is :func:`sim_wall_clock` unless they give another.
        """
        self._check_running()
        n = self._clients.get(name, 0)
        self._clients[name] = n + 1
        merged: dict[str, Any] = {**self.client_options, **options}
        placement_options = dict(merged.pop("placement_options", {}))
        placement_options.setdefault(
            "random_seed", derive_rng(self.seed, f"placement:{name}#{n}").getrandbits(63)
        )
        merged.setdefault("placement", "default")
        merged.setdefault("wall_clock", sim_wall_clock)
        async with Client.connect(
            self.metadata_url,
            network=self.network.node(name),
            rng=derive_rng(self.seed, f"client:{name}#{n}"),
            placement_options=placement_options,
            **merged,
        ) as client:
            yield client

    async def expire_session(self, client: Client) -> None:
        """Expire a client's metadata session (its ephemerals vanish; its watches end)."""
        store: Any = client.metadata_store
        expire = getattr(store, "expire_session", None)
        if expire is None:
            raise InvalidArgumentError(f"{store!r} cannot expire its session")
        self.network.note("expire metadata session", repr(client))
        await expire()

    # --- checking --------------------------------------------------------------------------

    def stored_copies(
        self, metadata: LedgerMetadata, password: bytes = b""
    ) -> dict[BookieId, dict[int, bytes]]:
        """What each bookie of the ledger holds durably: ``{bookie: {entry_id: payload}}``.

        A copy whose digest does not verify is reported as ``b"<corrupt>" + packet`` (so it
        never equals a good copy).
        """
        lid = metadata.ledger_id
        digest = DigestManager(lid, metadata.digest, password)
        copies: dict[BookieId, dict[int, bytes]] = {}
        for address in sorted(metadata.all_bookies()):
            try:
                sim = self.bookie(address)
            except InvalidArgumentError:
                continue
            held: dict[int, bytes] = {}
            for (ledger_id, entry_id), packet in sorted(sim.storage.entries.items()):
                if ledger_id != lid:
                    continue
                try:
                    _, payload = digest.verify(packet, entry_id)
                except DigestMismatchError:
                    payload = b"<corrupt>" + packet
                held[entry_id] = payload
            copies[address] = held
        return copies

    async def read_back(
        self,
        client: Client,
        ledger_id: int,
        *,
        password: bytes = b"",
        recovery: bool = True,
        reader: str = "checker",
    ) -> LedgerMetadata:
        """Open the ledger (with recovery by default), read every entry, and record it all in
        the history as the final read-back: entries, the closed end, the bookies' copies."""
        handle = await client.open_ledger(ledger_id, password=password, recovery=recovery)
        metadata = handle.metadata
        if metadata.is_closed:  # recorded first: they stand even if reading then fails
            self.history.record_ledger_closed(reader, ledger_id, metadata.last_entry_id)
            self.history.record_stored_copies(metadata, self.stored_copies(metadata, password))
        last = handle.last_add_confirmed
        entries = await handle.read(0, last) if last >= 0 else []
        self.history.record_read(
            reader, ledger_id, 0, [(e.entry_id, e.payload) for e in entries], final=True
        )
        return metadata

    def check(self) -> list[CheckResult]:
        """Every checker over this cluster's history."""
        return check_all(self.history)

    def assert_ok(self) -> list[CheckResult]:
        """Run every checker; raise AssertionError with the seed and the fault log if one fails."""
        results = self.check()
        assert_ok(results, self.failure_context())
        return results

    def failure_context(self) -> str:
        faults = self.network.fault_log[-30:]
        lines = [self.describe(), "faults (last 30):"]
        lines += [f"  t={t:.4f} {what} {src} -> {dst}" for t, what, src, dst in faults]
        return "\n".join(lines)
