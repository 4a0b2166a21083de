"""The passwords stored with logs, for tools that read a log's ledgers directly (Spark, audits).

A log created without a password keeps a random one in its metadata (see docs/log.md,
"Passwords"), and tags each of its ledgers with ``walkit.log=NAME`` in custom metadata.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from walkit._core.ledger_metadata import LedgerMetadata
from walkit.client import client_services
from walkit.errors import NoSuchLogError
from walkit.log._store import read_log
from walkit.metadata import MetadataStore

if TYPE_CHECKING:
    from walkit.client import Client

__all__ = ["LOG_KEY", "ledger_password", "log_password", "stored_log_password"]

#: The custom metadata key that names the log a ledger belongs to.
LOG_KEY = "walkit.log"


async def stored_log_password(store: MetadataStore, name: str) -> bytes:
    """The password stored with log ``name``: b"" for a log created with a password of its own
    (only its users know it), or created before passwords were generated, or missing."""
    try:
        md, _version = await read_log(store, name)
    except NoSuchLogError:
        return b""
    return md.config.password


async def log_password(client: Client, name: str) -> bytes:
    """:func:`stored_log_password`, retried while the metadata store is unreachable."""
    context = client_services(client).context
    return await context.retry_metadata(functools.partial(stored_log_password, context.store, name))


def ledger_log(metadata: LedgerMetadata) -> str | None:
    """The name of the log a ledger belongs to (its ``walkit.log`` tag), if any."""
    tag = metadata.custom_metadata.get(LOG_KEY)
    return None if tag is None else tag.decode("utf-8", "replace")


async def ledger_password(client: Client, metadata: LedgerMetadata) -> bytes:
    """The password of a ledger as its log stored it (b"" for a ledger of no log)."""
    name = ledger_log(metadata)
    return b"" if name is None else await log_password(client, name)
