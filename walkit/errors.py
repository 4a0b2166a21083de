"""The one error hierarchy of walkit.

Every error a public call raises is a :class:`WalkitError`. Errors that mirror a BookKeeper
status code carry that code (``code``) so the bookie can put it on the wire and the client can
turn it back into the same class. ``retryable`` says whether trying the same call again may
succeed without anything else changing first.

Five bases say what a caller can do about an error, and are what programs catch (as with
httpx's ``TransportError``/``HTTPStatusError``); ``docs/ledgers.md``, "Errors", has the tree:

- :class:`RetryLaterError`: the same call may succeed later, nothing else changing first.
- :class:`OwnershipLostError`: another process fenced this one, or its session ended.
- :class:`UsageError`: a bad argument, configuration or use; it fails the same way until fixed.
- :class:`DataError`: stored or received data is not what it must be.
- :class:`NotFoundError`: the ledger, entry, log, node or consumer does not exist.

``retryable`` is each class's own, and stays the one word for "try again": a
:class:`RetryLaterError` is retryable except when it is also an :class:`OwnershipLostError` or
a :class:`UsageError` (``TLSError``, ``AuthenticationError``, ``MetadataAccessError``,
``LakeAccessError``, ``SessionExpiredError``: they keep the transport or store base a program
may already catch), so an ``except`` chain names those two first. Outside
:class:`RetryLaterError` only :class:`DigestMismatchError` is retryable (another replica may
hold a good copy).

As in h11, protocol errors are split by who is at fault: :class:`LocalProtocolError` is a bug or
misuse on our side; :class:`RemoteProtocolError` is a peer that sent something we cannot accept.
"""

from __future__ import annotations

import functools
from typing import ClassVar, Protocol


class WalkitError(Exception):
    """Root of every error walkit raises."""

    code: ClassVar[int] = -1
    retryable: ClassVar[bool] = False


# --- the bases programs catch ----------------------------------------------------------------


class RetryLaterError(WalkitError):
    """Trying the same call again later may succeed with nothing else changing first: a bookie
    or the metadata store is slow, busy or unreachable, a race was lost, a lake is down.
    ``retryable`` is True except for the subclasses that are also an
    :class:`OwnershipLostError` or a :class:`UsageError` (see the module's docstring)."""

    retryable = True


class OwnershipLostError(WalkitError):
    """This process no longer owns what it was writing: another process fenced the ledger or
    took over the log, or its metadata session (and the ephemeral nodes and locks it held)
    expired. An append that got it *may* be written; reopen (take over again) to go on."""


class UsageError(WalkitError):
    """A bad argument, configuration or use (a closed client, the wrong event loop, refused
    credentials): the call fails the same way until the program or its configuration is
    fixed."""


class DataError(WalkitError):
    """Data stored or received is not what it must be: a digest that does not verify, a corrupt
    entry or lake file, metadata that does not parse, a record its schema cannot read, an
    entry a bookie holds with other bytes."""


class NotFoundError(WalkitError):
    """The thing asked for does not exist: a ledger, an entry, a log, a metadata node, a
    consumer."""


# --- protocol and usage --------------------------------------------------------------------


class ProtocolError(WalkitError):
    """A frame or message that cannot be decoded or is not allowed here."""


class LocalProtocolError(ProtocolError):
    """We were asked to encode or do something the protocol does not allow."""


class RemoteProtocolError(ProtocolError):
    """A peer sent bytes we cannot accept (malformed, truncated, oversized, unknown version)."""


class BadRequestError(RemoteProtocolError):
    """The bookie could not understand our request (status BAD_REQUEST)."""

    code = 7


class FrameTooLargeError(RemoteProtocolError):
    """A frame announced a length above the configured maximum."""


class InvalidArgumentError(UsageError, ValueError):
    """A caller passed an argument that can never work (for example E < Qw)."""


class ConfigurationError(UsageError):
    """A URL, option, or configuration value is malformed or unsupported."""


class InvalidMetadataError(DataError):
    """Stored metadata could not be parsed or violates the protocol's rules."""


# --- BookKeeper-style codes (the wire's status codes are these ``code`` values) --------------


class NoSuchEntryError(NotFoundError):
    """The entry does not exist (on that bookie, or past the LAC)."""

    code = 1


class NoSuchLedgerError(NotFoundError):
    """The ledger does not exist (on that bookie, or in the metadata store)."""

    code = 2


class LedgerFencedError(OwnershipLostError):
    """The ledger was fenced by a recovering reader; an add that got this *may* be written."""

    code = 3


class UnauthorizedAccessError(UsageError):
    """The password (master key) does not match the ledger's."""

    code = 4


class TooManyRequestsError(RetryLaterError):
    """The bookie is at its in-flight limit."""

    code = 5
    retryable = True


class BookieReadOnlyError(WalkitError):
    """The bookie is in read-only mode (for example its disk is full)."""

    code = 6


class BookieIOError(RetryLaterError):
    """The bookie failed to read or write its storage."""

    code = 8
    retryable = True


class UnsupportedVersionError(RemoteProtocolError):
    """The peer speaks a protocol version we do not."""

    code = 9


class LedgerClosedError(WalkitError):
    """The ledger is closed; nothing more can be appended."""

    code = 10


class DigestMismatchError(DataError):
    """An entry's digest did not verify (corrupt data or a wrong password)."""

    code = 11
    retryable = True


class NotEnoughBookiesError(RetryLaterError):
    """Placement cannot find enough (suitable) bookies."""

    code = 12
    retryable = True


class BookieTimeoutError(RetryLaterError):
    """A bookie did not answer in time."""

    code = 13
    retryable = True


class BookieUnavailableError(RetryLaterError):
    """A bookie could not be reached (connection refused, reset, or closed)."""

    code = 14
    retryable = True


class MetadataVersionError(RetryLaterError):
    """A compare-and-set lost: the metadata changed since it was read."""

    code = 15
    retryable = True


class MetadataStoreError(RetryLaterError):
    """The metadata store failed or could not be reached."""

    code = 16
    retryable = True


class MetadataAccessError(MetadataStoreError, UsageError):
    """The metadata store refused this client: a ZooKeeper ACL on walkit's nodes that its
    credentials do not satisfy, credentials the server rejected, or a TLS handshake with
    ZooKeeper that failed. A configuration problem (see ``docs/security.md``, "Metadata
    store"): trying again does not help."""

    retryable = False


class NodeExistsError(WalkitError):
    """A metadata node to be created already exists."""

    code = 17


class NoSuchNodeError(NotFoundError):
    """A metadata node does not exist."""

    code = 18


class LedgerRecoveryError(RetryLaterError):
    """Recovery could not decide the ledger's end this time; running it again may succeed."""

    code = 19
    retryable = True


class LedgerInRecoveryError(OwnershipLostError):
    """The ledger is being recovered by a reader; the writer may not close it."""

    code = 20


class WriterFencedError(LedgerFencedError):
    """This writer was fenced: another process took over the ledger or log.

    Appends that fail with this error *may* have been written; appends that succeeded before it
    are never lost.
    """

    code = 21


class CookieError(WalkitError):
    """A bookie's data directory does not match its cookie (wiped, foreign, or half missing)."""

    code = 22


class EntryExistsError(DataError):
    """A bookie already stores this entry with other bytes and refused to replace them."""

    code = 26


class NodeNotEmptyError(WalkitError):
    """A metadata node to be deleted still has children."""

    code = 25


class SessionExpiredError(MetadataStoreError, OwnershipLostError):
    """The metadata session (and its ephemeral nodes) expired."""

    code = 23
    retryable = False


class ClientClosedError(UsageError):
    """The client (or handle) was closed."""

    code = 24


class TLSError(BookieUnavailableError, UsageError):
    """TLS between a client and a bookie failed: a failed handshake, a certificate the other
    side does not trust, a client certificate the bookie requires, or TLS on one side only.

    A configuration problem (see ``docs/security.md``): trying again does not help.
    """

    code = 30
    retryable = False


class AuthenticationError(BookieUnavailableError, UsageError):
    """A bookie refused this client's credentials, or requires authentication this client
    does not send (``walkit.Client.connect(url, auth=walkit.TokenAuth(...))``). A
    configuration problem (see ``docs/security.md``): trying again does not help."""

    code = 31
    retryable = False


class MetadataNotEmptyError(NodeExistsError):
    """A metadata import or migration found its destination holding metadata already: it
    writes only into an empty store (a fresh sqlite file, an empty ZooKeeper root)."""


class ClusterRunningError(WalkitError):
    """A metadata migration found live sessions in the source store (registered bookies,
    autorecovery workers, elections): the cluster must be stopped first."""


class NoSuchLogError(NoSuchNodeError):
    """The log does not exist (``Log.open(..., create=False)``, ``walkit log show``), or was
    deleted under its readers and writers (``Log.delete``)."""


class LogTruncatedError(NoSuchEntryError):
    """Records a reader needs lie before the log's truncation point."""


class CorruptEntryError(DataError):
    """An entry of a log ledger passed its digest but is not a well-formed record set (written
    by something other than a walkit log writer, or by a newer version)."""

    retryable = False


class LakeUnavailableError(RetryLaterError):
    """A log's lake (``offload_to``: its object store, local directory or Iceberg catalog)
    could not be reached or failed an operation: nothing was lost, and an offload tried again
    later finishes (``docs/lake.md``, "Errors"). The message names the log, the ledger and the
    file when one is concerned."""

    retryable = True


class LakeAccessError(LakeUnavailableError, UsageError):
    """The lake refused this process (S3 access denied, a directory it may not write): a
    configuration problem of credentials or permissions; trying again does not help."""

    retryable = False


class CorruptLakeFileError(CorruptEntryError):
    """A data file of an offloaded ledger is missing from the lake or is not the Parquet file
    the offload wrote (truncated, overwritten). The log's metadata still lists it; the records
    are readable again only once the file is restored (from a backup or the object store's
    versions), or from the bookies while their copy is kept (``offload_deletion_lag``).
    ``file``: the file's URI; ``ledger_id``: its ledger."""

    def __init__(self, message: str = "", file: str | None = None, ledger_id: int | None = None):
        super().__init__(message)
        self.file = file
        self.ledger_id = ledger_id


class WrongEventLoopError(UsageError, RuntimeError):
    """An object bound to one event loop (trio's or asyncio's) was used from another thread or
    event loop: a client serves the loop it was created in (walkit.sync serves threads)."""


class ForkedProcessError(WrongEventLoopError):
    """A client was used in a child process after ``fork()`` (gunicorn ``--preload``, say):
    its connections and event loop stayed in the parent. Connect again in the child."""


class _Position(Protocol):
    """What :class:`DuplicateRecordError` says of a position: at run time a
    ``walkit.LogPosition``. Named structurally because every module of walkit raises these
    errors, so this one imports none of them (``docs/architecture.md``)."""

    @property
    def ledger_seq(self) -> int: ...

    @property
    def entry_id(self) -> int: ...

    @property
    def slot(self) -> int: ...


class DuplicateRecordError(WalkitError):
    """An idempotent append whose producer sequence number is already in the log: the record
    is stored once, at ``position`` (the first copy's position)."""

    retryable = False

    def __init__(self, message: str = "", position: _Position | None = None) -> None:
        super().__init__(message)
        self.position = position


class NoSuchConsumerError(NoSuchNodeError):
    """The log has no consumer of that name (``walkit log consumer delete``), or it was
    deleted under a consumer that commits."""


class ConsumerBackloggedError(LogTruncatedError):
    """A durable consumer is behind: records it had not committed were deleted (retention
    released it because its backlog passed the log's ``max_backlog_bytes`` or
    ``max_backlog_records``, or the writer truncated the log past it). ``position``: where the
    consumer stands; ``truncated``: where the log starts now. ``consumer.skip_lost()`` goes on
    from there."""

    def __init__(
        self,
        message: str = "",
        position: _Position | None = None,
        truncated: _Position | None = None,
    ) -> None:
        super().__init__(message)
        self.position = position
        self.truncated = truncated


class SchemaError(DataError):
    """A typed log's value could not be made or read: a type that cannot be a log schema
    (given to ``Log.open(..., schema=T)``), or a record that does not decode into the reader's
    type (corrupt, written with a version the log's metadata does not have, or without a
    schema). ``position``: the record's, when a record is at fault; its ``payload`` is still
    readable."""

    retryable = False

    def __init__(
        self, message: str = "", position: _Position | None = None, field: str | None = None
    ) -> None:
        super().__init__(message)
        self.position = position
        self.field = field


class IncompatibleSchemaError(SchemaError):
    """A writer's schema breaks the log's ``schema_compatibility`` rule against a version the
    log has (``Log.open`` or ``log.writer()``; nothing was registered or fenced). ``field``:
    the field at fault (dotted for nested records); ``rule``: the rule broken; ``version``:
    the version it is incompatible with."""

    def __init__(
        self,
        message: str = "",
        field: str | None = None,
        rule: str | None = None,
        version: int | None = None,
    ) -> None:
        super().__init__(message, None, field)
        self.rule = rule
        self.version = version


class RereplicationError(LedgerRecoveryError):
    """A ledger could not be rereplicated this time (no surviving copy reachable, no valid
    replacement bookie, unknown password); its under-replication marker stays."""


@functools.cache
def _by_code() -> dict[int, type[WalkitError]]:
    table: dict[int, type[WalkitError]] = {}
    stack: list[type[WalkitError]] = [WalkitError]
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        # The first class defining a code wins; subclasses that inherit it do not override.
        if cls.code >= 0 and "code" in cls.__dict__:
            table.setdefault(cls.code, cls)
    return table


def error_for_code(code: int, message: str = "") -> WalkitError:
    """Build the error class for a wire status code (unknown codes give a plain RemoteProtocolError)."""
    cls = _by_code().get(code)
    if cls is None:
        return RemoteProtocolError(f"unknown status code {code}: {message}")
    return cls(message)


# Raised only inside a bookie process, never seen by a client: importable from here (and from
# ``walkit_bookie``) but not in ``__all__``, so not in the client's top-level namespace.
_BOOKIE_ONLY: frozenset[str] = frozenset({"CookieError"})

# A literal list, so that type checkers see `walkit.WriterFencedError` and friends re-exported
# by `from walkit.errors import *`; tests/core/test_errors_api.py checks it names every class
# but those of _BOOKIE_ONLY.
__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "BookieIOError",
    "BookieReadOnlyError",
    "BookieTimeoutError",
    "BookieUnavailableError",
    "ClientClosedError",
    "ClusterRunningError",
    "ConfigurationError",
    "ConsumerBackloggedError",
    "CorruptEntryError",
    "CorruptLakeFileError",
    "DataError",
    "DigestMismatchError",
    "DuplicateRecordError",
    "EntryExistsError",
    "ForkedProcessError",
    "FrameTooLargeError",
    "IncompatibleSchemaError",
    "InvalidArgumentError",
    "InvalidMetadataError",
    "LakeAccessError",
    "LakeUnavailableError",
    "LedgerClosedError",
    "LedgerFencedError",
    "LedgerInRecoveryError",
    "LedgerRecoveryError",
    "LocalProtocolError",
    "LogTruncatedError",
    "MetadataAccessError",
    "MetadataNotEmptyError",
    "MetadataStoreError",
    "MetadataVersionError",
    "NoSuchConsumerError",
    "NoSuchEntryError",
    "NoSuchLedgerError",
    "NoSuchLogError",
    "NoSuchNodeError",
    "NodeExistsError",
    "NodeNotEmptyError",
    "NotEnoughBookiesError",
    "NotFoundError",
    "OwnershipLostError",
    "ProtocolError",
    "RemoteProtocolError",
    "RereplicationError",
    "RetryLaterError",
    "SchemaError",
    "SessionExpiredError",
    "TLSError",
    "TooManyRequestsError",
    "UnauthorizedAccessError",
    "UnsupportedVersionError",
    "UsageError",
    "WalkitError",
    "WriterFencedError",
    "WrongEventLoopError",
    "error_for_code",
]
