"""``walkit.Client``: the entry point of the ledger API.

::

    async with walkit.Client.connect("sqlite:///tmp/m.db") as client:
        lw = await client.create_ledger(ensemble_size=3, write_quorum=2, ack_quorum=2)
        await lw.append(b"x")

A client owns background tasks (bookie connections, the bookie-list watch, writers' explicit
LAC and ensemble changes), so it only exists inside ``async with``: leaving the block closes
the connections and the metadata session, and fails whatever is still pending with
ClientClosedError. ``await Client.connect(...)`` is refused with a message saying so.
"""

from __future__ import annotations

import contextlib
import functools
import random
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any, Unpack, final

import anyio

from walkit._core.auth import AuthProvider
from walkit._core.digest import DigestType
from walkit._core.ledger_metadata import (
    PASSWORD_SALT_SIZE,
    LedgerMetadata,
    password_hash,
    validate_quorums,
)
from walkit._core.options import options_mapping
from walkit._core.types import BookieId
from walkit._groups import collapse
from walkit._logging import get_logger
from walkit._loop import EventLoop, current_loop
from walkit.errors import (
    AuthenticationError,
    ClientClosedError,
    ConfigurationError,
    InvalidArgumentError,
    NotEnoughBookiesError,
    TLSError,
    WalkitError,
)
from walkit.ledger._client_services import ClientServices
from walkit.ledger._context import ClientContext, check_password
from walkit.ledger._metrics import client_metrics
from walkit.ledger._options import ClientOptions, ClientOptionsDict
from walkit.ledger._reader import LedgerReader
from walkit.ledger._reads import read_lac, unreachable
from walkit.ledger._recovery import recover_ledger
from walkit.ledger._writer import LedgerWriter
from walkit.metadata import (
    LedgerManager,
    MetadataStore,
    WatchEvent,
    WatchEventKind,
    ensure_cluster,
    list_bookies,
    open_metadata_store,
    watch_bookies,
)
from walkit.net import AuthNetwork, Network, TcpNetwork, TLSConfig, TlsNetwork
from walkit.net._pool import ConnectionPool
from walkit.placement import (
    EnsemblePlacementPolicy,
    PlacementResources,
    apply_cluster_change,
    load_policy,
)

log = get_logger(__name__)

__all__ = ["Client"]

#: Bookies that failed within this many seconds are avoided for new ledgers when possible.
_AVOID_RECENTLY_FAILED = 30.0


def _check_ledger_id(ledger_id: object) -> int:
    if not isinstance(ledger_id, int) or isinstance(ledger_id, bool) or ledger_id < 0:
        raise InvalidArgumentError(f"ledger id must be an int >= 0, not {ledger_id!r}")
    return ledger_id


def _check_password(password: object) -> bytes:
    if not isinstance(password, bytes | bytearray):
        raise InvalidArgumentError(f"password must be bytes, not {type(password).__name__}")
    return bytes(password)


def _check_custom(custom: object) -> dict[str, bytes]:
    if not isinstance(custom, Mapping):
        raise InvalidArgumentError("custom_metadata must be a mapping of str to bytes")
    out: dict[str, bytes] = {}
    for key, value in custom.items():
        if not isinstance(key, str) or not isinstance(value, bytes | bytearray):
            raise InvalidArgumentError(
                f"custom_metadata must map str to bytes, got {key!r}: {type(value).__name__}"
            )
        out[key] = bytes(value)
    return out


def _unreachable_error(wanted: int, dead: Mapping[BookieId, WalkitError]) -> WalkitError:
    """Why no ensemble could be formed: a TLSError first (a configuration problem, not an
    outage), else NotEnoughBookiesError naming each unreachable bookie and its error."""
    failures = sorted(dead.items(), key=lambda item: str(item[0]))
    for _bookie, error in failures:
        if isinstance(error, TLSError):
            return TLSError(f"cannot create a ledger: {error}")
        if isinstance(error, AuthenticationError):
            return AuthenticationError(f"cannot create a ledger: {error}")
    reasons = "; ".join(f"{bookie}: {error}" for bookie, error in failures)
    return NotEnoughBookiesError(f"cannot find {wanted} reachable bookies ({reasons})")


def _load_policy(
    spec: str | EnsemblePlacementPolicy,
    options: ClientOptions,
    rng: random.Random,
    loop: EventLoop,
) -> EnsemblePlacementPolicy:
    policy = load_policy(spec)
    policy.initialize(
        dict(options.placement_options),
        PlacementResources(clock=loop.time, random=rng),
    )
    return policy


@final
class _Connector:
    """What :meth:`Client.connect` returns: an async context manager (only)."""

    def __init__(self, cm: contextlib.AbstractAsyncContextManager[Client]) -> None:
        self._cm = cm

    async def __aenter__(self) -> Client:
        return await self._cm.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        return await self._cm.__aexit__(exc_type, exc, tb)

    def __await__(self) -> Any:
        raise InvalidArgumentError(
            "Client.connect() is an async context manager: use "
            "`async with walkit.Client.connect(url) as client:` (the client runs background "
            "tasks that need a scope)"
        )


@final
class Client:
    """A connection to a walkit cluster: metadata store + bookies. See :meth:`connect`."""

    def __init__(self, context: ClientContext, url: str) -> None:
        self._context = context
        #: What the log, autorecovery, Spark and the lake get of this client (built once).
        self._services = ClientServices(context, self.delete_ledger)
        self.url = url
        self._closed = False

    def __repr__(self) -> str:
        return f"Client({self.url!r})"

    @staticmethod
    def connect(
        url: str,
        *,
        placement: str | EnsemblePlacementPolicy = "default",
        network: Network | None = None,
        rng: random.Random | None = None,
        tls: TLSConfig | None = None,
        auth: AuthProvider | None = None,
        options: ClientOptions | None = None,
        **kwargs: Unpack[ClientOptionsDict],
    ) -> _Connector:
        """Connect to the cluster whose metadata is at ``url`` (``zk://``, ``sqlite:///``,
        ``memory://``); use as ``async with Client.connect(url) as client:``.

        ``placement``: "default", "rackaware", "regionaware", "pkg.mod:Class", or a policy
        object. ``network``: the transport (TCP by default; a ``walkit.testing.SimNetwork`` in
        simulations). ``rng``: the random generator for everything random in the client.
        ``tls``: a :class:`walkit.TLSConfig` to talk TLS to the bookies (every bookie of the
        cluster must then serve TLS; see ``docs/security.md``).
        ``auth``: credentials sent first on each connection to a bookie, for bookies that
        authenticate clients (``walkit.TokenAuth(token=...)``; see ``docs/security.md``).
        The client's options (:class:`walkit.ClientOptions`: timeouts, ensemble change mode,
        ...) come as keywords (``add_timeout=5``; type checkers know their names and types),
        as an ``options=ClientOptions(...)`` object, or both (the keywords win). Raises
        ConfigurationError (bad URL, unknown or bad option, unreadable TLS files),
        MetadataStoreError (store unreachable).
        """
        given = options_mapping(ClientOptions, options, kwargs)
        return _Connector(_open_client(url, placement, network, rng, given, tls, auth))

    # --- internals -----------------------------------------------------------------------
    # ``_context`` (a ClientContext: connection pool, ledger manager, placement, options) is
    # private: the ledger handles share it, and walkit's other layers get it through
    # ``client_services`` (a ClientServices); applications use neither.

    @property
    def options(self) -> ClientOptions:
        return self._context.options

    @property
    def metadata_store(self) -> MetadataStore:
        return self._context.store

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError("the client is closed")
        self._context.loop.check("this walkit.Client")

    # --- ledgers ---------------------------------------------------------------------------

    async def create_ledger(
        self,
        ensemble_size: int = 3,
        write_quorum: int = 2,
        ack_quorum: int = 2,
        *,
        digest: str | DigestType = "crc32c",
        password: bytes = b"",
        custom_metadata: Mapping[str, bytes] | None = None,
        store_password: bool = True,
    ) -> LedgerWriter:
        """Create a ledger and return its writer.

        ``store_password``: keep the password in the ledger's metadata, where autorecovery and
        ``walkit recover`` find it, so the ledger is rereplicated by itself when a bookie is lost (as
        BookKeeper does). False keeps only its salted hash there: the ledger then waits for an
        operator to give the password (see docs/autorecovery.md).

        Raises InvalidArgumentError (E >= Qw >= Qa >= 1 violated, bad digest or password),
        ConfigurationError (``digest=None``), NotEnoughBookiesError (fewer than E suitable writable bookies).
        """
        self._check_open()
        validate_quorums(ensemble_size, write_quorum, ack_quorum)
        if digest is None:
            raise ConfigurationError(
                "digest=None is not a digest type: use 'crc32c' (the default), 'mac', or "
                "'none' to store entries without a digest"
            )
        digest_type = DigestType.parse(digest)
        pw = _check_password(password)
        if not isinstance(store_password, bool):
            raise InvalidArgumentError(f"store_password must be a bool, not {store_password!r}")
        custom = _check_custom({} if custom_metadata is None else custom_metadata)
        context = self._context
        ledger_id = await context.retry_metadata(context.ledgers.new_ledger_id)
        # A bookie can stay registered for a while after it died (until its session expires):
        # check that the chosen ones answer, and choose again without those that do not.
        dead: dict[BookieId, WalkitError] = {}
        for _attempt in range(3):
            try:
                ensemble = self._new_ensemble(
                    ensemble_size, write_quorum, ack_quorum, custom, set(dead)
                )
            except NotEnoughBookiesError as exc:
                if not dead:
                    raise
                raise _unreachable_error(ensemble_size, dead) from exc
            silent = await unreachable(context, ensemble, ledger_id)
            if not silent:
                break
            log.info("ledger_create_skips_bookies", bookies=sorted(str(b) for b in silent))
            dead.update(silent)
        else:
            raise _unreachable_error(ensemble_size, dead)
        clock = context.options.wall_clock
        md = LedgerMetadata(
            ledger_id=ledger_id,
            ensemble_size=ensemble_size,
            write_quorum=write_quorum,
            ack_quorum=ack_quorum,
            fragments=((0, tuple(ensemble)),),
            digest=digest_type,
            password_sha256=password_hash(pw, context.rng.randbytes(PASSWORD_SALT_SIZE)),
            custom_metadata=custom,
            ctime_ms=int(clock() * 1000) if clock is not None else 0,
            password=pw if store_password else None,
        )
        version = await context.retry_metadata(functools.partial(context.ledgers.create, md))
        writer = LedgerWriter(context, md, version, pw)
        try:
            await context.task_group.start(writer.start_background)
        except RuntimeError:  # the client's task group is closing
            raise ClientClosedError("the client is closed") from None
        log.debug("ledger_created", ledger_id=ledger_id, ensemble=[str(b) for b in ensemble])
        return writer

    def _new_ensemble(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        custom: dict[str, bytes],
        dead: set[BookieId],
    ) -> list[BookieId]:
        context = self._context
        now = context.loop.time()
        recently_failed = frozenset(
            b for b, t in context.pool.failure_history.items() if now - t < _AVOID_RECENTLY_FAILED
        )
        placement = context.placement
        if recently_failed - dead:
            try:
                return list(
                    placement.new_ensemble(
                        ensemble_size, write_quorum, ack_quorum, recently_failed | dead, custom
                    )
                )
            except NotEnoughBookiesError:
                pass  # better a bookie that failed a while ago than no ledger
        return list(
            placement.new_ensemble(ensemble_size, write_quorum, ack_quorum, frozenset(dead), custom)
        )

    async def open_ledger(
        self, ledger_id: int, *, password: bytes = b"", recovery: bool = False
    ) -> LedgerReader:
        """Open a ledger for reading.

        Without recovery the writer is left alone and the reader sees entries up to the LAC.
        With ``recovery=True`` the ledger is fenced (its writer can no longer add), its end is
        recovered and it is closed; the reader then sees every entry.

        Raises NoSuchLedgerError, UnauthorizedAccessError (wrong password).
        """
        self._check_open()
        ledger_id = _check_ledger_id(ledger_id)
        pw = _check_password(password)
        context = self._context
        md, _version = await context.read_metadata(ledger_id)
        check_password(md, pw)
        if recovery:
            md = await _recover(context, ledger_id, pw)
            return LedgerReader(context, md, pw, md.last_entry_id)
        lac = md.last_entry_id if md.is_closed else await read_lac(context, md)
        return LedgerReader(context, md, pw, lac)

    async def delete_ledger(self, ledger_id: int, *, password: bytes = b"") -> None:
        """Delete a ledger's metadata (bookies reclaim its entries later).

        ``password`` must be the ledger's (checked against the hash in its metadata), as for
        opening it; ledgers created without a password (``b""``) are deleted without one.
        Raises NoSuchLedgerError, UnauthorizedAccessError (wrong password).
        """
        self._check_open()
        ledger_id = _check_ledger_id(ledger_id)
        pw = _check_password(password)
        md, _version = await self._context.read_metadata(ledger_id)
        check_password(md, pw)
        await self._context.ledgers.delete(ledger_id)

    async def list_ledgers(self) -> list[int]:
        """Every ledger id, sorted."""
        self._check_open()
        return await self._context.ledgers.list_ids()

    async def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        """A ledger's metadata (``.ensembles`` is ``{first_entry: [BookieId, ...]}``)."""
        self._check_open()
        md, _version = await self._context.read_metadata(_check_ledger_id(ledger_id))
        return md


def client_services(client: Client) -> ClientServices:
    """The client's internals for walkit's layers above the ledger API (the log, autorecovery,
    Spark, the lake): the one declared way to them. Not for applications."""
    return client._services


async def _recover(context: ClientContext, ledger_id: int, password: bytes) -> LedgerMetadata:
    return await recover_ledger(context, ledger_id, password)


# --- running -------------------------------------------------------------------------------


async def _apply_bookies(store: MetadataStore, policy: EnsemblePlacementPolicy) -> None:
    found = await list_bookies(store)
    # Resolves new bookies' locations off the event loop's thread when that may block.
    left = await apply_cluster_change(
        policy, set(found.writable.values()), set(found.readonly.values())
    )
    log.debug(
        "bookies_changed",
        writable=sorted(str(b) for b in found.writable),
        readonly=sorted(str(b) for b in found.readonly),
        left=sorted(str(b) for b in left),
    )


async def _follow_bookies(
    store: MetadataStore, policy: EnsemblePlacementPolicy, events: AsyncIterator[WatchEvent]
) -> None:
    """Keep the placement policy's view of the bookies current (never raises)."""
    try:
        async for event in events:
            if event.kind is WatchEventKind.SESSION_EXPIRED:
                log.warning("metadata_session_expired", url=store.url)
            try:
                await _apply_bookies(store, policy)
            except WalkitError as exc:
                log.warning("bookie_list_refresh_failed", error=str(exc))
    except WalkitError as exc:
        log.warning("bookie_watch_ended", error=str(exc))
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True):
                await aclose()


@contextlib.asynccontextmanager
async def _open_client(
    url: str,
    placement: str | EnsemblePlacementPolicy,
    network: Network | None,
    rng: random.Random | None,
    options: Mapping[str, Any],
    tls: TLSConfig | None = None,
    auth: AuthProvider | None = None,
) -> AsyncIterator[Client]:
    opts = ClientOptions.from_kwargs(options)
    if rng is not None and not isinstance(rng, random.Random):
        raise InvalidArgumentError(f"rng must be a random.Random, not {type(rng).__name__}")
    if tls is not None and not isinstance(tls, TLSConfig):
        raise InvalidArgumentError(f"tls must be a walkit.TLSConfig, not {type(tls).__name__}")
    if network is None:
        network = TcpNetwork()
    if tls is not None:
        network = TlsNetwork(network, client_context=tls.client_context())
    if auth is not None:
        network = AuthNetwork(network, auth)
    rng = rng if rng is not None else random.Random()
    loop = current_loop()
    metrics = client_metrics(opts.metrics_registry)
    policy = _load_policy(placement, opts, rng, loop)
    store = await open_metadata_store(url, **opts.metadata_options)
    body_error: BaseException | None = None
    try:
        await ensure_cluster(store)
        events = watch_bookies(store)
        await _apply_bookies(store, policy)
        pool = ConnectionPool(
            network,
            loop=loop,
            connect_timeout=opts.connect_timeout,
            timeout_check_interval=opts.timeout_check_interval,
            max_frame_size=opts.max_frame_size,
        )
        try:
            async with anyio.create_task_group() as tasks:
                await tasks.start(pool.run)
                tasks.start_soon(_follow_bookies, store, policy, events)
                context = ClientContext(
                    store=store,
                    ledgers=LedgerManager(store),
                    pool=pool,
                    placement=policy,
                    options=opts,
                    rng=rng,
                    loop=loop,
                    task_group=tasks,
                    metrics=metrics,
                )
                client = Client(context, url)
                try:
                    yield client
                except BaseException as exc:
                    # Re-raised below, outside the task group, so it is not wrapped in a group.
                    body_error = exc
                finally:
                    client._closed = True
                    tasks.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # Only cancellations (an enclosing scope was cancelled while the body failed): the
            # body's error, re-raised below, must not be replaced by a Cancelled that the
            # enclosing scope would swallow.
            cancelled = anyio.get_cancelled_exc_class()
            if body_error is None or group.split(cancelled)[1] is not None:
                raise collapse(group) from None
    finally:
        with anyio.CancelScope(shield=True):
            try:
                await store.aclose()
            except WalkitError as exc:
                log.warning("metadata_close_failed", error=str(exc))
        policy.close()
    if body_error is not None:
        raise body_error
