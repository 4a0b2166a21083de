"""walkit: a replicated write-ahead log on Apache BookKeeper's replication protocol, on trio."""

from walkit import errors
from walkit._core.auth import AuthProvider, TokenAuth
from walkit._core.digest import DigestType
from walkit._core.ledger_metadata import LedgerMetadata, LedgerState
from walkit._core.types import BookieId, Entry
from walkit._version import __version__ as __version__
from walkit.client import Client
from walkit.errors import *  # noqa: F403  (the error hierarchy is part of the top-level API)
from walkit.ledger import ClientOptions, LedgerReader, LedgerWriter
from walkit.log import (
    Log,
    LogMetadata,
    LogOptions,
    LogPosition,
    LogReader,
    LogRecord,
    LogWriter,
    ProducerTag,
    Snapshot,
)
from walkit.net import TLSConfig

__all__ = [
    "AuthProvider",
    "BookieId",
    "Client",
    "ClientOptions",
    "DigestType",
    "Entry",
    "LedgerMetadata",
    "LedgerReader",
    "LedgerState",
    "LedgerWriter",
    "Log",
    "LogMetadata",
    "LogOptions",
    "LogPosition",
    "LogReader",
    "LogRecord",
    "LogWriter",
    "ProducerTag",
    "Snapshot",
    "TLSConfig",
    "TokenAuth",
    "errors",
]
__all__ += errors.__all__  # this spelling lets type checkers see the re-exported errors
