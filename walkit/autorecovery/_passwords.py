"""Which password rereplicates a ledger: the one its metadata keeps, else one autorecovery knows.

Rereplication needs the ledger's password: its master key for the replacement bookie, and its MAC
key to check ``mac`` digests. A ledger keeps the password in its metadata unless its creator
opted out (``store_password=False``) or it was written before ledgers kept it; then the
candidates are b"" (the client's default), the passwords an operator gave
(``walkit recover --password``, ``AutorecoveryOptions(passwords=...)``), and the one stored
with the ledger's log. The decision is :func:`walkit._core.ledger_metadata.admin_password`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from walkit._core.ledger_metadata import LedgerMetadata, admin_password
from walkit.log._passwords import ledger_log

__all__ = ["PASSWORD_NEEDED", "known_password"]


async def known_password(
    metadata: LedgerMetadata,
    given: Iterable[bytes],
    log_password: Callable[[str], Awaitable[bytes]],
) -> bytes | None:
    """The ledger's password, or None when neither its metadata nor ``given``, b"" or its
    log's (``log_password(name)``, read only when needed) is it."""
    found = admin_password(metadata, (*given, b""))
    name = ledger_log(metadata)
    if found is None and name is not None:
        found = admin_password(metadata, (await log_password(name),))
    return found


#: Why a ledger whose password is unknown stays marked, and what an operator does about it.
PASSWORD_NEEDED = (
    "its password is needed: its metadata does not keep it (created with "
    "store_password=False, or before ledgers kept it) and it is neither b'' nor its log's; "
    "give it with `walkit recover BOOKIE --password PW` or autorecovery's passwords option"
)
