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

from typing import TYPE_CHECKING, Final

import pyarrow as pa
import pyarrow.compute as pc

from walkit._schema_arrow import VALUE_COLUMN

if TYPE_CHECKING:
    from walkit.spark._read_plan import Range
    from walkit.spark._values import ValueColumn

__all__ = [
    "HEADERS_ARROW",
    "LEDGER_ARROW",
    "LEDGER_SCHEMA",
    "LOG_ARROW",
    "LOG_SCHEMA",
    "TIMESTAMP_ARROW",
    "log_rows",
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


def log_rows(
    name: str,
    rng: Range,
    entry_ids: pa.Array,
    slots: pa.Array,
    payloads: pa.Array,
    extras: list[pa.Array],
    values: ValueColumn | None = None,
) -> pa.RecordBatch:
    """Rows of the log schema from a range's per-record columns (``extras``: ``key``,
    ``headers``, ``timestamp``), with the columns every row of the range shares and its
    positions; with ``values``, a typed log's ``value`` column last. Used by the reads from
    the bookies and from the lake alike."""
    rows = len(entry_ids)
    positions = pc.binary_join_element_wise(
        f"{rng.seq}:", pc.cast(entry_ids, pa.string()), ":", pc.cast(slots, pa.string()), ""
    )
    columns = [
        pa.repeat(pa.scalar(name, pa.string()), rows),
        positions,
        pa.repeat(pa.scalar(rng.seq, pa.int64()), rows),
        pa.repeat(pa.scalar(rng.ledger_id, pa.int64()), rows),
        entry_ids,
        slots,
        payloads,
        *extras,
    ]
    schema = LOG_ARROW
    if values is not None:
        column = values.column(payloads, rng.schema, positions)
        columns.append(column)
        schema = schema.append(pa.field(VALUE_COLUMN, column.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)
