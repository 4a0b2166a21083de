"""``walkit.sync.Client`` and its ledger handles: the async ones, driven from threads."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, Unpack, final

import walkit
from walkit._core.auth import AuthProvider
from walkit._core.digest import DigestType
from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.types import Entry
from walkit.ledger import ClientOptions
from walkit.ledger._options import ClientOptionsDict
from walkit.net import TLSConfig
from walkit.placement import EnsemblePlacementPolicy
from walkit.sync._thread import Backend, LoopThread

__all__ = ["Client", "LedgerReader", "LedgerWriter"]


@final
class Client:
    """A connection to a walkit cluster for threaded programs (see :meth:`connect`).

    Every method blocks its thread until done and may be called from many threads at once.
    """

    def __init__(self, thread: LoopThread, client: walkit.Client, exit_stack: Any) -> None:
        self._thread = thread
        self._client = client
        self._exit = exit_stack
        self.url = client.url

    def __repr__(self) -> str:
        return f"walkit.sync.Client({self.url!r})"

    @staticmethod
    def connect(
        url: str,
        *,
        placement: str | EnsemblePlacementPolicy = "default",
        tls: TLSConfig | None = None,
        auth: AuthProvider | None = None,
        options: ClientOptions | None = None,
        backend: Backend = "asyncio",
        **kwargs: Unpack[ClientOptionsDict],
    ) -> Client:
        """Connect to the cluster whose metadata is at ``url``; returns a connected client, to
        use as ``with walkit.sync.Client.connect(url) as client:`` (or close it).

        The arguments are :meth:`walkit.Client.connect`'s (but the simulation's ``network``
        and ``rng``). ``backend``: the event loop in the client's thread, "asyncio"
        (default), "uvloop" (installed separately) or "trio".
        """
        thread = LoopThread(backend)
        try:
            cm = thread.context(
                walkit.Client.connect(
                    url, placement=placement, tls=tls, auth=auth, options=options, **kwargs
                )
            )
            client = cm.__enter__()
        except BaseException:
            thread.stop()
            raise
        return Client(thread, client, cm)

    @property
    def async_client(self) -> walkit.Client:
        """The async client underneath (for code running in its event loop thread)."""
        return self._client

    @property
    def thread(self) -> LoopThread:
        return self._thread

    @property
    def options(self) -> walkit.ClientOptions:
        return self._client.options

    def close(self) -> None:
        """Close the connections and the metadata session, and stop the event loop thread
        (idempotent)."""
        cm, self._exit = self._exit, None
        try:
            if cm is not None:
                with contextlib.suppress(walkit.ClientClosedError):
                    cm.__exit__(None, None, None)
        finally:
            self._thread.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # --- ledgers ---------------------------------------------------------------------------

    def create_ledger(
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
        """:meth:`walkit.Client.create_ledger`, blocking."""

        async def create() -> walkit.LedgerWriter:
            return await self._client.create_ledger(
                ensemble_size,
                write_quorum,
                ack_quorum,
                digest=digest,
                password=password,
                custom_metadata=custom_metadata,
                store_password=store_password,
            )

        return LedgerWriter(self._thread, self._thread.call(create))

    def open_ledger(
        self, ledger_id: int, *, password: bytes = b"", recovery: bool = False
    ) -> LedgerReader:
        """:meth:`walkit.Client.open_ledger`, blocking."""

        async def open_() -> walkit.LedgerReader:
            return await self._client.open_ledger(ledger_id, password=password, recovery=recovery)

        return LedgerReader(self._thread, self._thread.call(open_))

    def delete_ledger(self, ledger_id: int, *, password: bytes = b"") -> None:
        async def delete() -> None:
            await self._client.delete_ledger(ledger_id, password=password)

        self._thread.call(delete)

    def list_ledgers(self) -> list[int]:
        return self._thread.call(self._client.list_ledgers)

    def ledger_metadata(self, ledger_id: int) -> LedgerMetadata:
        return self._thread.call(self._client.ledger_metadata, ledger_id)


@final
class LedgerWriter:
    """:class:`walkit.LedgerWriter`, blocking (a context manager that closes the ledger)."""

    def __init__(self, thread: LoopThread, writer: walkit.LedgerWriter) -> None:
        self._thread = thread
        self._writer = writer
        self.id = writer.id

    def __repr__(self) -> str:
        return f"walkit.sync.{self._writer!r}"

    @property
    def last_add_confirmed(self) -> int:
        return self._writer.last_add_confirmed

    @property
    def metadata(self) -> LedgerMetadata:
        return self._writer.metadata

    @property
    def is_closed(self) -> bool:
        return self._writer.is_closed

    def append(self, payload: bytes) -> int:
        """Append one entry; its id once the ack quorum has it (appends from many threads
        pipeline, ids in the order the loop receives them)."""
        return self._thread.call(self._writer.append, payload)

    def append_batch(self, payloads: Sequence[bytes]) -> list[int]:
        return self._thread.call(self._writer.append_batch, payloads)

    def read(self, first: int, last: int) -> list[Entry]:
        return self._thread.call(self._writer.read, first, last)

    @property
    def pending_count(self) -> int:
        """Entries sent and not acknowledged yet."""
        return self._writer.pending_count

    @property
    def has_room(self) -> bool:
        """Whether another entry fits under ``max_pending_adds`` now."""
        return self._writer.has_room

    def check_acknowledged(self, entry_id: int) -> None:
        """Raise the writer's error unless ``entry_id`` is acknowledged."""
        self._writer.check_acknowledged(entry_id)

    @property
    def length(self) -> int:
        """Total payload bytes of the acknowledged entries."""
        return self._writer.length

    def close(
        self,
        *,
        custom_metadata: Mapping[str, bytes] | Callable[[], Mapping[str, bytes]] | None = None,
    ) -> None:
        """:meth:`walkit.LedgerWriter.close`, blocking."""

        async def close() -> None:
            await self._writer.close(custom_metadata=custom_metadata)

        self._thread.call(close)

    def __enter__(self) -> LedgerWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._thread.call(self._writer.__aexit__, exc_type, exc, tb)


@final
class LedgerReader:
    """:class:`walkit.LedgerReader`, blocking."""

    def __init__(self, thread: LoopThread, reader: walkit.LedgerReader) -> None:
        self._thread = thread
        self._reader = reader
        self.id = reader.id

    def __repr__(self) -> str:
        return f"walkit.sync.{self._reader!r}"

    @property
    def last_add_confirmed(self) -> int:
        return self._reader.last_add_confirmed

    @property
    def is_closed(self) -> bool:
        return self._reader.is_closed

    @property
    def metadata(self) -> LedgerMetadata:
        return self._reader.metadata

    def read(self, first: int, last: int) -> list[Entry]:
        return self._thread.call(self._reader.read, first, last)

    def close(self) -> None:
        """:meth:`walkit.LedgerReader.aclose`, blocking."""
        self._thread.call(self._reader.aclose)

    def __enter__(self) -> LedgerReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def read_last_add_confirmed(self) -> int:
        return self._thread.call(self._reader.read_last_add_confirmed)

    def wait_for_entry(self, entry_id: int, *, timeout: float = 10.0) -> Entry | None:
        """The entry once it exists (long poll), or None after ``timeout`` seconds."""

        async def wait() -> Entry | None:
            return await self._reader.wait_for_entry(entry_id, timeout=timeout)

        return self._thread.call(wait)
