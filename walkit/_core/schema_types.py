"""From a Python type to a log schema, and back.

:func:`schema_of` reads a dataclass, a ``msgspec.Struct`` or a pydantic model (through
``msgspec.inspect``, and pydantic's own ``model_fields``) and says its
:class:`~walkit._core.schema.RecordType`; a field of a type a log schema cannot express
raises SchemaError naming the field. :func:`struct_of` goes the other way: a ``msgspec.Struct``
class made from a stored schema, for the readers that have no Python type of their own (the
command line, Spark) and to check pydantic values.

Needs ``msgspec`` (the ``schema`` extra).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from typing import Any, Final, Literal

import msgspec
import msgspec.inspect as mi

from walkit._core.schema import (
    ArrayType,
    EnumType,
    Field,
    MapType,
    NullableType,
    Primitive,
    RecordType,
    SchemaType,
    canonical_json,
)
from walkit.errors import SchemaError

__all__ = ["is_pydantic_model", "schema_of", "struct_of"]

_PRIMITIVES: Final[dict[type[mi.Type], str]] = {
    mi.BoolType: "boolean",
    mi.IntType: "long",
    mi.FloatType: "double",
    mi.StrType: "string",
    mi.BytesType: "bytes",
    mi.ByteArrayType: "bytes",
}
_SUPPORTED: Final = (
    "bool, int, float, str, bytes, list[T], tuple[T, ...], dict[str, T], T | None, "
    "an enum.Enum of str values, and nested dataclasses, msgspec Structs or pydantic models"
)


def is_pydantic_model(tp: object) -> bool:
    """Whether ``tp`` is a pydantic (v2) model class, without importing pydantic."""
    return isinstance(tp, type) and hasattr(tp, "model_fields") and hasattr(tp, "model_validate")


def schema_of(tp: object) -> RecordType:
    """The log schema of ``tp`` (a dataclass, msgspec Struct or pydantic model class);
    SchemaError when it is none of those or a field cannot be expressed."""
    if not isinstance(tp, type):
        raise SchemaError(
            f"a log schema is a dataclass, msgspec.Struct or pydantic model class, not {tp!r}"
        )
    if is_pydantic_model(tp):
        return _pydantic_record(tp, "", ())
    try:
        info = mi.type_info(tp)
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"{tp.__name__} cannot be a log schema: {exc}") from None
    if not isinstance(info, mi.DataclassType | mi.StructType):
        raise SchemaError(
            f"{tp.__name__} cannot be a log schema: it is not a dataclass, msgspec.Struct "
            "or pydantic model"
        )
    return _record(info, "", ())


def _record(
    info: mi.DataclassType | mi.StructType, path: str, seen: tuple[type, ...]
) -> RecordType:
    cls = info.cls
    where = f" (field {path!r})" if path else ""
    if cls in seen:
        raise SchemaError(
            f"{cls.__name__}{where} refers to itself: recursive schemas are not supported"
        )
    if isinstance(info, mi.StructType):
        if info.array_like:
            raise SchemaError(
                f"{cls.__name__}{where}: an array_like Struct encodes its fields by position; "
                "a log schema resolves them by name (drop array_like)"
            )
        if info.tag_field is not None:
            raise SchemaError(f"{cls.__name__}{where}: tagged Structs are not supported")
        if info.forbid_unknown_fields:
            raise SchemaError(
                f"{cls.__name__}{where}: forbid_unknown_fields would refuse records written "
                "with a field this version removed (drop it)"
            )
    fields = []
    for f in info.fields:
        sub = f"{path}.{f.encode_name}" if path else f.encode_name
        ftype = _type(f.type, sub, (*seen, cls))
        default = None
        if not f.required:
            value = f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
            default = _default_json(value, sub)
        fields.append(Field(f.encode_name, ftype, default))
    return RecordType(cls.__name__, tuple(fields))


def _pydantic_record(cls: type, path: str, seen: tuple[type, ...]) -> RecordType:
    where = f" (field {path!r})" if path else ""
    if cls in seen:
        raise SchemaError(
            f"{cls.__name__}{where} refers to itself: recursive schemas are not supported"
        )
    fields = []
    model_fields: dict[str, Any] = cls.model_fields  # type: ignore[attr-defined]  # (a pydantic model: checked by the caller)
    for name, info in model_fields.items():
        wire = info.alias or name
        sub = f"{path}.{wire}" if path else wire
        ftype = _annotation(info.annotation, sub, (*seen, cls))
        default = None
        if not info.is_required():
            value = info.get_default(call_default_factory=True)
            default = _default_json(value, sub)
        fields.append(Field(wire, ftype, default))
    return RecordType(cls.__name__, tuple(fields))


def _annotation(annotation: Any, path: str, seen: tuple[type, ...]) -> SchemaType:
    if is_pydantic_model(annotation):
        return _pydantic_record(annotation, path, seen)
    try:
        info = mi.type_info(annotation)
    except (TypeError, ValueError) as exc:
        raise SchemaError(f"field {path!r}: {exc}") from None
    return _type(info, path, seen)


def _type(info: mi.Type, path: str, seen: tuple[type, ...]) -> SchemaType:
    primitive = _PRIMITIVES.get(type(info))
    if primitive is not None:
        return Primitive(primitive)
    if isinstance(info, mi.ListType | mi.VarTupleType):
        return ArrayType(_type(info.item_type, f"{path}[]", seen))
    if isinstance(info, mi.DictType):
        if not isinstance(info.key_type, mi.StrType):
            raise SchemaError(f"field {path!r}: a dict's keys must be str in a log schema")
        return MapType(_type(info.value_type, f"{path}{{}}", seen))
    if isinstance(info, mi.UnionType):
        others = [t for t in info.types if not isinstance(t, mi.NoneType)]
        if len(others) == 1 and len(others) < len(info.types):
            inner = _type(others[0], path, seen)
            if isinstance(inner, NullableType):
                return inner
            return NullableType(inner)
        raise SchemaError(
            f"field {path!r}: a union in a log schema is T | None (one type and None)"
        )
    if isinstance(info, mi.EnumType):
        values = [member.value for member in info.cls]
        if not all(isinstance(v, str) for v in values):
            raise SchemaError(f"field {path!r}: an enum in a log schema has str values")
        return EnumType(info.cls.__name__, tuple(values))
    if isinstance(info, mi.DataclassType | mi.StructType):
        return _record(info, path, seen)
    if isinstance(info, mi.CustomType) and is_pydantic_model(info.cls):
        return _pydantic_record(info.cls, path, seen)
    shown = getattr(info, "cls", type(info).__name__.removesuffix("Type").lower())
    name = getattr(shown, "__name__", shown)
    raise SchemaError(
        f"field {path!r}: type {name} is not supported in a log schema ({_SUPPORTED})"
    )


def _default_json(value: Any, path: str) -> str:
    try:
        plain = msgspec.to_builtins(value)
    except (TypeError, ValueError) as exc:
        raise SchemaError(
            f"field {path!r}: its default {value!r} cannot be stored: {exc}"
        ) from None
    return canonical_json(plain)


# --- from a schema to a msgspec Struct --------------------------------------------------------


@functools.lru_cache(maxsize=256)
def struct_of(schema: RecordType) -> type[msgspec.Struct]:
    """A ``msgspec.Struct`` class with ``schema``'s fields, types and defaults (enums as
    their str symbols): decoding a value into it resolves the value against ``schema``."""
    fields: list[tuple[str, Any, Any]] = []
    for f in schema.fields:
        hint = _hint(f.type)
        if f.has_default:
            fields.append((f.name, hint, _default_of(f, hint)))
        else:
            fields.append((f.name, hint, msgspec.NODEFAULT))
    required = [(n, h) for n, h, d in fields if d is msgspec.NODEFAULT]
    optional = [(n, h, d) for n, h, d in fields if d is not msgspec.NODEFAULT]
    return msgspec.defstruct(schema.name, [*required, *optional], kw_only=True)


def _hint(tp: SchemaType) -> Any:
    if isinstance(tp, Primitive):
        return {"boolean": bool, "long": int, "double": float, "string": str, "bytes": bytes}[
            tp.name
        ]
    if isinstance(tp, ArrayType):
        return list[_hint(tp.items)]  # type: ignore[misc]  # (built at run time)
    if isinstance(tp, MapType):
        return dict[str, _hint(tp.values)]  # type: ignore[misc]  # (built at run time)
    if isinstance(tp, NullableType):
        return _hint(tp.inner) | None
    if isinstance(tp, EnumType):
        return Literal[tp.symbols]  # (a Literal of the symbols)
    return struct_of(tp)


def _default_of(field: Field, hint: Any) -> Any:
    """The field's default as its Struct takes it: a factory for anything mutable."""
    try:
        value = msgspec.convert(field.default, hint)
    except msgspec.ValidationError as exc:
        raise SchemaError(
            f"field {field.name!r}: its default does not match its type: {exc}"
        ) from None
    if isinstance(value, list | dict | msgspec.Struct) or dataclasses.is_dataclass(value):
        return msgspec.field(
            default_factory=functools.partial(msgspec.convert, field.default, hint)
        )
    if isinstance(value, enum.Enum):
        return value.value
    return value
