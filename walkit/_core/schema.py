"""Log schemas: the model of a typed log's value, its JSON form, and the compatibility rules.

A typed log's records are values of one record type, which evolves. Each version of it is kept
in the log's metadata in Avro's JSON notation (the Avro 1.11 specification, "Schema
Declaration"), restricted to what a Python dataclass, ``msgspec.Struct`` or pydantic model
says::

    {"type": "record", "name": "Order", "fields": [
        {"name": "id", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": null},
        {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []}]}

Types: ``boolean``, ``long`` (int), ``double`` (float), ``string``, ``bytes``, ``array``
(list, tuple), ``map`` (dict with str keys), a union ``["null", T]`` (``T | None``), a nested
``record``, and an ``enum`` (an ``enum.Enum`` of str values; its symbols are the values).

Values are resolved **by field name**, as Avro's schema resolution does: a reader's field
absent from what was written takes the reader's default, a written field the reader lacks is
skipped, and a ``long`` widens to a ``double``. :func:`read_problems` says where a reader's
schema cannot read what a writer's schema wrote, and :func:`check_compatible` applies the
rules of Confluent's Schema Registry and Pulsar (PIP-44):

============================  ===============================================================
``backward``                  the new schema reads what the latest version wrote
``forward``                   the latest version reads what the new schema writes
``full``                      both
``*_transitive``              the same against every version, not just the latest
``none``                      no check
============================  ===============================================================

Pure code: no I/O, no third-party imports (``walkit._core.schema_types`` derives a schema
from a Python type; ``walkit._core.schema_codec`` encodes values).
"""

from __future__ import annotations

import enum
import json
from collections.abc import Iterator, Sequence
from typing import Any, Final, TypeAlias, final

import attrs

from walkit.errors import IncompatibleSchemaError, SchemaError

__all__ = [
    "ENCODING",
    "ENCODINGS",
    "MAX_DEPTH",
    "PRIMITIVES",
    "ArrayType",
    "Compatibility",
    "EnumType",
    "Field",
    "MapType",
    "NullableType",
    "Primitive",
    "Problem",
    "ProblemKind",
    "RecordType",
    "SchemaType",
    "SchemaVersion",
    "canonical_json",
    "check_compatible",
    "describe",
    "read_problems",
    "register",
    "schema_from_json",
    "type_from_json",
    "version_of",
]

#: The primitive types a log schema may use (Avro's names).
PRIMITIVES: Final = ("boolean", "long", "double", "string", "bytes")
#: Widenings a reader applies (Avro's promotions that Python's types keep).
_PROMOTIONS: Final = frozenset({("long", "double")})
#: How a typed log's values are encoded: MessagePack maps keyed by field name
#: (``walkit._core.schema_codec``). Each schema version says its own, so that another
#: encoding can come as a new name that older readers refuse.
ENCODING: Final = "msgpack-map"
#: The encodings this walkit reads.
ENCODINGS: Final = (ENCODING,)
#: The deepest nesting of types a schema may have (a bound on what a stored schema makes a
#: reader recurse through).
MAX_DEPTH: Final = 32


class Compatibility(enum.Enum):
    """The log option ``schema_compatibility``: what a new schema version must keep."""

    BACKWARD = "backward"
    BACKWARD_TRANSITIVE = "backward_transitive"
    FORWARD = "forward"
    FORWARD_TRANSITIVE = "forward_transitive"
    FULL = "full"
    FULL_TRANSITIVE = "full_transitive"
    NONE = "none"

    @property
    def transitive(self) -> bool:
        return self.value.endswith("_transitive")

    @property
    def backward(self) -> bool:
        """The new schema must read old data."""
        return self.value.startswith(("backward", "full"))

    @property
    def forward(self) -> bool:
        """Old schemas must read new data."""
        return self.value.startswith(("forward", "full"))


@final
@attrs.frozen
class Primitive:
    name: str

    def to_json(self) -> Any:
        return self.name

    def describe(self) -> str:
        return self.name


@final
@attrs.frozen
class ArrayType:
    items: SchemaType

    def to_json(self) -> Any:
        return {"type": "array", "items": self.items.to_json()}

    def describe(self) -> str:
        return f"array of {self.items.describe()}"


@final
@attrs.frozen
class MapType:
    values: SchemaType

    def to_json(self) -> Any:
        return {"type": "map", "values": self.values.to_json()}

    def describe(self) -> str:
        return f"map of {self.values.describe()}"


@final
@attrs.frozen
class NullableType:
    """``["null", T]``: T or null (Python's ``T | None``)."""

    inner: SchemaType

    def to_json(self) -> Any:
        return ["null", self.inner.to_json()]

    def describe(self) -> str:
        return f"optional {self.inner.describe()}"


@final
@attrs.frozen
class EnumType:
    name: str
    symbols: tuple[str, ...]

    def to_json(self) -> Any:
        return {"type": "enum", "name": self.name, "symbols": list(self.symbols)}

    def describe(self) -> str:
        return f"enum {self.name}"


@final
@attrs.frozen
class Field:
    """A record's field; ``default_json`` is its default as canonical JSON text (None: the
    field has no default, so a reader needs it written)."""

    name: str
    type: SchemaType
    default_json: str | None = None

    @property
    def has_default(self) -> bool:
        return self.default_json is not None

    @property
    def default(self) -> Any:
        return None if self.default_json is None else json.loads(self.default_json)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"name": self.name, "type": self.type.to_json()}
        if self.default_json is not None:
            doc["default"] = json.loads(self.default_json)
        return doc


@final
@attrs.frozen
class RecordType:
    """A record: named fields, in order. A log's schema is one."""

    name: str
    fields: tuple[Field, ...]

    def field(self, name: str) -> Field | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None

    def to_json(self) -> dict[str, Any]:
        return {"type": "record", "name": self.name, "fields": [f.to_json() for f in self.fields]}

    def describe(self) -> str:
        return f"record {self.name}"

    def canonical(self) -> str:
        """The schema as compact JSON with sorted keys: two schemas are the same version when
        this is equal."""
        return canonical_json(self.to_json())


SchemaType: TypeAlias = Primitive | ArrayType | MapType | NullableType | EnumType | RecordType


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# --- from JSON (what the metadata holds) -----------------------------------------------------


def schema_from_json(doc: Any) -> RecordType:
    """A log schema from its JSON form; SchemaError naming what is wrong."""
    found = type_from_json(doc)
    if not isinstance(found, RecordType):
        raise SchemaError(f"a log schema is a record, not {found.describe()}")
    return found


def type_from_json(doc: Any, path: str = "", depth: int = 0) -> SchemaType:
    if depth > MAX_DEPTH:
        raise SchemaError(f"schema nested deeper than {MAX_DEPTH} at {path or 'the top'}")
    where = f" (at {path})" if path else ""
    if isinstance(doc, str):
        if doc not in PRIMITIVES:
            raise SchemaError(f"unknown type {doc!r}{where}; known: {', '.join(PRIMITIVES)}")
        return Primitive(doc)
    if isinstance(doc, list):
        if len(doc) != 2 or "null" not in doc or doc[0] == doc[1]:
            raise SchemaError(f'a union must be ["null", T]{where}, not {doc!r}')
        other = doc[1] if doc[0] == "null" else doc[0]
        inner = type_from_json(other, path, depth + 1)
        if isinstance(inner, NullableType):
            raise SchemaError(f"nested unions{where}")
        return NullableType(inner)
    if not isinstance(doc, dict):
        raise SchemaError(f"a type is a name, a list or an object{where}, not {doc!r}")
    kind = doc.get("type")
    if kind == "array":
        return ArrayType(type_from_json(doc.get("items"), f"{path}[]", depth + 1))
    if kind == "map":
        return MapType(type_from_json(doc.get("values"), f"{path}{{}}", depth + 1))
    if kind == "enum":
        name = _name(doc.get("name"), path)
        symbols = doc.get("symbols")
        if (
            not isinstance(symbols, list)
            or not symbols
            or not all(isinstance(s, str) for s in symbols)
            or len(set(symbols)) != len(symbols)
        ):
            raise SchemaError(f"enum {name}{where}: symbols must be distinct strings")
        return EnumType(name, tuple(symbols))
    if kind == "record":
        name = _name(doc.get("name"), path)
        items = doc.get("fields")
        if not isinstance(items, list):
            raise SchemaError(f"record {name}{where}: fields must be a list")
        fields: list[Field] = []
        seen: set[str] = set()
        for item in items:
            if not isinstance(item, dict):
                raise SchemaError(f"record {name}{where}: a field is an object, not {item!r}")
            fname = _name(item.get("name"), path)
            if fname in seen:
                raise SchemaError(f"record {name}{where}: field {fname!r} repeated")
            seen.add(fname)
            sub = f"{path}.{fname}" if path else fname
            ftype = type_from_json(item.get("type"), sub, depth + 1)
            default = None
            if "default" in item:
                default = canonical_json(item["default"])
            fields.append(Field(fname, ftype, default))
        return RecordType(name, tuple(fields))
    if isinstance(kind, str | list | dict) and kind not in ("array", "map", "enum", "record"):
        return type_from_json(kind, path, depth + 1)  # {"type": "long"}: Avro allows it
    raise SchemaError(f"unknown type {kind!r}{where}")


def _name(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value or len(value) > 255:
        where = f" at {path}" if path else ""
        raise SchemaError(f"a name{where} must be a string of 1-255 characters, not {value!r}")
    return value


# --- resolution: can a reader's schema read what a writer's wrote? ---------------------------


class ProblemKind(enum.Enum):
    #: The reader needs a field (it has no default there) that the writer does not write.
    MISSING = "missing"
    #: The field's types differ in a way the reader cannot resolve.
    TYPE = "type"
    #: The writer may write null where the reader's type takes none.
    NULL = "null"
    #: The writer's enum has symbols the reader's lacks.
    SYMBOLS = "symbols"


@final
@attrs.frozen
class Problem:
    """Why a reader's schema cannot read a writer's, at one field (dotted path; ``[]`` for an
    array's items, ``{}`` for a map's values)."""

    field: str
    kind: ProblemKind
    reader: str = ""
    writer: str = ""


def read_problems(reader: RecordType, writer: RecordType) -> list[Problem]:
    """Where ``reader`` cannot read a value that ``writer`` wrote (empty: it always can)."""
    return list(_record_problems(reader, writer, ""))


def _record_problems(reader: RecordType, writer: RecordType, path: str) -> Iterator[Problem]:
    for f in reader.fields:
        sub = f"{path}.{f.name}" if path else f.name
        written = writer.field(f.name)
        if written is None:
            if not f.has_default:
                yield Problem(sub, ProblemKind.MISSING)
            continue
        yield from _type_problems(f.type, written.type, sub)


def _type_problems(reader: SchemaType, writer: SchemaType, path: str) -> Iterator[Problem]:
    if isinstance(reader, NullableType):
        inner = writer.inner if isinstance(writer, NullableType) else writer
        yield from _type_problems(reader.inner, inner, path)
        return
    if isinstance(writer, NullableType):
        yield Problem(path, ProblemKind.NULL, reader.describe(), writer.describe())
        return
    if isinstance(reader, Primitive) and isinstance(writer, Primitive):
        if reader.name != writer.name and (writer.name, reader.name) not in _PROMOTIONS:
            yield Problem(path, ProblemKind.TYPE, reader.name, writer.name)
        return
    if isinstance(reader, ArrayType) and isinstance(writer, ArrayType):
        yield from _type_problems(reader.items, writer.items, f"{path}[]")
        return
    if isinstance(reader, MapType) and isinstance(writer, MapType):
        yield from _type_problems(reader.values, writer.values, f"{path}{{}}")
        return
    if isinstance(reader, RecordType) and isinstance(writer, RecordType):
        yield from _record_problems(reader, writer, path)
        return
    if isinstance(reader, EnumType) and isinstance(writer, EnumType):
        lost = [s for s in writer.symbols if s not in reader.symbols]
        if lost:
            yield Problem(path, ProblemKind.SYMBOLS, ", ".join(lost))
        return
    yield Problem(path, ProblemKind.TYPE, reader.describe(), writer.describe())


# --- versions and the compatibility rules ------------------------------------------------------


@final
@attrs.frozen
class SchemaVersion:
    """A registered version of a log's schema: its number (1, 2, ...), the schema, the rule
    it was checked under, when it was registered (wall-clock ms; 0: unknown), and how its
    values are encoded (:data:`ENCODINGS`)."""

    version: int
    schema: RecordType
    compatibility: Compatibility = Compatibility.BACKWARD
    time_ms: int = 0
    encoding: str = ENCODING

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "schema": self.schema.to_json(),
            "compatibility": self.compatibility.value,
            "time_ms": self.time_ms,
            "encoding": self.encoding,
        }

    @classmethod
    def from_json(cls, doc: Any) -> SchemaVersion:
        """A version as the log's metadata holds it; SchemaError if it is malformed."""
        if not isinstance(doc, dict):
            raise SchemaError(f"a schema version is an object, not {doc!r}")
        version, time_ms = doc.get("version"), doc.get("time_ms", 0)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise SchemaError(f"bad schema version number {version!r}")
        if not isinstance(time_ms, int) or isinstance(time_ms, bool) or time_ms < 0:
            raise SchemaError(f"schema version {version}: bad time_ms {time_ms!r}")
        try:
            rule = Compatibility(doc.get("compatibility", "backward"))
        except ValueError:
            raise SchemaError(
                f"schema version {version}: unknown compatibility {doc.get('compatibility')!r}"
            ) from None
        encoding = doc.get("encoding")
        if encoding not in ENCODINGS:
            raise SchemaError(
                f"schema version {version}: values encoded as {encoding!r}; this walkit reads "
                f"{', '.join(ENCODINGS)} (a newer walkit wrote it)"
            )
        return cls(version, schema_from_json(doc.get("schema")), rule, time_ms, encoding)


def check_compatible(
    new: RecordType, versions: Sequence[SchemaVersion], rule: Compatibility, log: str = ""
) -> None:
    """IncompatibleSchemaError unless ``new`` may follow ``versions`` (oldest first) under
    ``rule``; the error names the first field at fault, the rule and the version."""
    if rule is Compatibility.NONE or not versions:
        return
    against = versions if rule.transitive else versions[-1:]
    for old in reversed(against):  # (the latest first: the most likely to matter)
        if rule.backward:
            problems = read_problems(new, old.schema)
            if problems:
                raise _incompatible(problems, old.version, rule, log, new_reads=True)
        if rule.forward:
            problems = read_problems(old.schema, new)
            if problems:
                raise _incompatible(problems, old.version, rule, log, new_reads=False)


def _incompatible(
    problems: list[Problem], version: int, rule: Compatibility, log: str, *, new_reads: bool
) -> IncompatibleSchemaError:
    first = problems[0]
    what = describe(first, version, new_reads=new_reads)
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    who = f"log {log}: " if log else ""
    direction = (
        f"it must read what version {version} wrote"
        if new_reads
        else f"readers of version {version} must read what it writes"
    )
    return IncompatibleSchemaError(
        f"{who}the new schema is not {rule.value} compatible with version {version} "
        f"({direction}): {what}{more}",
        field=first.field,
        rule=rule.value,
        version=version,
    )


def describe(problem: Problem, version: int, *, new_reads: bool) -> str:
    """``problem`` in words, from the point of view of a change from version ``version`` to
    a new schema (the reader when ``new_reads``, else the writer)."""
    name = f"field {problem.field!r}"
    if problem.kind is ProblemKind.MISSING:
        if new_reads:
            return f"{name} was added without a default"
        return f"{name} was removed, and version {version} has no default for it"
    if problem.kind is ProblemKind.NULL:
        if new_reads:
            return f"{name} went from optional to required (version {version} may hold null)"
        return f"{name} went from required to optional (version {version} readers take no null)"
    if problem.kind is ProblemKind.SYMBOLS:
        if new_reads:
            return f"{name} lost enum symbols that version {version} may hold: {problem.reader}"
        return f"{name} gained enum symbols that version {version} readers lack: {problem.reader}"
    old, new = (problem.writer, problem.reader) if new_reads else (problem.reader, problem.writer)
    if (old, new) == ("double", "long"):
        change = "was narrowed from double to long"
    elif (old, new) in _PROMOTIONS:
        change = "was widened from long to double"
    else:
        change = f"changed type from {old} to {new}"
    return f"{name} {change}"


def version_of(schema: RecordType, versions: Sequence[SchemaVersion]) -> SchemaVersion | None:
    """The registered version whose schema is ``schema`` (the same canonical JSON), if any."""
    text = schema.canonical()
    for known in versions:
        if known.schema.canonical() == text:
            return known
    return None


def register(
    schema: RecordType,
    versions: Sequence[SchemaVersion],
    rule: Compatibility,
    *,
    time_ms: int = 0,
    log: str = "",
) -> tuple[tuple[SchemaVersion, ...], int]:
    """The versions with ``schema`` registered, and its number. A schema already registered
    keeps its number, unchecked (as Confluent's registry and Pulsar do: a writer that rolls
    back to an older version of its type writes that version); a new one is checked under
    ``rule`` (IncompatibleSchemaError) and numbered after the latest."""
    known = version_of(schema, versions)
    if known is not None:
        return tuple(versions), known.version
    check_compatible(schema, versions, rule, log)
    number = versions[-1].version + 1 if versions else 1
    return (*versions, SchemaVersion(number, schema, rule, time_ms)), number
