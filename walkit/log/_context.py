"""What the log's helpers need of a log handle: the :class:`LogContext` protocol.

``walkit.Log`` (``_log``) builds writers, readers, snapshots, retention and staged ledgers;
those modules need the handle back (its name, options, client, and a few internals, among
them the client's declared :class:`~walkit.ledger.ClientServices`), but
naming ``Log`` itself would make them import ``_log`` and the import graph circular. They name
this protocol instead, which ``Log`` satisfies structurally, so the arrows run one way:
``_log`` -> helpers -> ``_context`` (see ``docs/architecture.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Protocol

if TYPE_CHECKING:
    from walkit._core.log_metadata import LedgerConfig, LogLedger, LogMetadata
    from walkit.client import Client
    from walkit.ledger import ClientServices, LedgerCleanup, LedgerWriter
    from walkit.log._options import LogOptions
    from walkit.log._schema import LogSchema
    from walkit.log._values import RecordValues

__all__ = ["KIND_KEY", "LogContext"]

#: A log ledger's custom-metadata tag saying what it holds (``data``, ``snapshot``, ``staged``).
KIND_KEY: Final = "walkit.kind"


class LogContext(Protocol):
    """A log handle as its writer, readers, snapshots, retention and staging see it."""

    @property
    def name(self) -> str: ...

    @property
    def options(self) -> LogOptions: ...

    @property
    def config(self) -> LedgerConfig: ...

    @property
    def client(self) -> Client: ...

    @property
    def _services(self) -> ClientServices:
        """The client's internals (pool, metadata store, ledger deletion): see
        :class:`~walkit.ledger.ClientServices`."""
        ...

    @property
    def _ledger_cleanup(self) -> LedgerCleanup:
        """Deletes the log's ledgers that left its metadata, or never made it in."""
        ...

    @property
    def _typed(self) -> LogSchema[Any] | None: ...

    async def metadata(self) -> LogMetadata: ...

    def _record_values(self, md: LogMetadata, ledger: LogLedger) -> RecordValues | None: ...

    def _check_open(self) -> None: ...

    async def _create_ledger(self, kind: str) -> LedgerWriter: ...
