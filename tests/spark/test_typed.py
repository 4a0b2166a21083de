"""Typed logs in Spark, with a real local Spark and real bookie processes: the reader's
``value`` struct column (every version's records in the latest version's struct), the writer's
``value`` column checked against the log's schema and read back as the application's type, and
bad input failing with its text."""

from __future__ import annotations

import dataclasses
from typing import Any

import trio

from tests.spark.test_write import error_text, log_name, write
from walkit import Client, Log


@dataclasses.dataclass
class Address:
    city: str
    zip: str = ""


@dataclasses.dataclass
class OrderV1:
    id: int
    user: str
    amount: float


@dataclasses.dataclass
class OrderV2:
    id: int
    user: str
    amount: float
    tags: list[str] = dataclasses.field(default_factory=list)
    note: str | None = None
    ship_to: Address | None = None
    attrs: dict[str, int] = dataclasses.field(default_factory=dict)


def prepare(url: str, name: str) -> None:
    """A log with a plain record, two version-1 values and two version-2 values."""

    async def main() -> None:
        async with Client.connect(url) as client:
            async with Log.open(client, name) as plain, plain.writer() as w:
                await w.append(b"before the schema")
            async with Log.open(client, name, schema=OrderV1) as v1, v1.writer() as w:
                await w.append_batch([OrderV1(1, "ann", 2.5), OrderV1(2, "bob", 3)])
            async with Log.open(client, name, schema=OrderV2) as v2, v2.writer() as w:
                await w.append(OrderV2(3, "cy", 1.0, tags=["a"], ship_to=Address("Lyon")))
                await w.append(OrderV2(4, "di", 0.5, note="gift", attrs={"k": 7}))

    trio.run(main)


def read_typed(url: str, name: str) -> list[tuple[int | None, Any]]:
    async def main() -> list[tuple[int | None, Any]]:
        async with Client.connect(url) as client:
            owner = await Log.open(client, name, create=False, schema=OrderV2)
            return [
                (r.schema_version, r.value)
                async for r in owner.reader(follow=False)
                if r.schema_version is not None  # (not the record before the schema)
            ]

    return trio.run(main)


def test_a_typed_log_reads_with_a_value_struct(spark: Any, spark_metadata: str) -> None:
    name = log_name("typed-read")
    prepare(spark_metadata, name)
    df = spark.read.format("walkit").option("metadata", spark_metadata).load(name)
    assert df.columns[-1] == "value"
    assert df.schema["value"].dataType.simpleString() == (
        "struct<id:bigint,user:string,amount:double,tags:array<string>,note:string,"
        "ship_to:struct<city:string,zip:string>,attrs:map<string,bigint>>"
    )
    rows = df.orderBy("position").select("value").collect()
    assert rows[0].value is None  # written before the log had a schema
    values = [r.value.asDict(recursive=True) for r in rows[1:]]
    assert values == [
        {
            "id": 1,
            "user": "ann",
            "amount": 2.5,
            "tags": [],
            "note": None,
            "ship_to": None,
            "attrs": {},
        },
        {
            "id": 2,
            "user": "bob",
            "amount": 3.0,
            "tags": [],
            "note": None,
            "ship_to": None,
            "attrs": {},
        },
        {
            "id": 3,
            "user": "cy",
            "amount": 1.0,
            "tags": ["a"],
            "note": None,
            "ship_to": {"city": "Lyon", "zip": ""},
            "attrs": {},
        },
        {
            "id": 4,
            "user": "di",
            "amount": 0.5,
            "tags": [],
            "note": "gift",
            "ship_to": None,
            "attrs": {"k": 7},
        },
    ]
    # Fields as columns, as a query uses them.
    got = df.where("value.amount >= 1").selectExpr("value.user AS user").orderBy("user").collect()
    assert [r.user for r in got] == ["ann", "bob", "cy"]


def test_a_typed_write_takes_a_value_struct_checked_against_the_schema(
    spark: Any, spark_metadata: str
) -> None:
    name = log_name("typed-write")
    prepare(spark_metadata, name)
    df = spark.createDataFrame(
        [(10, "eve", 4.5, ["x", "y"], "Oslo"), (11, "fay", 5.0, [], None)],
        "id long, user string, amount double, tags array<string>, city string",
    ).selectExpr(
        "named_struct('id', id, 'user', user, 'amount', amount, 'tags', tags, "
        "'ship_to', IF(city IS NULL, NULL, named_struct('city', city, 'zip', '0150'))) AS value",
        "CAST(user AS BINARY) AS key",
    )
    write(df, spark_metadata, name)
    got = read_typed(spark_metadata, name)
    assert got[-2:] == [
        (2, OrderV2(10, "eve", 4.5, tags=["x", "y"], ship_to=Address("Oslo", "0150"))),
        (2, OrderV2(11, "fay", 5.0)),  # (note and attrs: the schema's defaults)
    ]
    # A written DataFrame reads back through Spark too.
    back = spark.read.format("walkit").option("metadata", spark_metadata).load(name)
    keyed = back.where("key IS NOT NULL").orderBy("position").select("key", "value.user").collect()
    assert [(bytes(r.key), r.user) for r in keyed] == [(b"eve", "eve"), (b"fay", "fay")]


def test_bad_typed_writes_fail_with_their_text(spark: Any, spark_metadata: str) -> None:
    name = log_name("typed-bad")
    prepare(spark_metadata, name)
    url = spark_metadata

    def value_df(expr: str) -> Any:
        return spark.range(2).selectExpr(f"{expr} AS value")

    text = error_text(lambda: write(value_df("named_struct('id', id, 'user', 'u')"), url, name))
    assert "value.amount is missing, and has no default" in text
    text = error_text(
        lambda: write(value_df("named_struct('id', id, 'user', 1, 'amount', 1.0D)"), url, name)
    )
    assert "value.user is int, the schema's string" in text
    text = error_text(
        lambda: write(
            value_df("named_struct('id', id, 'user', 'u', 'amount', 1.0D, 'extra', 1)"), url, name
        )
    )
    assert "value has field(s) extra that the schema lacks" in text
    payloads = spark.range(2).selectExpr("CAST(CAST(id AS STRING) AS BINARY) AS payload")
    text = error_text(lambda: write(payloads, url, name))
    assert "is typed (schema version 2, OrderV2): write a struct column 'value'" in text
    plain = log_name("plain")
    write(payloads, url, plain)
    text = error_text(
        lambda: write(value_df("named_struct('id', id, 'user', 'u', 'amount', 1.0D)"), url, plain)
    )
    assert "has a 'value' column, but log" in text and "has no schema" in text
    # A null where the schema takes none: the task fails naming the row and the field.
    nulls = spark.range(0, 2, numPartitions=1).selectExpr(
        "named_struct('id', id, 'user', IF(id = 1, NULL, 'u'), 'amount', 1.0D) AS value"
    )
    text = error_text(lambda: write(nulls, url, name))
    assert "row 1 of partition 0: value.user: Expected `str`, got `null`" in text
    assert [v for _, v in read_typed(url, name)][-1] == OrderV2(
        4, "di", 0.5, note="gift", attrs={"k": 7}
    )
