"""Typed logs on disk: log metadata format 5 (schema versions, each ledger's version) and the
values' encoding (``msgpack-map``). The golden files read, today's code writes the same bytes,
and malformed nodes are refused with what is wrong."""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path
from typing import Any

import pytest

from walkit._core.log_metadata import FORMAT_VERSION_SCHEMAS, LogLedger, LogMetadata
from walkit._core.log_position import LogPosition
from walkit._core.schema_codec import ValueCodec, plain_decoder
from walkit._core.schema_types import schema_of
from walkit.errors import InvalidMetadataError

HERE = Path(__file__).resolve().parent / "schema"
GOLDEN = HERE / "log_metadata_v5.json"


class Kind(enum.Enum):
    BUY = "buy"
    SELL = "sell"


@dataclasses.dataclass
class Address:
    city: str
    zip: str = ""


@dataclasses.dataclass
class OrderV1:
    id: int
    user: str
    amount: int


@dataclasses.dataclass
class OrderV2:
    id: int
    user: str
    amount: float
    note: str | None = None
    tags: list[str] = dataclasses.field(default_factory=list)
    attrs: dict[str, bytes] = dataclasses.field(default_factory=dict)
    kind: Kind = Kind.BUY
    ship_to: Address | None = None
    paid: bool = False


def _golden() -> LogMetadata:
    return LogMetadata.from_bytes("orders", GOLDEN.read_bytes())


def test_format_5_reads_and_writes_the_same_bytes() -> None:
    data = GOLDEN.read_bytes()
    md = _golden()
    assert md.format == FORMAT_VERSION_SCHEMAS == 5
    assert [lg.schema for lg in md.ledgers] == [0, 1, 2]
    assert [v.version for v in md.schemas] == [1, 2]
    assert md.to_bytes() == data


def test_the_golden_schemas_are_those_of_the_types() -> None:
    md = _golden()
    assert md.schemas[0].schema.fields == schema_of(OrderV1).fields
    assert md.schemas[1].schema.to_json()["fields"] == schema_of(OrderV2).to_json()["fields"]


def test_values_read_and_write_the_same_bytes() -> None:
    md = _golden()
    v2 = OrderV2(
        id=7,
        user="ann",
        amount=9.5,
        tags=["a"],
        attrs={"k": b"\x00\x01"},
        kind=Kind.SELL,
        ship_to=Address("Lyon", "69001"),
        paid=True,
    )
    golden_v2 = (HERE / "value_v2.bin").read_bytes()
    assert ValueCodec(OrderV2).encode(v2) == golden_v2
    assert ValueCodec(OrderV2).decode(golden_v2) == v2
    golden_v1 = (HERE / "value_v1.bin").read_bytes()
    assert ValueCodec(OrderV1).encode(OrderV1(6, "bob", 3)) == golden_v1
    # A version 1 record read with version 2: defaults, and the int widened.
    assert ValueCodec(OrderV2).decode(golden_v1) == OrderV2(id=6, user="bob", amount=3.0)
    assert plain_decoder(md.schemas[1].schema)(golden_v1)["kind"] == "buy"


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(GOLDEN.read_bytes())
    return doc


def _mutated(change: Any) -> bytes:
    doc = _doc()
    change(doc)
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (lambda d: d.update(format=4), "format 4 with 2 schema versions"),
        (lambda d: d.update(schemas=[]), "format 5 with 0 schema versions"),
        (lambda d: d["ledgers"][2].update(schema=3), "names schema version 3"),
        (lambda d: d["schemas"][1].update(version=3), "out of order or missing"),
        (lambda d: d["schemas"][1].update(schema=d["schemas"][0]["schema"]), "registered twice"),
        (lambda d: d["schemas"][0].update(encoding="avro"), "values encoded as 'avro'"),
        (lambda d: d["schemas"][0]["schema"].update(type="long"), "a bad schema version"),
        (lambda d: d.update(schemas={}), "schemas is not a list"),
    ],
)
def test_a_malformed_typed_node_is_refused(change: Any, words: str) -> None:
    with pytest.raises(InvalidMetadataError, match=words):
        LogMetadata.from_bytes("orders", _mutated(change))


def test_transitions_keep_the_versions_and_each_ledger_its_own() -> None:
    md = _golden()
    rolled, new = md.after_roll(md.ledgers[-1], 20)
    assert new == LogLedger(5, 20, 2)  # a roll keeps its writer's version
    taken = rolled.after_takeover({14: 3, 20: -1}, 21, schema=1).metadata
    assert [lg.schema for lg in taken.ledgers] == [0, 1, 2, 1]
    linked = taken.after_link({14: 3, 21: 0}, [30, 31], schema=2).metadata
    assert [lg.schema for lg in linked.ledgers][-2:] == [2, 2]
    cut = linked.truncated_at(LogPosition(4, 0)).metadata
    assert cut.schemas == md.schemas  # versions outlive the ledgers written with them
    assert LogMetadata.from_bytes("orders", cut.to_bytes()) == cut
