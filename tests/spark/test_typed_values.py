"""walkit.spark._values without a session: the Spark and Arrow types of a log schema, the
value column of a chunk (nulls before the schema, SchemaError naming the position of a record
that does not decode), and the write side's checks and encoding."""

from __future__ import annotations

import dataclasses
import pickle

import pyarrow as pa
import pytest
from pyspark.sql import types as t

from walkit._core.schema_codec import ValueCodec
from walkit._core.schema_types import schema_of
from walkit.errors import ConfigurationError, InvalidArgumentError, SchemaError
from walkit.spark._values import (
    ValueColumn,
    ValueEncoder,
    check_value_type,
    spark_ddl,
    spark_type,
)


@dataclasses.dataclass
class Inner:
    name: str


@dataclasses.dataclass
class Row:
    id: int
    score: float
    ok: bool
    raw: bytes
    inner: Inner | None = None
    tags: list[str] = dataclasses.field(default_factory=list)
    counts: dict[str, int] = dataclasses.field(default_factory=dict)


SCHEMA = schema_of(Row)


def test_types() -> None:
    assert spark_ddl(SCHEMA) == (
        "struct<`id`: bigint, `score`: double, `ok`: boolean, `raw`: binary, "
        "`inner`: struct<`name`: string>, `tags`: array<string>, `counts`: map<string, bigint>>"
    )
    parsed = spark_type(SCHEMA)
    assert isinstance(parsed, t.StructType)
    assert parsed.simpleString() == (
        "struct<id:bigint,score:double,ok:boolean,raw:binary,inner:struct<name:string>,"
        "tags:array<string>,counts:map<string,bigint>>"
    )


def test_the_value_column_of_a_chunk() -> None:
    codec = ValueCodec(Row)
    column = pickle.loads(pickle.dumps(ValueColumn("orders", SCHEMA)))  # as Spark ships it
    payloads = pa.array(
        [codec.encode(Row(1, 2.5, True, b"\x00", Inner("a"), ["x"], {"k": 3}))], pa.binary()
    )
    got = column.column(payloads, 1, pa.array(["3:0:0"]))
    assert got.to_pylist() == [
        {
            "id": 1,
            "score": 2.5,
            "ok": True,
            "raw": b"\x00",
            "inner": {"name": "a"},
            "tags": ["x"],
            "counts": [("k", 3)],
        }
    ]
    assert column.column(payloads, 0, pa.array(["3:0:0"])).null_count == 1
    bad = pa.array([b"\xc1 not msgpack"], pa.binary())
    with pytest.raises(
        SchemaError, match=r"the record at 4:2:1 of log 'orders' \(schema version 1\)"
    ):
        column.column(bad, 1, pa.array(["4:2:1"]))


def test_the_write_side_checks_and_encodes() -> None:
    given = t.StructType(
        [
            t.StructField("id", t.IntegerType()),
            t.StructField("score", t.LongType()),  # (widened to double)
            t.StructField("ok", t.BooleanType()),
            t.StructField("raw", t.BinaryType()),
            t.StructField("counts", t.MapType(t.StringType(), t.LongType())),
        ]
    )
    check_value_type(given, SCHEMA)
    for bad, words in [
        (t.StructType([t.StructField("id", t.LongType())]), "value.score is missing"),
        (
            t.StructType([*given.fields, t.StructField("x", t.LongType())]),
            "value has field(s) x that the schema lacks",
        ),
        (
            t.StructType([t.StructField("id", t.StringType()), *given.fields[1:]]),
            "value.id is string, the schema's long",
        ),
        (t.LongType(), "value is bigint, not a struct"),
    ]:
        with pytest.raises(ConfigurationError, match=words.replace("(", r"\(").replace(")", r"\)")):
            check_value_type(bad, SCHEMA)
    encoder = pickle.loads(pickle.dumps(ValueEncoder(SCHEMA)))
    cells = [{"id": 1, "score": 3, "ok": False, "raw": b"r", "counts": [("a", 1)]}]
    (payload,) = encoder.payloads(cells, 2, 10)
    assert ValueCodec(Row).decode(payload) == Row(1, 3.0, False, b"r", counts={"a": 1})
    with pytest.raises(InvalidArgumentError, match=r"row 11 of partition 2: value\.ok"):
        encoder.payloads([cells[0], {**cells[0], "ok": None}], 2, 10)
    with pytest.raises(InvalidArgumentError, match="row 10 of partition 2 has a null value"):
        encoder.payloads([None], 2, 10)
