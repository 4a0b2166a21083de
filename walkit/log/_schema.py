"""A typed log handle's schema (``Log.open(client, name, schema=T)``): :class:`LogSchema`.

It holds the type, its codec (``walkit._core.schema_codec``) and the handle's
``schema_compatibility`` rule; it checks the type against the log's versions when the handle
opens, registers it when a writer takes the log over (in the takeover's compare-and-set:
``walkit._core.log_schema``), encodes what the writer appends, and gives readers the
:class:`~walkit.log._values.RecordValues` of each ledger.

Needs msgspec (the ``schema`` extra); imported only by handles that have a schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, final

import attrs

from walkit._core.log_metadata import LogMetadata
from walkit._core.log_schema import writer_schema
from walkit._core.record import Record
from walkit._core.schema import Compatibility, check_compatible, version_of
from walkit._core.schema_codec import ValueCodec, error_field
from walkit.errors import InvalidArgumentError
from walkit.log._values import RecordValues, V

__all__ = ["LogSchema"]


@final
class LogSchema(Generic[V]):
    """The schema of a typed handle (see the module docs)."""

    def __init__(self, log: str, tp: type[V], rule: Compatibility) -> None:
        self.log = log
        self.codec: ValueCodec[V] = ValueCodec(tp)
        self.schema = self.codec.schema
        self.rule = rule
        #: RecordValues by the version that wrote a ledger.
        self._values: dict[int, RecordValues] = {}

    @property
    def type(self) -> type[V]:
        return self.codec.type

    # --- against the log's versions ----------------------------------------------------------

    def check(self, md: LogMetadata) -> None:
        """IncompatibleSchemaError unless a writer of this handle could register its schema
        (what ``Log.open`` checks, so that a mismatch is found before anything is fenced)."""
        if version_of(self.schema, md.schemas) is None:
            check_compatible(self.schema, md.schemas, self.rule, md.name)

    def registered(self, md: LogMetadata, time_ms: int) -> tuple[LogMetadata, int]:
        """``md`` with this schema registered, and its version (pure; IncompatibleSchemaError)."""
        return writer_schema(md, self.schema, self.rule, time_ms=time_ms)

    # --- appends -----------------------------------------------------------------------------

    def encode(self, value: object) -> bytes:
        """A value as the payload its record stores (InvalidArgumentError naming the field)."""
        return self.codec.encode(value)

    def encode_batch(self, items: Sequence[object]) -> list[bytes | Record]:
        """The items of a typed ``append_batch``: values, or Records with a value."""
        if isinstance(items, bytes | bytearray | memoryview | str):
            raise InvalidArgumentError("append_batch takes a sequence of values")
        out: list[bytes | Record] = []
        encode = self.codec.encode
        for item in items:
            if isinstance(item, Record):
                if item.value is None:
                    raise InvalidArgumentError(
                        f"log {self.log} takes {self.codec.name} values: give "
                        f"Record(value=...), not a payload"
                    )
                out.append(attrs.evolve(item, payload=encode(item.value), value=None))
            else:
                out.append(encode(item))
        return out

    # --- reads -------------------------------------------------------------------------------

    def values_of_writer(self, version: int) -> RecordValues:
        """The RecordValues of the records this handle's writer wrote (registered as
        ``version``): a leader applies its own commands as its followers will read them."""
        found = self._values.get(version)
        if found is None:
            found = self._values[version] = RecordValues(
                self.log,
                version,
                self.codec.decode,
                type_name=self.codec.name,
                field_of=error_field,
            )
        return found

    def values(self, md: LogMetadata, version: int) -> RecordValues:
        """How the records a ledger of ``version`` holds decode into this handle's type."""
        found = self._values.get(version)
        if found is not None:
            return found
        name = self.codec.name
        if version == 0:
            made = RecordValues(
                self.log, 0, None, type_name=name, problem="was written without a schema"
            )
        elif version > len(md.schemas):
            made = RecordValues(
                self.log,
                version,
                None,
                type_name=name,
                problem=f"was written with schema version {version}, which the log's metadata "
                "does not have",
            )
        else:
            made = RecordValues(
                self.log, version, self.codec.decode, type_name=name, field_of=error_field
            )
            self._values[version] = made
        return made
