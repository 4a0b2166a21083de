"""walkit: a replicated write-ahead log on Apache BookKeeper's replication protocol, on AnyIO.

One implementation serves asyncio (uvloop too), trio, and threads through ``walkit.sync``; the
bundled bookie runs asyncio with uvloop by default, and the simulation (``walkit.testing``) runs
trio with its ``MockClock``.

The client's names (``Client``, ``Log``, ...) load on first use (PEP 562): a program that only
needs ``walkit.errors`` or ``walkit._core``, such as the bookie, does not load the client.
"""

from typing import TYPE_CHECKING, Any

from walkit import errors
from walkit._core.auth import AuthProvider, TokenAuth
from walkit._core.digest import DigestType
from walkit._core.ledger_metadata import LedgerMetadata, LedgerState
from walkit._core.record import Headers, Record
from walkit._core.types import BookieId, Entry
from walkit._version import __version__ as __version__
from walkit.errors import *  # noqa: F403  (the error hierarchy is part of the top-level API)

if TYPE_CHECKING:
    from walkit.client import Client
    from walkit.ledger import ClientOptions, LedgerReader, LedgerWriter
    from walkit.log import (
        Log,
        LogConsumer,
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

#: Name -> the module it comes from, imported when the name is first asked for.
_LAZY = {
    "Client": "walkit.client",
    "ClientOptions": "walkit.ledger",
    "LedgerReader": "walkit.ledger",
    "LedgerWriter": "walkit.ledger",
    "Log": "walkit.log",
    "LogConsumer": "walkit.log",
    "LogMetadata": "walkit.log",
    "LogOptions": "walkit.log",
    "LogPosition": "walkit.log",
    "LogReader": "walkit.log",
    "LogRecord": "walkit.log",
    "LogWriter": "walkit.log",
    "ProducerTag": "walkit.log",
    "Snapshot": "walkit.log",
    "TLSConfig": "walkit.net",
}


def __getattr__(name: str) -> Any:
    if name in errors._BOOKIE_ONLY:
        # Bookie-only errors left the client's namespace; the old spelling still works a while.
        import warnings

        warnings.warn(
            f"walkit.{name} is raised only by the bookie: import it from walkit.errors "
            "or walkit_bookie",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(errors, name)
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'walkit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


__all__ = [
    "AuthProvider",
    "BookieId",
    "Client",
    "ClientOptions",
    "DigestType",
    "Entry",
    "Headers",
    "LedgerMetadata",
    "LedgerReader",
    "LedgerState",
    "LedgerWriter",
    "Log",
    "LogConsumer",
    "LogMetadata",
    "LogOptions",
    "LogPosition",
    "LogReader",
    "LogRecord",
    "LogWriter",
    "ProducerTag",
    "Record",
    "Snapshot",
    "TLSConfig",
    "TokenAuth",
    "errors",
]
__all__ += errors.__all__  # this spelling lets type checkers see the re-exported errors
