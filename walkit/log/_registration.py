"""Where a writer's schema goes into the log's metadata: the step a takeover and a link of
staged ledgers take in the compare-and-set that lists their ledgers
(:func:`walkit._core.log_schema.writer_schema`, given the handle's schema, rule and clock)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from walkit._core.log_metadata import LogMetadata
from walkit._core.log_schema import writer_schema
from walkit._core.record import MAX_TIMESTAMP
from walkit.errors import InvalidArgumentError

if TYPE_CHECKING:
    from walkit.log._context import LogContext

__all__ = ["SchemaStep", "schema_step"]

#: Given the log's metadata: the metadata with the writer's schema registered, and the
#: version its ledgers hold (0: none). Pure; raises IncompatibleSchemaError.
SchemaStep = Callable[[LogMetadata], tuple[LogMetadata, int]]


def schema_step(owner: LogContext, version: int | None = None) -> SchemaStep:
    """The step of a writer of ``owner`` (its schema, or none); with ``version``, ledgers
    written with that registered version (a bulk writer that encoded with the log's own
    schema, such as Spark's), which must exist."""
    if version is not None:
        return functools.partial(_registered, version=version)
    typed = owner._typed
    if typed is None:
        return functools.partial(
            writer_schema, schema=None, rule=owner.options.schema_compatibility
        )
    clock = owner._services.context.options.wall_clock
    now_ms = 0
    if clock is not None:
        try:
            now_ms = min(max(int(clock() * 1000), 0), MAX_TIMESTAMP)
        except (ValueError, OverflowError, TypeError):  # NaN, infinity, not a number
            now_ms = 0
    return functools.partial(typed.registered, time_ms=now_ms)


def _registered(md: LogMetadata, *, version: int) -> tuple[LogMetadata, int]:
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise InvalidArgumentError(f"a schema version is an int >= 0, not {version!r}")
    if version > len(md.schemas) or (version == 0 and md.schemas):
        have = f"1..{len(md.schemas)}" if md.schemas else "none"
        raise InvalidArgumentError(
            f"log {md.name} has no schema version {version} (its versions: {have})"
        )
    return md, version
