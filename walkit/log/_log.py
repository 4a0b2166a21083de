"""``walkit.Log``: a named, replicated, single-writer log made of a chain of ledgers.

::

    async with walkit.Log.open(client, "orders") as log:
        async with log.writer() as w:
            pos = await w.append(b"record")
        async for rec in log.reader(start=walkit.LogPosition.EARLIEST):
            ...

A Log handle holds no background tasks: it is the client, the name and the options. Writers
(:meth:`Log.writer`), readers (:meth:`Log.reader`) and snapshots all read the log's node again
when they need it, and change it only by compare-and-set.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterable, Generator, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Unpack, final

import anyio
import attrs

from walkit._core.digest import DigestType
from walkit._core.log_metadata import LedgerConfig, LogLedger, LogMetadata, check_log_name
from walkit._core.log_position import LogPosition, position
from walkit._core.record_set import FORMAT_KEY, FORMAT_RECORD_SETS
from walkit._core.retention import RetentionLimits
from walkit._logging import get_logger
from walkit.client import client_services
from walkit.errors import (
    ClientClosedError,
    ConfigurationError,
    InvalidArgumentError,
)
from walkit.ledger import ClientServices, LedgerWriter
from walkit.log._consumer import LogConsumer
from walkit.log._consumers import delete_consumer
from walkit.log._context import KIND_KEY
from walkit.log._delete import delete_log
from walkit.log._gc import Orphan, collect_orphans
from walkit.log._lag import ConsumerInfo, consumer_infos
from walkit.log._link import (
    LinkResult,
    StagedLedger,
    discard_staged,
    link_ledgers,
    stage_ledger,
    staged_ledgers,
)
from walkit.log._options import LogOptions, LogOptionsDict
from walkit.log._passwords import LOG_KEY
from walkit.log._position_at import position_at
from walkit.log._reader import LogReader
from walkit.log._retention import RetentionResult, apply_retention, limits_of
from walkit.log._snapshot import Snapshot, save_snapshot
from walkit.log._store import create_or_read, read_log
from walkit.log._values import RecordValues, V, check_schema_extra, raw_values
from walkit.log._writer import LogWriter, take_over

if TYPE_CHECKING:
    from walkit.client import Client
    from walkit.log._schema import LogSchema

log = get_logger(__name__)

__all__ = ["Log"]


@final
class _Opener(Generic[V]):
    """What :meth:`Log.open` returns: ``async with`` it, or ``await`` it."""

    def __init__(
        self,
        client: Client,
        name: str,
        create: bool,
        config: dict[str, Any],
        options: LogOptions,
        explicit_password: bool,
        schema: type[V] | None,
    ) -> None:
        self._args = (client, name, create, config, options, explicit_password, schema)
        self._log: Log[V] | None = None

    async def _open(self) -> Log[V]:
        return await Log._open(*self._args)

    def __await__(self) -> Generator[Any, None, Log[V]]:
        return self._open().__await__()

    async def __aenter__(self) -> Log[V]:
        self._log = await self._open()
        return self._log

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._log is not None:
            await self._log.aclose()


@final
class _WriterOpener(Generic[V]):
    """What :meth:`Log.writer` returns: ``async with`` it (closes the writer at the end), or
    ``await`` it (then close it yourself)."""

    def __init__(self, owner: Log[V]) -> None:
        self._owner = owner
        self._writer: LogWriter[V] | None = None

    def __await__(self) -> Generator[Any, None, LogWriter[V]]:
        return take_over(self._owner).__await__()

    async def __aenter__(self) -> LogWriter[V]:
        self._writer = await take_over(self._owner)
        return self._writer

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._writer is not None:
            await self._writer.__aexit__(exc_type, exc, tb)


@final
class Log(Generic[V]):
    """A handle on one log (from :meth:`Log.open`); ``Log[T]`` for a log opened with
    ``schema=T`` (its records' values are ``T``), ``Log`` (``Log[bytes]``) without."""

    def __init__(
        self,
        client: Client,
        name: str,
        options: LogOptions,
        config: LedgerConfig,
        typed: LogSchema[V] | None = None,
    ) -> None:
        self._client = client
        #: The client's internals this handle and its helpers use (pool, store, deletion).
        self._services: ClientServices = client_services(client)
        self.name = name
        self.options = options
        #: Deletes this log's ledgers that left its metadata, or never made it in.
        self._ledger_cleanup = self._services.ledger_cleanup(name, options.password)
        self.config = config
        self._closed = False
        #: The handle's schema (None: its values are the payloads).
        self._typed = typed
        #: How an untyped handle's records of a typed log's ledgers give their value.
        self._raw_values: dict[int, RecordValues] = {}

    def __repr__(self) -> str:
        return f"Log({self.name!r})"

    @staticmethod
    def open(
        client: Client,
        name: str,
        *,
        create: bool = True,
        ensemble_size: int | None = None,
        write_quorum: int | None = None,
        ack_quorum: int | None = None,
        digest: str | DigestType | None = None,
        store_password: bool | None = None,
        options: LogOptions | None = None,
        schema: type[V] | None = None,
        **kwargs: Unpack[LogOptionsDict],
    ) -> _Opener[V]:
        """Open the log ``name`` (creating it unless ``create=False``); use as
        ``async with Log.open(client, name) as log:`` or ``log = await Log.open(...)``.

        ``schema``: a dataclass, ``msgspec.Struct`` or pydantic model class: the log is typed
        (the ``schema`` extra). Its writers append ``T`` values and register ``T``'s schema as
        a new version of the log's schema if it is one (checked under the option
        ``schema_compatibility``); its readers' records have ``value``, a ``T`` (see
        ``docs/log.md``, "Typed records"). Opening checks ``T`` against the log's versions
        already: IncompatibleSchemaError, or SchemaError for a type that cannot be a schema.

        ``ensemble_size``/``write_quorum``/``ack_quorum``/``digest`` say how the log's ledgers
        are made; they are fixed when the log is created (defaults 3/2/2/crc32c), and giving
        other values for an existing log raises ConfigurationError. So is ``store_password``
        (default True): whether the log's ledgers keep their password in their metadata, so
        that autorecovery rereplicates them by itself; False needs a ``password`` of the log's own
        (a generated one is kept in the log's metadata anyway). The handle's options
        (:class:`walkit.LogOptions`: roll thresholds, password, snapshots kept, ...) come as
        keywords (``roll_entries=1000``; type checkers know their names and types), as an
        ``options=LogOptions(...)`` object, or both (the keywords win).

        Raises InvalidArgumentError (bad name), ConfigurationError (bad option),
        NoSuchLogError (``create=False`` and no such log), InvalidMetadataError (the log's
        node is malformed).
        """
        check_log_name(name)
        opts = LogOptions.from_kwargs(kwargs, base=options)
        config: dict[str, Any] = {}
        for key, value in (
            ("ensemble_size", ensemble_size),
            ("write_quorum", write_quorum),
            ("ack_quorum", ack_quorum),
        ):
            if value is not None:
                config[key] = value
        if digest is not None:
            config["digest"] = DigestType.parse(digest)
        explicit_password = "password" in kwargs or opts.password != LogOptions().password
        if store_password is not None:
            if not isinstance(store_password, bool):
                raise ConfigurationError(
                    f"log option store_password must be a bool, not {store_password!r}"
                )
            if not store_password and not explicit_password:
                raise ConfigurationError(
                    f"log {name}: store_password=False needs the log's own password "
                    "(password=...): a log without one keeps a generated password in its "
                    "metadata, where autorecovery finds it anyway"
                )
            config["store_password"] = store_password
        if schema is not None:
            check_schema_extra()
        return _Opener(client, name, create, config, opts, explicit_password, schema)

    @classmethod
    async def _open(
        cls,
        client: Client,
        name: str,
        create: bool,
        config: dict[str, Any],
        options: LogOptions,
        explicit_password: bool,
        schema: type[V] | None = None,
    ) -> Log[V]:
        context = client_services(client).context
        typed = None
        if schema is not None:
            from walkit.log._schema import LogSchema

            typed = LogSchema(name, schema, options.schema_compatibility)
        if create:
            try:
                wanted = LedgerConfig(**config)
            except InvalidArgumentError as exc:
                raise ConfigurationError(f"log {name}: {exc}") from None
            if not explicit_password:
                # A password nobody chose: random, kept in the log's metadata (see LedgerConfig).
                secret = context.rng.getrandbits(256).to_bytes(32, "big").hex()
                wanted = attrs.evolve(wanted, password_hex=secret)
            clock = context.options.wall_clock
            now_ms = int(clock() * 1000) if clock else 0
            fresh = LogMetadata(name=name, config=wanted, ctime_ms=now_ms)
            if typed is not None:  # (a new typed log has its schema from the start)
                fresh, _number = typed.registered(fresh, now_ms)
            md, _version, _created = await create_or_read(context, fresh)
        else:
            md, _version = await context.retry_metadata(lambda: read_log(context.store, name))
        for key, value in config.items():
            if getattr(md.config, key) != value:
                raise ConfigurationError(
                    f"log {name} exists with {key}={getattr(md.config, key)!r}, not {value!r}"
                )
        if not explicit_password:
            options = attrs.evolve(options, password=md.config.password)
        if options.retain_age is not None and context.options.wall_clock is None:
            raise ConfigurationError(
                f"log {name}: retain_age needs records' timestamps, and this client stamps "
                "none (it was connected with wall_clock=None)"
            )
        if typed is not None:
            typed.check(md)
        return cls(client, name, options, md.config, typed)

    # --- handles ---------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        return self._client

    @property
    def schema(self) -> type[V] | None:
        """The type of the handle's values (``schema=`` of :meth:`open`; None: bytes)."""
        return None if self._typed is None else self._typed.type

    def writer(self) -> _WriterOpener[V]:
        """Take the log over for writing: fence and recover its last two ledgers (the previous
        writer gets WriterFencedError from then on), start a new ledger, and list it last with
        a compare-and-set. Use as ``async with log.writer() as w:``.

        A typed handle registers its schema in that compare-and-set, checked under
        ``schema_compatibility`` (IncompatibleSchemaError before anything is fenced, when the
        log's versions already say so); an untyped one is refused on a typed log."""
        self._check_open()
        return _WriterOpener(self)

    def reader(
        self,
        start: LogPosition | str = LogPosition.EARLIEST,
        *,
        end: LogPosition | str | None = None,
        follow: bool = True,
        skip_truncated: bool = True,
    ) -> LogReader[V]:
        """Records from ``start`` (inclusive; EARLIEST, LATEST, or a position) up to ``end``
        (exclusive, if given). With ``follow`` (default) the reader waits for new records when
        it reaches the end; without, iteration stops there. Records before the truncation
        point are skipped, or raise LogTruncatedError with ``skip_truncated=False``."""
        self._check_open()
        reader: LogReader[V] = LogReader(
            self,
            position(start),
            None if end is None else position(end),
            follow=follow,
            skip_truncated=skip_truncated,
        )
        metrics = self._services.context.metrics
        if metrics is not None:
            metrics.track_reader(self.name, reader)
        return reader

    # --- consumers (walkit.log._consumer, _consumers, _lag) ------------------------------------

    def consumer(
        self, name: str, *, start: LogPosition | str = LogPosition.EARLIEST, follow: bool = True
    ) -> LogConsumer[V]:
        """The durable consumer ``name``: a reader of the records after its committed
        position, whose ``commit(position)`` is kept in the metadata store, and for which
        retention keeps what it has not committed (see ``docs/log.md``). ``start`` (EARLIEST,
        LATEST or a position) is where a consumer of that name that does not exist yet starts;
        it is created at its first use (or ``await consumer.register()``)."""
        self._check_open()
        return LogConsumer(self, name, position(start), follow=follow)

    async def consumers(self) -> list[ConsumerInfo]:
        """Every consumer of the log with its position and lag (records, bytes, entries)."""
        self._check_open()
        return await consumer_infos(self)

    async def delete_consumer(self, name: str) -> None:
        """Delete consumer ``name``: retention no longer keeps records for it (its readers
        read on; their commits raise NoSuchConsumerError). Raises NoSuchConsumerError."""
        self._check_open()
        await delete_consumer(self._services.context, self.name, name)

    async def position_at(self, timestamp: int) -> LogPosition:
        """The position of the first record whose timestamp is ``timestamp`` or later (ms
        since the epoch), found by bisecting the ledgers and then one ledger's entries; the
        log's end (where the next record will go) when no record is that late. A reader
        started there (``log.reader(start=...)``) reads from that record on. Records without a
        timestamp count as older than any time (see ``docs/log.md``)."""
        self._check_open()
        return await position_at(self, timestamp)

    # --- metadata --------------------------------------------------------------------------

    async def metadata(self) -> LogMetadata:
        """The log's metadata as stored now (ledgers, truncation point, snapshots)."""
        self._check_open()
        md, _version = await self._services.context.retry_metadata(
            lambda: read_log(self._services.context.store, self.name)
        )
        return md

    # --- snapshots -------------------------------------------------------------------------

    async def save_snapshot(
        self, pos: LogPosition | str, data: bytes | AsyncIterable[bytes]
    ) -> Snapshot:
        """Store a snapshot of the state after every record up to ``pos`` (inclusive): the
        bytes go to a ledger of their own (closed), and the log's metadata records it. ``data``
        is bytes or an async iterable of chunks."""
        self._check_open()
        return await save_snapshot(self, position(pos), data)

    async def latest_snapshot(self) -> Snapshot | None:
        """The snapshot with the highest position, or None."""
        md = await self.metadata()
        record = md.latest_snapshot
        return None if record is None else Snapshot.from_record(self, record)

    async def snapshots(self) -> list[Snapshot]:
        """Every kept snapshot, oldest position first."""
        md = await self.metadata()
        return [Snapshot.from_record(self, record) for record in md.snapshots]

    # --- bulk appends (walkit.log._link) ----------------------------------------------------

    async def stage_ledger(self, job: str, part: int, *, record_sets: bool = False) -> LedgerWriter:
        """A ledger for the records of task ``part`` of the bulk job ``job``: append to it,
        close it, and let the job's committer :meth:`link_ledgers` it. Invisible until then.
        ``record_sets``: append ``encode_record_set`` envelopes (several records per entry),
        else one record per entry."""
        return await stage_ledger(self, job, part, record_sets=record_sets)

    async def link_ledgers(
        self,
        ledger_ids: Sequence[int],
        *,
        job: str | None = None,
        sink: tuple[str, int] | None = None,
        expected_last_entries: Sequence[int] | None = None,
        record_counts: Sequence[int] | None = None,
        schema_version: int | None = None,
    ) -> LinkResult:
        """Fence the current writer and list the staged ledgers last, in this order, in one
        compare-and-set (with ``sink=(query_id, batch_id)``: exactly once per batch). On a
        typed log the records are the handle's values (its schema is registered as a writer's
        is), or those of the log's ``schema_version``. See
        :func:`walkit.log._link.link_ledgers`."""
        return await link_ledgers(
            self,
            ledger_ids,
            job=job,
            sink=sink,
            expected_last_entries=expected_last_entries,
            record_counts=record_counts,
            schema_version=schema_version,
        )

    async def staged_ledgers(self, job: str | None = None) -> list[StagedLedger]:
        """Ledgers staged for this log and not linked (jobs under way, or orphans)."""
        return await staged_ledgers(self, job)

    async def discard_staged(
        self, job: str | None = None, *, created_before_ms: int | None = None
    ) -> list[int]:
        """Delete staged, unlinked ledgers: those of ``job``, or every job's created before
        ``created_before_ms`` (wall-clock ms). Returns the deleted ids."""
        return await discard_staged(self, job, created_before_ms=created_before_ms)

    # --- retention, deletion, orphans (walkit.log._retention, _delete, _gc) -----------------

    async def apply_retention(
        self,
        *,
        retain_records: int | None = None,
        retain_bytes: int | None = None,
        retain_age: float | None = None,
        dry_run: bool = False,
    ) -> RetentionResult:
        """Truncate the log at its retention point now (whole ledgers only) and delete the
        ledgers behind it. The limits default to the handle's ``retain_*`` options when none
        is given. The writer does this by itself after each roll and after its takeover."""
        self._check_open()
        given = (retain_records, retain_bytes, retain_age)
        if all(v is None for v in given):
            limits = limits_of(self)
        else:
            try:
                limits = RetentionLimits(records=retain_records, size=retain_bytes, age=retain_age)
            except InvalidArgumentError as exc:
                raise ConfigurationError(str(exc)) from None
        if limits.age is not None and self._services.context.options.wall_clock is None:
            raise ConfigurationError(
                "retain_age needs records' timestamps, and this client stamps none "
                "(it was connected with wall_clock=None)"
            )
        return await apply_retention(self, limits, dry_run=dry_run)

    # --- the lake (walkit.lake) --------------------------------------------------------------

    async def offload(self) -> int:
        """Offload every closed ledger of the log to its lake (``offload_to``) now, whatever
        ``offload_after`` says: Parquet files committed to the log's Iceberg table, then
        recorded in the log's metadata; delete the bookies' copies offloaded
        ``offload_deletion_lag`` seconds ago; clean up after crashed offloads. Returns how
        many ledgers this call offloaded. Raises ConfigurationError without ``offload_to``.
        See ``docs/lake.md``."""
        self._check_open()
        from walkit.log._offload import offload

        return await offload(self)

    @staticmethod
    async def delete(
        client: Client,
        name: str,
        *,
        password: bytes | None = None,
        offload_catalog: dict[str, str] | None = None,
    ) -> list[int]:
        """Delete the log ``name``, its ledgers and its snapshots; returns the deleted ledger
        ids. Its readers and writers get NoSuchLogError from then on. ``password``: the
        ledgers' password if the log was created with one (default: the stored one). Its
        offloaded ledgers leave the lake with their table (``offload_catalog``: the lake's
        catalog properties, needed for an s3:// lake). Raises NoSuchLogError if there is no
        such log.

        Log operations live on ``Log`` and ledger operations on the client, as DistributedLog's
        namespace sits above BookKeeper's client: ``Log.open``/``Log.delete`` pair as
        ``client.open_ledger``/``client.delete_ledger`` do, and the client knows no logs."""
        return await delete_log(client, name, password=password, offload_catalog=offload_catalog)

    @staticmethod
    async def collect_orphans(
        client: Client,
        name: str | None = None,
        *,
        grace: float = 3600.0,
        dry_run: bool = False,
        password: bytes | None = None,
    ) -> list[Orphan]:
        """Delete the ledgers tagged with log ``name`` (None: any log) that the log does not
        list and that were created over ``grace`` seconds ago (``dry_run``: only list them).
        Needs the wall clock (refused for a client connected with ``wall_clock=None``). See :mod:`walkit.log._gc`."""
        return await collect_orphans(client, name, grace=grace, dry_run=dry_run, password=password)

    # --- internals -------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Forget the handle (writers and readers made from it keep working); what leaving
        ``async with Log.open(...)`` does. Idempotent."""
        self._closed = True
        await anyio.lowlevel.checkpoint()

    def close(self) -> None:
        """Deprecated: ``await log.aclose()`` (every async handle closes with ``aclose``)."""
        warnings.warn(
            "Log.close() is deprecated: use `await log.aclose()` or `async with Log.open(...)`",
            DeprecationWarning,
            stacklevel=2,
        )
        self._closed = True

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosedError(f"the handle on log {self.name} is closed")

    async def _create_ledger(self, kind: str) -> LedgerWriter:
        cfg = self.config
        custom = {LOG_KEY: self.name.encode(), KIND_KEY: kind.encode()}
        if kind == "data":
            custom[FORMAT_KEY] = FORMAT_RECORD_SETS
        return await self._client.create_ledger(
            cfg.ensemble_size,
            cfg.write_quorum,
            cfg.ack_quorum,
            digest=cfg.digest,
            password=self.options.password,
            custom_metadata=custom,
            store_password=cfg.store_password,
        )

    def _record_values(self, md: LogMetadata, ledger: LogLedger) -> RecordValues | None:
        """How the records of ``ledger`` give their value to this handle's readers (None:
        the payload, and no schema version)."""
        typed = self._typed
        if typed is not None:
            return typed.values(md, ledger.schema)
        if ledger.schema == 0:
            return None
        return raw_values(self.name, ledger.schema, self._raw_values)
