"""The schemas of the read forms, for Spark (DDL) and for the Arrow batches the readers yield.

A log read: ``log, position, ledger_seq, ledger_id, entry_id, slot, payload, key, headers,
timestamp``, one row per record. ``position`` is ``str(LogPosition)``, ``SEQ:ENTRY:SLOT``;
``slot`` is the record's index in its entry (entries of record-set ledgers hold several
records; older ledgers' entries one, at slot 0). ``key`` (binary), ``headers`` (an array of
``key``/``value`` structs, as Kafka's source has them) and ``timestamp`` (UTC) are null for a
record without them.

A ledger read: ``ledger_id, entry_id, payload, state, custom_metadata`` where ``state`` is the
ledger's state when the query was planned (``OPEN``, ``IN_RECOVERY``, ``CLOSED``) and
``custom_metadata`` a map of the ledger's custom metadata (values decoded as UTF-8, bytes that
are not UTF-8 as ``\\xNN`` escapes).
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

__all__ = [
    "HEADERS_ARROW",
    "LEDGER_ARROW",
    "LEDGER_SCHEMA",
    "LOG_ARROW",
    "LOG_SCHEMA",
    "TIMESTAMP_ARROW",
]

LOG_SCHEMA: Final = (
    "log string, position string, ledger_seq long, ledger_id long, entry_id long, slot long, "
    "payload binary, key binary, headers array<struct<key: string, value: binary>>, "
    "timestamp timestamp"
)
#: A record's headers in Arrow.
HEADERS_ARROW: Final = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
#: Timestamps in Arrow: Spark's TimestampType is microseconds, UTC.
TIMESTAMP_ARROW: Final = pa.timestamp("us", tz="UTC")
LOG_ARROW: Final = pa.schema(
    [
        ("log", pa.string()),
        ("position", pa.string()),
        ("ledger_seq", pa.int64()),
        ("ledger_id", pa.int64()),
        ("entry_id", pa.int64()),
        ("slot", pa.int64()),
        ("payload", pa.binary()),
        ("key", pa.binary()),
        ("headers", HEADERS_ARROW),
        ("timestamp", TIMESTAMP_ARROW),
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
