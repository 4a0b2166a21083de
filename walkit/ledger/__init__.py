"""The ledger API: writer and reader handles (created by :class:`walkit.Client`)."""

from walkit.ledger._client_services import ClientServices, LedgerCleanup
from walkit.ledger._context import ClientContext
from walkit.ledger._options import ClientOptions, ClientOptionsDict
from walkit.ledger._reader import LedgerReader
from walkit.ledger._writer import LedgerWriter

__all__ = [
    "ClientContext",
    "ClientOptions",
    "ClientOptionsDict",
    "ClientServices",
    "LedgerCleanup",
    "LedgerReader",
    "LedgerWriter",
]
