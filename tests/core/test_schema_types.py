"""A log schema from a dataclass, a msgspec Struct or a pydantic model; values through the
codec: checked on the way in (naming the field), resolved by name on the way out."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import msgspec
import pydantic
import pytest

from walkit._core.schema_codec import ValueCodec, plain_decoder
from walkit._core.schema_types import schema_of
from walkit.errors import InvalidArgumentError, SchemaError


class Kind(enum.Enum):
    BUY = "buy"
    SELL = "sell"


@dataclasses.dataclass
class Line:
    sku: str
    qty: int = 1


@dataclasses.dataclass
class OrderD:
    id: int
    user: str
    amount: float
    kind: Kind = Kind.BUY
    lines: list[Line] = dataclasses.field(default_factory=list)
    note: str | None = None
    raw: bytes = b""
    attrs: dict[str, int] = dataclasses.field(default_factory=dict)


class LineS(msgspec.Struct):
    sku: str
    qty: int = 1


class OrderS(msgspec.Struct):
    id: int
    user: str
    amount: float
    kind: Kind = Kind.BUY
    lines: list[LineS] = []
    note: str | None = None
    raw: bytes = b""
    attrs: dict[str, int] = {}


class LineP(pydantic.BaseModel):
    sku: str
    qty: int = 1


class OrderP(pydantic.BaseModel):
    id: int
    user: str
    amount: float
    kind: Kind = Kind.BUY
    lines: list[LineP] = []
    note: str | None = None
    raw: bytes = b""
    attrs: dict[str, int] = {}


def _fields(tp: type) -> list[Any]:
    return [
        (f["name"], f["type"], f.get("default", "-")) for f in schema_of(tp).to_json()["fields"]
    ]


def test_dataclass_struct_and_pydantic_model_give_the_same_fields() -> None:
    expected: list[Any] = [
        ("id", "long", "-"),
        ("user", "string", "-"),
        ("amount", "double", "-"),
        ("kind", {"type": "enum", "name": "Kind", "symbols": ["buy", "sell"]}, "buy"),
        (
            "lines",
            {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Line",
                    "fields": [
                        {"name": "sku", "type": "string"},
                        {"name": "qty", "type": "long", "default": 1},
                    ],
                },
            },
            [],
        ),
        ("note", ["null", "string"], None),
        ("raw", "bytes", ""),
        ("attrs", {"type": "map", "values": "long"}, {}),
    ]
    assert _fields(OrderD) == expected
    for tp in (OrderS, OrderP):
        got = _fields(tp)
        # (the nested record's name is its class's)
        got[4][1]["items"]["name"] = "Line"
        assert got == expected


@dataclasses.dataclass
class WithSet:
    id: int
    tags: set[str]


@dataclasses.dataclass
class WithUnion:
    id: int
    value: int | str


@dataclasses.dataclass
class WithIntKeys:
    counts: dict[int, int]


class IntKind(enum.Enum):
    A = 1


@dataclasses.dataclass
class WithIntEnum:
    kind: IntKind


class ByPosition(msgspec.Struct, array_like=True):
    id: int


class Strict(msgspec.Struct, forbid_unknown_fields=True):
    id: int


@dataclasses.dataclass
class Node:
    children: list[Node]


@pytest.mark.parametrize(
    ("tp", "words"),
    [
        (WithSet, "field 'tags': type set is not supported"),
        (WithUnion, "field 'value': a union in a log schema is T | None"),
        (WithIntKeys, "field 'counts': a dict's keys must be str"),
        (WithIntEnum, "field 'kind': an enum in a log schema has str values"),
        (ByPosition, "array_like"),
        (Strict, "forbid_unknown_fields"),
        (Node, "refers to itself"),
        (int, "not a dataclass"),
        ("Order", "a log schema is a dataclass"),
    ],
)
def test_a_type_that_cannot_be_a_schema_is_refused_naming_the_field(tp: Any, words: str) -> None:
    with pytest.raises(SchemaError, match=words):
        schema_of(tp)


@pytest.mark.parametrize("tp", [OrderD, OrderS, OrderP])
def test_values_round_trip(tp: Any) -> None:
    codec = ValueCodec(tp)
    line = {OrderD: Line, OrderS: LineS, OrderP: LineP}[tp]
    value = tp(id=7, user="ann", amount=9.5, lines=[line(sku="x")], raw=b"\x00\xff", attrs={"a": 1})
    payload = codec.encode(value)
    assert codec.decode(payload) == value
    plain = plain_decoder(codec.schema)(payload)
    assert plain["lines"] == [{"sku": "x", "qty": 1}]
    assert plain["raw"] == b"\x00\xff" and plain["kind"] == "buy"


@pytest.mark.parametrize("tp", [OrderD, OrderS, OrderP])
def test_a_wrong_value_fails_naming_the_field(tp: Any) -> None:
    codec = ValueCodec(tp)
    with pytest.raises(InvalidArgumentError, match=f"records are {tp.__name__} values, not dict"):
        codec.encode({"id": 1})
    if tp is OrderP:
        bad = OrderP.model_construct(id="seven", user="ann", amount=1.0)  # skips validation
    else:
        bad = tp(id="seven", user="ann", amount=1.0)
    with pytest.raises(
        InvalidArgumentError, match=rf"{tp.__name__}\.id: Expected `int`, got `str`"
    ):
        codec.encode(bad)
    line = {OrderD: Line, OrderS: LineS, OrderP: LineP}[tp]
    if tp is OrderP:
        nested = OrderP.model_construct(
            id=1, user="a", amount=1.0, lines=[LineP.model_construct(sku=5, qty=1)]
        )
    else:
        nested = tp(id=1, user="a", amount=1.0, lines=[line(sku=5)])
    with pytest.raises(InvalidArgumentError, match=r"lines\[0\]\.sku"):
        codec.encode(nested)


def test_an_unencodable_value_fails_with_invalid_argument() -> None:
    codec = ValueCodec(OrderD)
    with pytest.raises(InvalidArgumentError, match="cannot be encoded"):
        codec.encode(OrderD(id=1, user=object(), amount=1.0))  # type: ignore[arg-type]


@dataclasses.dataclass
class OrderV1:
    id: int
    user: str
    amount: int


@dataclasses.dataclass
class OrderV2:
    id: int
    amount: float
    region: str = "eu"


def test_a_reader_of_another_version_takes_defaults_skips_removed_fields_and_widens() -> None:
    payload = ValueCodec(OrderV1).encode(OrderV1(id=1, user="ann", amount=3))
    assert ValueCodec(OrderV2).decode(payload) == OrderV2(id=1, amount=3.0, region="eu")
    back = ValueCodec(OrderV2).encode(OrderV2(id=2, amount=1.5))
    with pytest.raises(msgspec.ValidationError, match="amount"):
        ValueCodec(OrderV1).decode(back)  # (v1 reads no float: not forward compatible)
