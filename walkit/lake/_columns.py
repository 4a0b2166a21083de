"""The table's columns as the lake format and the log's schema have them: the table brought up
to date before a ledger is written, and the data files' Arrow schema taken from it.

A table is created with lake format 1's columns; format 2's ``producer`` is added by schema
evolution, and so is a typed log's ``value`` (a struct of the fields of the log's latest
schema version), whose fields grow as the log's schema does: Iceberg's union by name adds the
fields the table lacks, with fresh ids, and keeps those a newer version removed (older files'
rows still have them). A change Iceberg cannot make to a column (a ``long`` field made a
``double``: Iceberg promotes only int to long, float to double) fails the offload with
SchemaError naming the field; the records stay on the bookies.

The evolution is one Iceberg commit that asserts the schema it was planned on, like the
offloader's appends: a lost race is decided again from a fresh read.
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, ValidationError
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.table import Table

from walkit._core.lake import LAKE_FORMAT
from walkit._core.schema import RecordType
from walkit._schema_arrow import VALUE_COLUMN, arrow_type
from walkit.errors import ConfigurationError, SchemaError
from walkit.lake._commit import COMMIT_ATTEMPTS
from walkit.lake._table import ARROW_SCHEMA, Lake

__all__ = ["VALUE_COLUMN", "table_columns"]

_FORMAT_PROPERTY: Final = "walkit.lake-format"


def _wanted(value: RecordType | None) -> pa.Schema:
    """The columns evolution adds (without ids: Iceberg assigns them)."""
    fields = [pa.field("producer", _plain(ARROW_SCHEMA.field("producer").type))]
    if value is not None:
        fields.append(pa.field(VALUE_COLUMN, arrow_type(value)))
    return pa.schema(fields)


def _plain(tp: pa.DataType) -> pa.DataType:
    """A struct type without its fields' metadata (the ids: union by name assigns fresh ones)."""
    return pa.struct([pa.field(f.name, f.type, f.nullable) for f in tp])


def table_columns(lake: Lake, value: RecordType | None) -> pa.Schema:
    """Bring the log's table up to this lake format's columns and to ``value`` (the log's latest
    schema, None: untyped), and return the data files' Arrow schema (blocking). SchemaError
    when the table's ``value`` cannot take the schema's fields."""
    for _attempt in range(COMMIT_ATTEMPTS):
        table = lake.table()
        assert table is not None
        try:
            _evolve(table, value)
        except CommitFailedException:
            continue
        except ValidationError as exc:
            raise SchemaError(
                f"log {lake.log_name}: the lake's table {lake.table_name} cannot take the "
                f"log's schema: {exc}"
            ) from None
        return file_schema(lake, table)
    raise CommitFailedException(
        f"log {lake.log_name}: {COMMIT_ATTEMPTS} schema updates of the lake's table lost to others"
    )


def _evolve(table: Table, value: RecordType | None) -> None:
    stale = table.properties.get(_FORMAT_PROPERTY) != str(LAKE_FORMAT)
    with table.transaction() as tx:
        with tx.update_schema() as update:  # (no commit when nothing changes)
            update.union_by_name(_wanted(value))
        if stale:
            tx.set_properties({_FORMAT_PROPERTY: str(LAKE_FORMAT)})


def file_schema(lake: Lake, table: Table) -> pa.Schema:
    """The data files' Arrow schema: ARROW_SCHEMA, then the table's ``value`` with its ids."""
    schema = table.schema()
    for field in ARROW_SCHEMA:
        _check_id(lake, schema, field)
    if VALUE_COLUMN not in schema.column_names:
        return ARROW_SCHEMA
    value = schema.find_field(VALUE_COLUMN)
    (arrow,) = schema_to_pyarrow(type(schema)(value))
    return ARROW_SCHEMA.append(arrow)


def _check_id(lake: Lake, schema: object, field: pa.Field, prefix: str = "") -> None:
    """ConfigurationError unless the table's column has the field id walkit writes."""
    from pyiceberg.schema import Schema

    assert isinstance(schema, Schema)
    name = prefix + field.name
    want = int(field.metadata[b"PARQUET:field_id"])
    try:
        have = schema.find_field(name).field_id
    except ValueError:
        have = None
    if have != want:
        raise ConfigurationError(
            f"log {lake.log_name}: the lake's table {lake.table_name} has column {name} with "
            f"field id {have}, not {want}: it was not made by walkit (ICEBERG_SCHEMA)"
        )
    if pa.types.is_struct(field.type):
        for child in field.type:
            _check_id(lake, schema, child, name + ".")
