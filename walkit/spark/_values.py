"""A typed log's values as Spark columns: the ``value`` struct of a read, and the ``value``
struct a write takes.

A read of a typed log (one whose metadata holds schema versions, ``docs/log.md`` "Typed
records") has one more column, ``value``: a struct of the fields of the log's latest schema
version when the query was planned. Each record is decoded with that schema (by field name:
fields its own version did not write take their defaults, fields it does not know are
skipped), so rows of every version share one struct. A record written before the log had a
schema has a null ``value``; one that does not decode fails the task with SchemaError naming
its position (its bytes are in ``payload``).

A write into a typed log takes a ``value`` struct column instead of ``payload``: its fields are
checked against the log's latest version on the driver (names, and types Spark can give:
ConfigurationError), each row's value on the executor (a null where the schema takes none:
InvalidArgumentError naming the row and the field), and encoded as a typed writer encodes.

Types: ``boolean``, ``long`` (bigint), ``double``, ``string``, ``bytes`` (binary), arrays, maps
of string keys, records (structs) and enums (strings of their symbols); an optional field is a
nullable one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, final

import pyarrow as pa

from walkit._core.schema import (
    ArrayType,
    EnumType,
    MapType,
    NullableType,
    Primitive,
    RecordType,
    SchemaType,
    SchemaVersion,
)
from walkit._schema_arrow import VALUE_COLUMN, arrow_type
from walkit.errors import ConfigurationError, InvalidArgumentError, SchemaError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType

    from walkit.spark._connect import Connection

__all__ = [
    "VALUE_COLUMN",
    "ValueColumn",
    "ValueEncoder",
    "arrow_type",
    "spark_ddl",
    "value_ddl",
]


_DDL: Final = {
    "boolean": "boolean",
    "long": "bigint",
    "double": "double",
    "string": "string",
    "bytes": "binary",
}


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def spark_ddl(tp: SchemaType) -> str:
    """The Spark SQL type (DDL) of a schema type."""
    if isinstance(tp, Primitive):
        return _DDL[tp.name]
    if isinstance(tp, NullableType):
        return spark_ddl(tp.inner)
    if isinstance(tp, ArrayType):
        return f"array<{spark_ddl(tp.items)}>"
    if isinstance(tp, MapType):
        return f"map<string, {spark_ddl(tp.values)}>"
    if isinstance(tp, EnumType):
        return "string"
    return "struct<" + ", ".join(f"{_quoted(f.name)}: {spark_ddl(f.type)}" for f in tp.fields) + ">"


def value_ddl(schema: RecordType) -> str:
    """The ``value`` column of a read, as DDL to append to the log's columns."""
    return f"{VALUE_COLUMN} {spark_ddl(schema)}"


def latest(versions: Sequence[SchemaVersion]) -> tuple[int, RecordType] | None:
    """The latest version and its schema (None: the log has no schema)."""
    if not versions:
        return None
    return versions[-1].version, versions[-1].schema


# --- reads ------------------------------------------------------------------------------------


@final
class ValueColumn:
    """The ``value`` column of a typed log's rows (plain data: Spark pickles it to the
    executors with the reader)."""

    def __init__(self, log: str, schema: RecordType) -> None:
        self.log = log
        self.schema = schema

    def __getstate__(self) -> dict[str, Any]:
        return {"log": self.log, "schema": self.schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.log = state["log"]
        self.schema = state["schema"]

    @functools.cached_property
    def _arrow(self) -> pa.DataType:
        return arrow_type(self.schema)

    @functools.cached_property
    def _decode(self) -> Callable[[bytes], dict[str, Any]]:
        from walkit._core.schema_codec import plain_decoder

        return plain_decoder(self.schema)

    def column(self, payloads: pa.Array, version: int, positions: pa.Array) -> pa.Array:
        """The values of ``payloads`` (records of a ledger written with schema ``version``;
        0: without one, so null)."""
        rows = len(payloads)
        if version == 0 or rows == 0:
            return pa.nulls(rows, self._arrow)
        decode = self._decode
        values: list[dict[str, Any]] = []
        for index, payload in enumerate(payloads.to_pylist()):
            try:
                values.append(decode(payload))
            except (ValueError, TypeError) as exc:
                position = positions[index].as_py()
                raise SchemaError(
                    f"walkit: the record at {position} of log {self.log!r} (schema version "
                    f"{version}) does not decode with the log's schema: {exc}"
                ) from None
        return pa.array(values, self._arrow)


# --- writes -----------------------------------------------------------------------------------


def check_value_type(given: DataType, schema: RecordType) -> None:
    """ConfigurationError unless a ``value`` column of Spark type ``given`` can hold values of
    ``schema`` (every field without a default present, no unknown field, types that convert)."""
    problem = _type_problem(given, schema, VALUE_COLUMN)
    if problem is not None:
        raise ConfigurationError(
            f"walkit: column 'value' does not match the log's schema ({schema.name}): "
            f"{problem}; the schema's struct is {spark_ddl(schema)}"
        )


def _type_problem(given: DataType, tp: SchemaType, path: str) -> str | None:
    from pyspark.sql import types as t

    if isinstance(tp, NullableType):
        return _type_problem(given, tp.inner, path)
    if isinstance(tp, Primitive):
        accepted: dict[str, tuple[type[Any], ...]] = {
            "boolean": (t.BooleanType,),
            "long": (t.LongType, t.IntegerType, t.ShortType, t.ByteType),
            "double": (
                t.DoubleType,
                t.FloatType,
                t.LongType,
                t.IntegerType,
                t.ShortType,
                t.ByteType,
            ),
            "string": (t.StringType,),
            "bytes": (t.BinaryType,),
        }
        if isinstance(given, accepted[tp.name]):
            return None
        return f"{path} is {given.simpleString()}, the schema's {tp.name}"
    if isinstance(tp, EnumType):
        return None if isinstance(given, t.StringType) else f"{path} is not a string (enum)"
    if isinstance(tp, ArrayType):
        if not isinstance(given, t.ArrayType):
            return f"{path} is {given.simpleString()}, not an array"
        return _type_problem(given.elementType, tp.items, f"{path}[]")
    if isinstance(tp, MapType):
        if not isinstance(given, t.MapType) or not isinstance(given.keyType, t.StringType):
            return f"{path} is {given.simpleString()}, not a map of string keys"
        return _type_problem(given.valueType, tp.values, f"{path}{{}}")
    assert isinstance(tp, RecordType)
    if not isinstance(given, t.StructType):
        return f"{path} is {given.simpleString()}, not a struct"
    fields = {f.name: f.dataType for f in given.fields}
    unknown = [name for name in fields if tp.field(name) is None]
    if unknown:
        return f"{path} has field(s) {', '.join(unknown)} that the schema lacks"
    for field in tp.fields:
        sub = f"{path}.{field.name}"
        if field.name not in fields:
            if field.has_default:
                continue
            return f"{sub} is missing, and has no default"
        problem = _type_problem(fields[field.name], field.type, sub)
        if problem is not None:
            return problem
    return None


@final
class ValueEncoder:
    """Rows' ``value`` structs as payloads: checked against the schema (defaults filled in for
    fields the struct leaves out), encoded as a typed writer encodes. Plain data until used."""

    def __init__(self, schema: RecordType) -> None:
        self.schema = schema

    def __getstate__(self) -> dict[str, Any]:
        return {"schema": self.schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.schema = state["schema"]

    @functools.cached_property
    def _struct(self) -> Any:
        from walkit._core.schema_types import struct_of

        return struct_of(self.schema)

    @functools.cached_property
    def _has_map(self) -> bool:
        return "map<" in spark_ddl(self.schema)

    def payloads(self, values: list[Any], part: int, done: int) -> list[bytes]:
        """The payloads of a batch's ``value`` cells; InvalidArgumentError naming the row and
        the field of the first that does not fit."""
        import msgspec

        from walkit._core.schema_codec import error_field

        struct = self._struct
        encoder = msgspec.msgpack.Encoder()
        out: list[bytes] = []
        for n, value in enumerate(values):
            if value is None:
                raise InvalidArgumentError(
                    f"walkit: row {done + n} of partition {part} has a null value; a record of "
                    f'a typed log needs one (filter them out: df.where("value IS NOT NULL"))'
                )
            if not isinstance(value, dict):  # a Row, on pyspark 4.0 streams
                value = value.asDict(recursive=True)
            if self._has_map:  # (Arrow gives a map as (key, value) pairs)
                value = _plain(value, self.schema)
            try:
                out.append(encoder.encode(msgspec.convert(value, struct)))
            except msgspec.ValidationError as exc:
                field = error_field(str(exc))
                raise InvalidArgumentError(
                    f"walkit: row {done + n} of partition {part}: value"
                    f"{'.' + field if field else ''}: {exc}"
                ) from None
        return out


def _plain(value: Any, tp: SchemaType) -> Any:
    """A cell as msgspec converts it: maps as dicts (Arrow gives pairs), Rows as dicts."""
    if value is None:
        return None
    if isinstance(tp, NullableType):
        return _plain(value, tp.inner)
    if isinstance(tp, MapType):
        items = value.items() if isinstance(value, dict) else value
        return {k: _plain(v, tp.values) for k, v in items}
    if isinstance(tp, ArrayType):
        return [_plain(v, tp.items) for v in value]
    if isinstance(tp, RecordType):
        if not isinstance(value, dict):
            value = value.asDict(recursive=True)
        out = {}
        for key, item in value.items():
            field = tp.field(key)
            out[key] = item if field is None else _plain(item, field.type)
        return out
    return value


# --- on the driver ----------------------------------------------------------------------------


def log_versions(conn: Connection, name: str) -> tuple[SchemaVersion, ...] | None:
    """The log's schema versions as its metadata holds them now (None: no such log)."""
    from walkit.spark._run import run

    return run(_log_versions, conn, name)


async def _log_versions(conn: Connection, name: str) -> tuple[SchemaVersion, ...] | None:
    from walkit.client import client_services
    from walkit.errors import NoSuchLogError
    from walkit.log._store import read_log
    from walkit.spark._connect import connect

    async with connect(conn) as client:
        try:
            context = client_services(client).context
            md, _version = await context.retry_metadata(
                functools.partial(read_log, context.store, name)
            )
        except NoSuchLogError:
            return None
    return md.schemas


def spark_type(tp: SchemaType) -> DataType:
    """The Spark type of a schema type, as Spark parses :func:`spark_ddl` (nullable)."""
    from pyspark.sql import types as t

    if isinstance(tp, Primitive):
        return {
            "boolean": t.BooleanType(),
            "long": t.LongType(),
            "double": t.DoubleType(),
            "string": t.StringType(),
            "bytes": t.BinaryType(),
        }[tp.name]
    if isinstance(tp, NullableType):
        return spark_type(tp.inner)
    if isinstance(tp, ArrayType):
        return t.ArrayType(spark_type(tp.items), True)
    if isinstance(tp, MapType):
        return t.MapType(t.StringType(), spark_type(tp.values), True)
    if isinstance(tp, EnumType):
        return t.StringType()
    return t.StructType([t.StructField(f.name, spark_type(f.type), True) for f in tp.fields])


def read_value_column(conn: Connection, name: str, given: DataType) -> ValueColumn:
    """The ValueColumn of a read whose ``value`` column Spark has as ``given`` (what
    ``schema()`` said: the latest version then, or an older one if another was registered
    since): ConfigurationError if no version of the log has that struct."""
    versions = log_versions(conn, name) or ()
    for version in reversed(versions):
        if spark_type(version.schema) == given:
            return ValueColumn(name, version.schema)
    raise ConfigurationError(
        f"walkit: column 'value' ({given.simpleString()}) matches no schema version of log "
        f"{name!r} (leave out .schema(...))"
    )
