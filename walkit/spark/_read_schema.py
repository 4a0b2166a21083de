"""The schemas of the read forms, for Spark (DDL) and for the Arrow batches the readers yield.

A log read: ``log, position, ledger_seq, ledger_id, entry_id, payload``. Positions have no slot
today (one record per entry); when records come to share entries, a ``slot`` column joins after
``entry_id`` and ``position`` takes the ``SEQ:ENTRY:SLOT`` form that ``str(LogPosition)`` gives.

A ledger read: ``ledger_id, entry_id, payload, state, custom_metadata`` where ``state`` is the
ledger's state when the query was planned (``OPEN``, ``IN_RECOVERY``, ``CLOSED``) and
``custom_metadata`` a map of the ledger's custom metadata (values decoded as UTF-8, bytes that
are not UTF-8 as ``\\xNN`` escapes).
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

__all__ = ["LEDGER_ARROW", "LEDGER_SCHEMA", "LOG_ARROW", "LOG_SCHEMA"]

LOG_SCHEMA: Final = (
    "log string, position string, ledger_seq long, ledger_id long, entry_id long, payload binary"
)
LOG_ARROW: Final = pa.schema(
    [
        ("log", pa.string()),
        ("position", pa.string()),
        ("ledger_seq", pa.int64()),
        ("ledger_id", pa.int64()),
        ("entry_id", pa.int64()),
        ("payload", pa.binary()),
    ]
)

LEDGER_SCHEMA: Final = (
    "ledger_id long, entry_id long, payload binary, state string, "
    "custom_metadata map<string, string>"
)
LEDGER_ARROW: Final = pa.schema(
    [
        ("ledger_id", pa.int64()),
        ("entry_id", pa.int64()),
        ("payload", pa.binary()),
        ("state", pa.string()),
        ("custom_metadata", pa.map_(pa.string(), pa.string())),
    ]
)
