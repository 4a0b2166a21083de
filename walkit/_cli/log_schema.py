"""``walkit log schema NAME [--json]``: a typed log's schema versions; and how ``walkit log
tail`` shows a typed record's value (JSON, decoded with the version that wrote it)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any, TextIO

from walkit._cli.output import emit, time_text

if TYPE_CHECKING:
    from walkit._core.log_metadata import LogMetadata
    from walkit._core.schema import SchemaType
    from walkit.log import Log, LogRecord

__all__ = ["RecordValueText", "add_schema_parser", "log_schema"]


def add_schema_parser(log_sub: Any, with_metadata: Any) -> None:
    schema = with_metadata(
        log_sub.add_parser(
            "schema",
            help="list a typed log's schema versions (--json: each version's whole schema, in "
            "Avro's JSON notation)",
        )
    )
    schema.add_argument("name")


async def log_schema(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.log import read_log
    from walkit.metadata import open_metadata_store

    async with await open_metadata_store(url) as store:
        md, _version = await read_log(store, args.name)
    if args.json:
        json.dump([v.to_json() for v in md.schemas], out, indent=2)
        out.write("\n")
        return 0
    if not md.schemas:
        out.write(f"log {md.name} has no schema (its records are bytes)\n")
        return 0
    written = {lg.schema for lg in md.ledgers}
    rows = [
        {
            "version": v.version,
            "registered": time_text(v.time_ms) if v.time_ms else None,
            "compatibility": v.compatibility.value,
            "record": v.schema.name,
            "ledgers": sum(1 for lg in md.ledgers if lg.schema == v.version)
            if v.version in written
            else 0,
            "fields": ", ".join(f"{f.name}: {_type_text(f.type)}" for f in v.schema.fields),
        }
        for v in md.schemas
    ]
    emit(
        rows,
        ["version", "registered", "compatibility", "record", "ledgers", "fields"],
        as_json=False,
        out=out,
    )
    return 0


def _type_text(tp: SchemaType) -> str:
    from walkit._core.schema import (
        ArrayType,
        EnumType,
        MapType,
        NullableType,
        Primitive,
        RecordType,
    )

    if isinstance(tp, Primitive):
        return tp.name
    if isinstance(tp, ArrayType):
        return f"array<{_type_text(tp.items)}>"
    if isinstance(tp, MapType):
        return f"map<{_type_text(tp.values)}>"
    if isinstance(tp, NullableType):
        return f"{_type_text(tp.inner)}?"
    if isinstance(tp, EnumType):
        return f"enum<{'|'.join(tp.symbols)}>"
    assert isinstance(tp, RecordType)
    return f"{tp.name}{{{', '.join(f'{f.name}: {_type_text(f.type)}' for f in tp.fields)}}}"


class RecordValueText:
    """A typed record's value as JSON-ready builtins (bytes in base64), decoded with the
    schema version that wrote it; for ``walkit log tail``."""

    def __init__(self, log: Log[Any], md: LogMetadata) -> None:
        self._log = log
        self._md = md
        self._decoders: dict[int, Any] = {}

    async def value(self, record: LogRecord[Any]) -> tuple[Any, str | None]:
        """(value, None), or (None, why it does not decode)."""
        version = record.schema_version
        if version is None:
            return None, None
        if version > len(self._md.schemas):  # registered after we looked
            self._md = await self._log.metadata()
        if version > len(self._md.schemas):
            return None, f"schema version {version} is not in the log's metadata"
        decode = self._decoders.get(version)
        if decode is None:
            from walkit._core.schema_codec import plain_decoder

            decode = self._decoders[version] = plain_decoder(self._md.schemas[version - 1].schema)
        import msgspec

        try:
            return msgspec.to_builtins(decode(record.payload)), None
        except (ValueError, TypeError) as exc:
            return None, str(exc)
