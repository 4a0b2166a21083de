"""A writer's schema against its log's metadata: the decision a takeover (or a link of staged
ledgers) makes in the compare-and-set that lists its ledger.

- A writer with a schema registers it (a new version, if compatible under its rule:
  :func:`walkit._core.schema.register`) and writes that version into its ledgers.
- A writer without one writes version 0, and is refused on a log that has a schema: its bytes
  would be records that no reader of the log's type can decode.

Pure: the log layer reads the log's node, asks :func:`writer_schema`, and writes the result
with the same compare-and-set that fences the previous writer, so two writers racing to
register versions leave one ordered list (one wins the CAS; the other decides again on what
the winner wrote).
"""

from __future__ import annotations

import attrs

from walkit._core.log_metadata import LogMetadata
from walkit._core.schema import Compatibility, RecordType, register
from walkit.errors import IncompatibleSchemaError

__all__ = ["writer_schema"]


def writer_schema(
    md: LogMetadata,
    schema: RecordType | None,
    rule: Compatibility,
    *,
    time_ms: int = 0,
) -> tuple[LogMetadata, int]:
    """The log's metadata with ``schema`` registered, and the version a writer of it writes
    (0: no schema). Raises IncompatibleSchemaError when ``schema`` breaks ``rule`` against
    the log's versions, or is None on a typed log."""
    if schema is None:
        if md.schemas:
            latest = md.schemas[-1]
            raise IncompatibleSchemaError(
                f"log {md.name} has a schema (version {latest.version}, "
                f"{latest.schema.name}): open it with schema=... to write to it",
                rule=rule.value,
                version=latest.version,
            )
        return md, 0
    versions, number = register(schema, md.schemas, rule, time_ms=time_ms, log=md.name)
    if len(versions) == len(md.schemas):
        return md, number
    return attrs.evolve(md, schemas=versions), number
