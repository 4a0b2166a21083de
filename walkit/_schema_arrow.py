"""A typed log's schema as Arrow types: the ``value`` column's name and the one mapping that
the Spark source's ``value`` column (``walkit.spark._values``) and the lake's ``value`` column
(``walkit.lake``) share (needs pyarrow: the ``spark`` and ``lake`` extras).

``boolean``, ``long``, ``double``, ``string`` and ``bytes`` are Arrow's bool, int64, float64,
string and binary; an array is a list, a map (string keys) a map, a record a struct, an enum
the string of its symbol; an optional field is a nullable one (every Arrow field here is
nullable: a value written by an older version may lack a field).
"""

from __future__ import annotations

from typing import Final

import pyarrow as pa

from walkit._core.schema import ArrayType, EnumType, MapType, NullableType, Primitive, SchemaType

__all__ = ["VALUE_COLUMN", "arrow_type"]

#: The column of a typed log's values, in Spark's rows and in the lake's table.
VALUE_COLUMN: Final = "value"

_ARROW: Final = {
    "boolean": pa.bool_(),
    "long": pa.int64(),
    "double": pa.float64(),
    "string": pa.string(),
    "bytes": pa.binary(),
}


def arrow_type(tp: SchemaType) -> pa.DataType:
    """The Arrow type of a schema type."""
    if isinstance(tp, Primitive):
        return _ARROW[tp.name]
    if isinstance(tp, NullableType):
        return arrow_type(tp.inner)
    if isinstance(tp, ArrayType):
        return pa.list_(arrow_type(tp.items))
    if isinstance(tp, MapType):
        return pa.map_(pa.string(), arrow_type(tp.values))
    if isinstance(tp, EnumType):
        return pa.string()
    return pa.struct([(f.name, arrow_type(f.type)) for f in tp.fields])
