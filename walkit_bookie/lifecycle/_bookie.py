"""The bookie's lifecycle: start (listen, check the cookie, open the storage, register), keep
(read-only mode, checkpoints, disk checks, garbage collection) and stop (flush and close).

Request handling is the :class:`~walkit_bookie.server.RequestHandler`'s (``Bookie.handler``).
"""

from __future__ import annotations

import functools
import random
import uuid
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Protocol, final

import anyio
import anyio.abc
import attrs
from prometheus_client import CollectorRegistry

from walkit._core.types import BookieId
from walkit.errors import BookieIOError, WalkitError
from walkit.metadata import MetadataStore
from walkit.net import Network, TcpNetwork, TlsNetwork
from walkit.shared import collapse, get_logger
from walkit_bookie._config import BookieConfig
from walkit_bookie.lifecycle._memory import MemoryReturn
from walkit_bookie.lifecycle._registration import Registration
from walkit_bookie.server import BookieCollector, RequestHandler, handle_stream, serve_admin
from walkit_bookie.storage import (
    BookieStorage,
    DiskStorage,
    GarbageCollector,
    GcReport,
    GroupCommit,
    LedgerInfo,
)

log = get_logger(__name__)


class Started(Protocol):
    """What ``run`` reports its bookie id through: the ``task_status`` AnyIO's and trio's
    ``start`` pass alike."""

    def started(self, value: BookieId) -> None: ...


@final
class Bookie:
    """A bookie server: ``await Bookie(config).run()`` serves until cancelled.

    ``run`` reports the bound :class:`~walkit.BookieId` through ``task_status.started`` once the
    storage is recovered and connections are answered; on cancellation it flushes and closes
    its storage. ``network`` defaults to TCP, ``storage`` to :class:`DiskStorage` on the
    configured data dirs. With ``metadata`` the bookie takes its cluster instance id from the
    store, checks its cookie there, registers itself (read-only when it is), registers again
    through a new store (``reopen_metadata()``, default ``open_metadata_store(metadata.url)``)
    when the session is lost, and garbage-collects the ledgers deleted there. With
    ``config.http_port`` set it serves ``/metrics`` (from ``registry``, a fresh
    ``CollectorRegistry`` by default), ``/health``, ``/livez``, ``/readyz`` and ``/admin/gc``
    over HTTP.
    """

    def __init__(
        self,
        config: BookieConfig,
        *,
        network: Network | None = None,
        storage: BookieStorage | None = None,
        metadata: MetadataStore | None = None,
        rng: random.Random | None = None,
        registry: CollectorRegistry | None = None,
        reopen_metadata: Callable[[], Awaitable[MetadataStore]] | None = None,
    ) -> None:
        self.config = config
        self.storage: BookieStorage = storage if storage is not None else DiskStorage(config)
        self._network: Network = network if network is not None else TcpNetwork()
        tls = config.tls_server_context()
        if tls is not None:  # every connection is TLS; a plain client gets TLS_REQUIRED
            self._network = TlsNetwork(self._network, server_context=tls)
        self._metadata = metadata
        self._reopen_metadata = reopen_metadata
        self._rng = rng if rng is not None else random.Random()
        self.bookie_id: BookieId | None = None
        #: Where the HTTP admin endpoint listens (with ``config.http_port`` set), once started.
        self.admin_address: tuple[str, int] | None = None
        self._read_only_reasons: set[str] = set()
        self._mode_changed = anyio.Event()
        self._ready = anyio.Event()
        self._registration: Registration | None = None
        self._started = False
        #: Request handling: its counters (``requests``, ``adds_in_flight``, ``long_polls``,
        #: ``connections``...) are what ``/metrics`` and ``/health`` report.
        self.handler = RequestHandler(
            config,
            self.storage,
            read_only=self._read_only_reasons,
            on_disk_full=functools.partial(self._set_read_only, "disk_full"),
            authenticator=config.authenticator(),
            authorization=config.authorization(),
        )
        #: Garbage collection and compaction (rounds on a schedule, or ``collect_garbage()``).
        self.gc = GarbageCollector(
            config,
            self.storage,
            ledger_ids=self.ledger_ids,
            forget=self.forget_ledgers,
            store=lambda: None if self._registration is None else self._registration.store,
            instance_id=lambda: (
                None if self._registration is None else self._registration.instance_id
            ),
            bookie_id=lambda: self.bookie_id,
        )
        #: Hands memory freed after a burst back to the system (``_memory``).
        handler = self.handler
        self.memory = MemoryReturn(
            held=lambda: (
                handler.stats.unsent_bytes
                + handler.stats.add_bytes_in_flight
                + handler.stats.partial_frame_bytes
            )
        )
        #: The prometheus registry the bookie's metrics are collected into.
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(BookieCollector(self))

    # --- state -------------------------------------------------------------------------------

    @property
    def read_only(self) -> bool:
        return bool(self._read_only_reasons)

    @property
    def read_only_reasons(self) -> list[str]:
        """Why the bookie refuses writes (``disk_full``, ``disk_usage``,
        ``checkpoint_failed``); empty while it is writable."""
        return sorted(self._read_only_reasons)

    @property
    def group_commit(self) -> GroupCommit:
        return self.handler.group_commit

    @property
    def memory_returned_bytes(self) -> int:
        return self.memory.returned_bytes

    @property
    def ledger_count(self) -> int:
        return len(self.handler.ledgers)

    def ledger_ids(self) -> list[int]:
        """The ledgers this bookie holds state for."""
        return list(self.handler.ledgers)

    @property
    def registration(self) -> Registration | None:
        """The metadata session (None without a metadata store)."""
        return self._registration

    def ledger_info(self, ledger_id: int) -> LedgerInfo | None:
        """A copy of what this bookie knows of a ledger (None if nothing)."""
        info = self.handler.ledgers.get(ledger_id)
        return None if info is None else info.copy()

    def _set_read_only(self, reason: str, detail: str = "") -> None:
        if reason not in self._read_only_reasons:
            was = self.read_only
            self._read_only_reasons.add(reason)
            log.warning(
                "bookie_read_only", reason=reason, detail=detail, bookie_id=str(self.bookie_id)
            )
            if not was:
                self._mode_changed.set()

    def _clear_read_only(self, reason: str) -> None:
        if reason in self._read_only_reasons:
            self._read_only_reasons.discard(reason)
            if not self.read_only:
                log.info("bookie_writable", bookie_id=str(self.bookie_id))
                self._mode_changed.set()

    # --- run ---------------------------------------------------------------------------------

    async def run(self, *, task_status: Started = anyio.TASK_STATUS_IGNORED) -> None:
        if self._started:
            raise BookieIOError("a Bookie object runs once; make a new one to restart")
        self._started = True
        try:
            async with anyio.create_task_group() as nursery:
                bookie_id = await self._start(nursery)
                task_status.started(bookie_id)
        except BaseExceptionGroup as group:
            raise collapse(group) from None
        finally:
            with anyio.CancelScope(shield=True):
                await self._shutdown()

    async def _start(self, nursery: anyio.abc.TaskGroup) -> BookieId:
        """Start in the order BookKeeper's bookie does: the cluster's identity, the listening
        socket (the bookie's id is its address), the cookie check, storage (journal replay),
        the background services, the registration that makes it visible, autorecovery."""
        instance_id, known = await self._cluster_instance_id()
        bookie_id = await self._listen(nursery)
        await self._open_storage(bookie_id, instance_id, known)
        self._check_disk()
        await self._start_services(nursery)
        await self._register(nursery, bookie_id)
        if (self.config.autorecovery or self.config.fragment_copies) and self._metadata is not None:
            self._start_autorecovery(nursery, bookie_id)
        self._ready.set()
        log.info(
            "bookie_started",
            bookie_id=str(bookie_id),
            ledgers=self.ledger_count,
            read_only=self.read_only,
            data_dirs=list(self.config.data_dirs),
        )
        return bookie_id

    async def _open_storage(self, bookie_id: BookieId, instance_id: str, known: bool) -> None:
        """Check the data dirs' cookie against the store's, open the storage (replaying the
        journal into the ledgers' state), and record the cookie in the store."""
        if self._registration is not None:
            await self._registration.check_cookie(bookie_id, self.storage.recorded_bookie_id())
        self.handler.ledgers = await self.storage.open(
            bookie_id, instance_id, instance_id_is_known=known
        )
        if self._registration is not None:
            await self._registration.store_cookie(bookie_id, self.config)

    async def _register(self, nursery: anyio.abc.TaskGroup, bookie_id: BookieId) -> None:
        """Register in the metadata store (with the admin port, when there is one), and keep
        the registration in step with the bookie's mode; nothing without a store."""
        if self._registration is None:
            return
        if self.admin_address is not None:
            self._registration.info["http_port"] = self.admin_address[1]
        await nursery.start(self._registration.run, bookie_id, self._mode_source)

    async def _cluster_instance_id(self) -> tuple[str, bool]:
        """The cluster's instance id from the metadata store, and True; without a store, a
        random one, and False."""
        if self._metadata is None:
            return uuid.UUID(int=self._rng.getrandbits(128), version=4).hex, False
        self._registration = Registration(
            self._metadata, self.config, reopen=self._reopen_metadata, rng=self._rng
        )
        return await self._registration.cluster_instance_id(), True

    async def _listen(self, nursery: anyio.abc.TaskGroup) -> BookieId:
        """Listen for clients (on the port this bookie had before, when it was given 0) and
        return the id clients reach it by."""
        config = self.config
        port = config.port
        recorded = self.storage.recorded_bookie_id()
        if port == 0 and recorded is not None:
            port = recorded.port
        ready: Any = self._ready  # (connections wait for it: anything with ``wait()``)
        serve = functools.partial(
            self._network.serve,
            config.host,
            port,
            functools.partial(handle_stream, self.handler, ready),
        )
        try:
            bookie_id: BookieId = await nursery.start(serve)
        except OSError as exc:
            raise BookieIOError(f"cannot listen on {config.host}:{port}: {exc}") from exc
        if config.advertised_address is not None:
            # Listening on a wildcard (or behind NAT): register what clients can reach.
            bookie_id = BookieId(config.advertised_address, bookie_id.port)
        self.bookie_id = self.handler.bookie_id = bookie_id
        return bookie_id

    async def _start_services(self, nursery: anyio.abc.TaskGroup) -> None:
        """The request handler, checkpoints, disk checks, garbage collection, the memory
        watch, and the admin endpoint if it has a port."""
        nursery.start_soon(self.handler.run)
        nursery.start_soon(self._checkpoint_loop)
        nursery.start_soon(self._disk_check_loop)
        nursery.start_soon(self.gc.run)
        nursery.start_soon(self.memory.run)
        config = self.config
        if config.http_port is not None:
            self.admin_address = await nursery.start(
                functools.partial(
                    serve_admin,
                    self,
                    config.http_host or config.host,
                    config.http_port,
                    self.registry,
                    ssl_context=config.admin_server_context(),
                )
            )

    def _start_autorecovery(self, nursery: anyio.abc.TaskGroup, bookie_id: BookieId) -> None:
        """The autorecovery worker embedded in this bookie, with its rate limits and the
        credentials it shows other bookies."""
        from walkit.autorecovery import AutorecoveryOptions, run_bookie_autorecovery
        from walkit.shared import read_token_file
        from walkit_bookie.server._local import LocalCopyStore

        config = self.config
        assert self._metadata is not None
        options = AutorecoveryOptions()  # with the bookie's rate limits, if it has any
        if config.rereplication_entries_per_second is not None:
            entries = config.rereplication_entries_per_second
            options = attrs.evolve(options, entries_per_second=entries)
        if config.rereplication_bytes_per_second is not None:
            rate = config.rereplication_bytes_per_second
            options = attrs.evolve(options, bytes_per_second=rate)
        token_file = config.autorecovery_token_file
        auth = None if token_file is None else read_token_file(token_file)
        if auth is None and config.auth == "token":
            log.warning(
                "autorecovery_without_credentials",
                detail="bookies that authenticate by token refuse this bookie's "
                "autorecovery worker: give --autorecovery-token-file",
            )
        if config.tls_cert is not None and config.tls_ca is None:
            log.warning(
                "autorecovery_tls_without_ca",
                detail="this bookie's autorecovery worker checks the other bookies' "
                "certificates against the system's trust store: give --tls-ca (the CA "
                "that signs them) unless a public CA does",
            )
        nursery.start_soon(
            functools.partial(
                run_bookie_autorecovery,
                self._metadata.url,
                bookie_id,
                lost_bookie_delay=config.lost_bookie_delay,
                options=options,
                local=LocalCopyStore(self.handler, bookie_id),
                background=config.autorecovery,
                fragment_copies=config.fragment_copies,
                tls_files=(config.tls_cert, config.tls_key, config.tls_ca),
                auth=auth,
                registry=self.registry,
            )
        )

    def _mode_source(self) -> tuple[bool, anyio.Event]:
        """(read only now, an event set at the next change) for the registration task."""
        if self._mode_changed.is_set():
            self._mode_changed = anyio.Event()
        return self.read_only, self._mode_changed

    async def _shutdown(self) -> None:
        try:
            await self.storage.aclose()
        except (OSError, WalkitError) as exc:
            log.error("storage_close_failed", error=str(exc))
        if self._registration is not None:
            await self._registration.aclose()
        log.info("bookie_stopped", bookie_id=str(self.bookie_id))

    async def _checkpoint_loop(self) -> None:
        while True:
            with anyio.move_on_after(self.config.checkpoint_interval):
                await self.storage.checkpoint_due()
            try:
                await self.storage.checkpoint()
            except (BookieIOError, OSError) as exc:
                self._set_read_only("checkpoint_failed", str(exc))
            else:
                self._clear_read_only("checkpoint_failed")

    def _check_disk(self) -> None:
        usage = self.storage.disk_usage()
        if usage >= self.config.disk_usage_threshold:
            self._set_read_only("disk_usage", f"{usage:.3f} >= {self.config.disk_usage_threshold}")
        elif usage < self.config.writable_again_below:
            self._clear_read_only("disk_usage")
            self._clear_read_only("disk_full")

    async def _disk_check_loop(self) -> None:
        while True:
            await anyio.sleep(self.config.disk_check_interval)
            self._check_disk()

    async def forget_ledger(self, ledger_id: int) -> None:
        """Remove a ledger's entries from the index and its state (garbage collection's hook)."""
        await self.forget_ledgers([ledger_id])

    async def forget_ledgers(self, ledger_ids: Iterable[int]) -> None:
        """Forget several ledgers (one checkpoint for all). Their entry logs are reclaimed by
        the next garbage collection round or compaction."""
        ids = list(ledger_ids)
        for ledger_id in ids:
            self.handler.ledgers.pop(ledger_id, None)
        await self.storage.delete_ledgers(ids)

    async def collect_garbage(self, compaction: str | None = None) -> GcReport:
        """Run a garbage collection round now: forget ledgers deleted in the metadata store
        (with a store), remove entry logs with nothing live, and with ``compaction``
        ("minor" or "major") compact entry logs below that threshold."""
        return await self.gc.collect(compaction)
