"""The compatibility rules of log schemas (walkit._core.schema), against a table of changes:
one test per row, each checking every rule the row names.

A row is a change from an old version of a record type to a new one, and what each rule says
of it: ``OK``, or the field at fault with words the error must hold.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

import pytest

from walkit._core.schema import (
    Compatibility,
    RecordType,
    SchemaVersion,
    check_compatible,
    read_problems,
    register,
)
from walkit._core.schema_types import schema_of
from walkit.errors import IncompatibleSchemaError, SchemaError

OK = None
NO_DEFAULT: Any = dataclasses.MISSING


def record(*fields: tuple[str, Any] | tuple[str, Any, Any], name: str = "Order") -> RecordType:
    """The schema of a dataclass with these (name, type[, default]) fields."""
    specs: list[Any] = []
    for item in fields:
        if len(item) == 3:
            fname, tp, default = item
            if isinstance(default, list | dict):
                factory = (lambda d: lambda: type(d)(d))(default)
                specs.append((fname, tp, dataclasses.field(default_factory=factory)))
            else:
                specs.append((fname, tp, dataclasses.field(default=default)))
        else:
            specs.append(item)
    return schema_of(dataclasses.make_dataclass(name, specs, kw_only=True))


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Color2(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Address:
    city: str


@dataclasses.dataclass
class Address2:
    city: str
    zip: str


@dataclasses.dataclass
class Address3:
    city: str
    zip: str = ""


B, F, FU = "backward", "forward", "full"

#: (id, old, new, {rule: OK or (field, words)})
ROWS: list[tuple[str, RecordType, RecordType, dict[str, Any]]] = [
    (
        "field added with a default",
        record(("id", int)),
        record(("id", int), ("note", str, "")),
        {B: OK, F: OK, FU: OK},
    ),
    (
        "field added without a default",
        record(("id", int)),
        record(("id", int), ("email", str)),
        {B: ("email", "added without a default"), F: OK, FU: ("email", "added without")},
    ),
    (
        "field with a default removed",
        record(("id", int), ("note", str, "")),
        record(("id", int)),
        {B: OK, F: OK, FU: OK},
    ),
    (
        "field without a default removed",
        record(("id", int), ("user", str)),
        record(("id", int)),
        {B: OK, F: ("user", "removed, and version 1 has no default"), FU: ("user", "removed")},
    ),
    (
        "field renamed",
        record(("id", int), ("user", str)),
        record(("id", int), ("customer", str)),
        {B: ("customer", "added without a default"), F: ("user", "removed"), FU: ("customer", "")},
    ),
    (
        "field renamed, both with defaults",
        record(("id", int), ("user", str, "")),
        record(("id", int), ("customer", str, "")),
        {B: OK, F: OK, FU: OK},
    ),
    (
        "type widened (int to float)",
        record(("amount", int)),
        record(("amount", float)),
        {B: OK, F: ("amount", "widened from long to double"), FU: ("amount", "widened")},
    ),
    (
        "type narrowed (float to int)",
        record(("amount", float)),
        record(("amount", int)),
        {B: ("amount", "narrowed from double to long"), F: OK, FU: ("amount", "narrowed")},
    ),
    (
        "type changed (str to int)",
        record(("user", str)),
        record(("user", int)),
        {B: ("user", "changed type from string to long"), F: ("user", "from string to long")},
    ),
    (
        "optional to required",
        record(("note", str | None, None)),
        record(("note", str, "")),
        {
            B: ("note", "went from optional to required"),
            F: OK,
            FU: ("note", "optional to required"),
        },
    ),
    (
        "required to optional",
        record(("note", str)),
        record(("note", str | None, None)),
        {
            B: OK,
            F: ("note", "went from required to optional"),
            FU: ("note", "required to optional"),
        },
    ),
    (
        "nested field added without a default",
        record(("address", Address)),
        record(("address", Address2)),
        {B: ("address.zip", "added without a default"), F: OK},
    ),
    (
        "nested field added with a default",
        record(("address", Address)),
        record(("address", Address3)),
        {B: OK, F: OK, FU: OK},
    ),
    (
        "array items widened",
        record(("amounts", list[int])),
        record(("amounts", list[float])),
        {B: OK, F: ("amounts[]", "widened")},
    ),
    (
        "enum symbol removed",
        record(("color", Color)),
        record(("color", Color2)),
        {B: ("color", "lost enum symbols that version 1 may hold: green"), F: OK},
    ),
    (
        "anything goes under none",
        record(("id", int)),
        record(("id", str), ("email", str)),
        {"none": OK, B: ("id", "changed type")},
    ),
]


@pytest.mark.parametrize(("old", "new", "expect"), [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_rule_table(old: RecordType, new: RecordType, expect: dict[str, Any]) -> None:
    versions = [SchemaVersion(1, old)]
    for rule_name, expected in expect.items():
        rule = Compatibility(rule_name)
        if expected is OK:
            check_compatible(new, versions, rule, "orders")
            # Transitive with one old version: the same answer.
            if rule is not Compatibility.NONE:
                check_compatible(new, versions, Compatibility(f"{rule_name}_transitive"))
            continue
        field, words = expected
        with pytest.raises(IncompatibleSchemaError) as caught:
            check_compatible(new, versions, rule, "orders")
        error = caught.value
        assert error.field == field
        assert error.rule == rule_name
        assert error.version == 1
        message = str(error)
        assert words in message
        assert f"not {rule_name} compatible with version 1" in message
        assert message.startswith("log orders: ")


def test_transitive_rules_check_every_version_not_just_the_latest() -> None:
    v1 = record(("id", int))
    v2 = record(("id", int), ("region", str, "eu"))
    v3 = record(("id", int), ("region", str))  # the default is dropped again
    versions = [SchemaVersion(1, v1), SchemaVersion(2, v2)]
    check_compatible(v3, versions, Compatibility.BACKWARD)  # v3 reads v2: region is there
    with pytest.raises(IncompatibleSchemaError) as caught:
        check_compatible(v3, versions, Compatibility.BACKWARD_TRANSITIVE)
    assert (caught.value.field, caught.value.version) == ("region", 1)
    assert caught.value.rule == "backward_transitive"


def test_forward_transitive_checks_old_readers_of_every_version() -> None:
    v1 = record(("id", int), ("user", str))
    v2 = record(("id", int), ("user", str, ""))
    v3 = record(("id", int))  # user removed: v2 readers have a default, v1 readers do not
    versions = [SchemaVersion(1, v1), SchemaVersion(2, v2)]
    check_compatible(v3, versions, Compatibility.FORWARD)
    with pytest.raises(IncompatibleSchemaError, match="version 1 has no default") as caught:
        check_compatible(v3, versions, Compatibility.FULL_TRANSITIVE)
    assert caught.value.version == 1


def test_register_numbers_new_schemas_and_keeps_known_ones() -> None:
    v1 = record(("id", int))
    v2 = record(("id", int), ("note", str, ""))
    versions, number = register(v1, (), Compatibility.BACKWARD, time_ms=5)
    assert number == 1 and versions[0].time_ms == 5
    versions, number = register(v2, versions, Compatibility.FULL)
    assert number == 2 and versions[1].compatibility is Compatibility.FULL
    again, number = register(v1, versions, Compatibility.BACKWARD)
    assert number == 1 and again == versions  # an older version is reused as it is
    with pytest.raises(IncompatibleSchemaError):
        register(record(("id", str)), versions, Compatibility.BACKWARD)


def test_versions_round_trip_through_json() -> None:
    schema = record(
        ("id", int),
        ("tags", list[str], []),
        ("attrs", dict[str, float], {}),
        ("note", str | None, None),
        ("color", Color, Color.RED),
        ("raw", bytes, b"\x00"),
        ("address", Address),
    )
    version = SchemaVersion(3, schema, Compatibility.FULL_TRANSITIVE, 1700000000000)
    doc = version.to_json()
    assert SchemaVersion.from_json(doc) == version
    fields = {f["name"]: f for f in doc["schema"]["fields"]}
    assert fields["note"] == {"name": "note", "type": ["null", "string"], "default": None}
    assert fields["color"]["type"] == {"type": "enum", "name": "Color", "symbols": ["red", "green"]}
    assert fields["tags"]["default"] == []
    assert "default" not in fields["id"]


@pytest.mark.parametrize(
    ("doc", "words"),
    [
        ("long", "a log schema is a record"),
        (
            {"type": "record", "name": "R", "fields": [{"name": "a", "type": "int32"}]},
            "unknown type",
        ),
        (
            {"type": "record", "name": "R", "fields": [{"name": "a", "type": ["long", "string"]}]},
            "union",
        ),
        ({"type": "record", "name": "R", "fields": [{"name": "a"}]}, "a type is a name"),
        (
            {"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}] * 2},
            "repeated",
        ),
        ({"type": "record", "name": "", "fields": []}, "a name"),
        ({"type": "record", "name": "R", "fields": "a"}, "fields must be a list"),
        (
            {
                "type": "record",
                "name": "R",
                "fields": [{"name": "e", "type": {"type": "enum", "name": "E", "symbols": []}}],
            },
            "symbols",
        ),
    ],
)
def test_a_malformed_stored_schema_is_refused_with_what_is_wrong(doc: Any, words: str) -> None:
    with pytest.raises(SchemaError, match=words):
        SchemaVersion.from_json({"version": 1, "schema": doc, "encoding": "msgpack-map"})


def test_a_deeply_nested_stored_schema_is_refused() -> None:
    doc: Any = "long"
    for _ in range(40):
        doc = {"type": "array", "items": doc}
    with pytest.raises(SchemaError, match="deeper than"):
        SchemaVersion.from_json(
            {
                "version": 1,
                "schema": {"type": "record", "name": "R", "fields": [{"name": "a", "type": doc}]},
                "encoding": "msgpack-map",
            }
        )


def test_read_problems_lists_every_field_at_fault() -> None:
    old = record(("a", int), ("b", str))
    new = record(("a", str), ("b", str), ("c", int))
    assert [p.field for p in read_problems(new, old)] == ["a", "c"]


def test_a_version_in_an_unknown_encoding_is_refused_naming_it() -> None:
    doc = SchemaVersion(1, record(("id", int))).to_json()
    doc["encoding"] = "avro-binary"
    with pytest.raises(SchemaError, match="'avro-binary'; this walkit reads msgpack-map"):
        SchemaVersion.from_json(doc)
