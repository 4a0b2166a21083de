"""Options of ``Log.open`` (how ledgers are rolled, snapshots kept, records read).

Each option is declared once (``walkit._core.options``); :class:`LogOptionsDict` is the same
list for type checkers (``**options: Unpack[LogOptionsDict]``), and a test keeps the two in
step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar, Final, TypedDict, final

import attrs

from walkit._core.lake import parse_lake_uri
from walkit._core.options import (
    SECONDS,
    SWITCH,
    Kind,
    count,
    number,
    optional,
    options_from_kwargs,
)
from walkit._core.record_set import MAX_BODY_BYTES, Codec, check_codec_available
from walkit._core.schema import Compatibility
from walkit.errors import ConfigurationError

__all__ = ["LogOptions", "LogOptionsDict"]


def _codec(value: Any) -> Codec:
    if not isinstance(value, str | Codec):
        raise ConfigurationError(f"log option compression must be a string, not {value!r}")
    codec = Codec.parse(value)
    check_codec_available(codec)
    return codec


def _password(value: Any) -> bytes:
    if not isinstance(value, bytes | bytearray):
        raise ConfigurationError(f"log option password must be bytes, not {type(value).__name__}")
    return bytes(value)


def _offload_to_problem(value: Any) -> str | None:
    if value is None:
        return None
    try:
        parse_lake_uri(value)
    except ConfigurationError as exc:
        return str(exc).removeprefix("log option ")
    return None


def _read_catalog(text: str) -> dict[str, str]:
    """Catalog properties on a command line: a JSON object of strings."""
    found = json.loads(text)
    if _catalog_problem(found) is not None:
        raise ValueError("not a JSON object of strings")
    return dict(found)


def _catalog_problem(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return "must map strings to strings"
    return None


def _compatibility(value: Any) -> Compatibility:
    if isinstance(value, Compatibility):
        return value
    try:
        return Compatibility(value)
    except ValueError:
        known = ", ".join(c.value for c in Compatibility)
        raise ConfigurationError(
            f"log option schema_compatibility must be one of {known}, not {value!r}"
        ) from None


COMPATIBILITY = Kind(
    convert=_compatibility, choices=tuple(c.value for c in Compatibility), metavar="RULE"
)
OFFLOAD_TO = Kind(problem=_offload_to_problem, metavar="URI")
# (secret: catalog properties may hold credentials, and errors must not repeat them)
CATALOG = Kind(problem=_catalog_problem, read=_read_catalog, secret=True, metavar="JSON")
COMPRESSION = Kind(convert=_codec, choices=tuple(c.value for c in Codec), metavar="CODEC")
PASSWORD = Kind(convert=_password, secret=True)
BATCH_BYTES = number(
    f"an int from 1 to {MAX_BODY_BYTES}", at_least=1, at_most=MAX_BODY_BYTES, integer=True
)
POSITIVE_SECONDS = number("a number of seconds > 0", above=0, finite=True, metavar="SECONDS")
#: ``roll_interval``'s default, Pulsar's (``managedLedgerMaxLedgerRolloverTimeMinutes=240``):
#: a quiet log's records reach a closed ledger, where ``retain_age`` can drop them, within four
#: hours of their append, and a log that gets a record now and then costs at most six more
#: ledgers a day (one compare-and-set of its metadata each); busy logs roll by size long before.
DEFAULT_ROLL_INTERVAL: Final = 4 * 3600.0


@final
@attrs.frozen
class LogOptions:
    """Every option of a log handle, with its default."""

    option_noun: ClassVar[str] = "log option "

    roll_entries: int | None = optional(count(1)).field(
        1_000_000,
        "roll to a new ledger once the current one holds this many acknowledged records "
        "(None: never by count)",
    )
    roll_bytes: int | None = optional(count(1)).field(
        64 * 1024 * 1024,
        "roll once the current ledger holds this many acknowledged payload bytes (None: never)",
    )
    roll_interval: float | None = optional(POSITIVE_SECONDS).field(
        DEFAULT_ROLL_INTERVAL,
        "roll once the current ledger is this many seconds old and holds a record, even "
        "without appends, so that retain_age reaches quiet logs too (None: never by time; "
        "an empty ledger waits for its first record)",
    )
    password: bytes = attrs.field(
        default=b"",
        converter=_password,
        **PASSWORD.option("the password of the log's ledgers (data and snapshots)"),
    )
    keep_snapshots: int = count(1).field(
        3, "snapshots kept in the metadata (the oldest's ledger is deleted when a new one is saved)"
    )
    snapshot_chunk_size: int = count(1).field(
        256 * 1024, "snapshot bytes per ledger entry (written one at a time)"
    )
    read_batch: int = count(1).field(
        256,
        "entries a reader fetches from the bookies at once (at most: a range also stops at "
        "about 4 MiB of entries)",
    )
    read_ahead: int = count(0).field(
        2,
        "ranges a reader fetches ahead of the one it is handing out (0: none), while it "
        "reads closed ledgers and confirmed entries",
    )
    batch_bytes: int = BATCH_BYTES.field(
        64 * 1024,
        "largest record set: records that arrive while an entry is in flight share the "
        "next entry, up to this many bytes (a lone record is sent at once, whatever its "
        "size)",
    )
    compression: Codec = attrs.field(
        default=Codec.NONE,
        converter=_codec,
        **COMPRESSION.option(
            'how the writer compresses each entry: "none", "zstd" or "lz4" (the compression '
            "extra). Each entry records its codec, so readers need no setting"
        ),
    )
    trace_context: bool = SWITCH.field(
        False,
        "put the current OpenTelemetry trace context (W3C traceparent) in the headers of "
        "each record appended (the otel extra; see walkit.otel)",
    )
    takeover_attempts: int = count(1).field(
        10,
        "rounds of a writer takeover (each re-reads the log after losing a race to another "
        "writer) before giving up with WriterFencedError",
    )
    retain_records: int | None = optional(count(0)).field(
        None,
        "retention (None: no limit of that kind): the writer drops whole closed ledgers "
        "from the front of the log once the ledgers after them hold at least this many "
        "records",
    )
    retain_bytes: int | None = optional(count(0)).field(
        None, "retention: ... or at least this many payload bytes (None: no such limit)"
    )
    retain_age: float | None = optional(SECONDS).field(
        None,
        "retention: ... or once their newest record is older than this many seconds "
        "(needs timestamps: not with wall_clock=None). Never the current ledger, nor the latest "
        "snapshot's or later ones",
    )
    max_backlog_records: int | None = optional(count(0)).field(
        None,
        "retention keeps what a consumer has not committed unless its backlog (in closed "
        "ledgers) passes this many records: then retention goes on without it, and it is "
        "behind once that deletes records it had not committed (None: no limit)",
    )
    max_backlog_bytes: int | None = optional(count(0)).field(
        None, "... or this many bytes (None: no limit)"
    )
    stalled_ledger_timeout: float | None = optional(POSITIVE_SECONDS).field(
        3.0,
        "a reader tailing an open ledger while a later one is listed (its writer died in "
        "the middle of a roll) recovers that ledger itself after this many seconds without "
        "progress (None: wait for the next writer's takeover)",
    )
    orphan_gc_grace: float | None = optional(SECONDS).field(
        3600.0,
        "after a takeover, the writer deletes (in the background) ledgers tagged with the "
        "log's name that the log does not list and that were created over this many "
        "seconds ago (None: never; needs timestamps: not with wall_clock=None)",
    )

    offload_to: str | None = optional(OFFLOAD_TO).field(
        None,
        "offload closed ledgers to this lake, file:///abs/dir or s3://bucket/prefix, as "
        "Parquet files of an Apache Iceberg table (the lake extra; None: never; see "
        "docs/lake.md)",
    )
    offload_after: float = SECONDS.field(
        3600.0, "the writer offloads a ledger this many seconds after it closed"
    )
    offload_deletion_lag: float = SECONDS.field(
        3600.0, "an offloaded ledger's bookie copy is deleted this many seconds after the offload"
    )
    offload_catalog: dict[str, str] | None = optional(CATALOG).field(  # noqa: RUF009 (immutable None default)
        None,
        "the properties of the lake's pyiceberg catalog (None: for a file:// lake, a SQL "
        "catalog in DIR/catalog.db; an s3:// lake needs one)",
        repr=False,
    )

    schema_compatibility: Compatibility = attrs.field(
        default=Compatibility.BACKWARD,
        converter=_compatibility,
        **COMPATIBILITY.option(
            "what a writer's new schema version must keep (a log opened with schema=T): "
            '"backward" (it reads what the latest version wrote), "forward" (the latest '
            'reads what it writes), "full" (both), each also "_transitive" (against every '
            'version), or "none"'
        ),
    )

    @trace_context.validator
    def _otel_installed(self, _attribute: attrs.Attribute[bool], value: bool) -> None:
        """A log that carries trace context needs opentelemetry-api: say so when opened, not
        at the first append."""
        if value:
            from walkit.otel import check_available

            check_available()

    @offload_to.validator
    def _lake_installed(self, _attribute: attrs.Attribute[str | None], value: str | None) -> None:
        """A log that offloads needs the lake extra: say so when opened."""
        if value is not None:
            from walkit.lake import check_available

            check_available()

    @offload_catalog.validator
    def _catalog_loads(
        self, _attribute: attrs.Attribute[dict[str, str] | None], value: dict[str, str] | None
    ) -> None:
        """Catalog properties pyiceberg cannot load fail when the log is opened (no I/O:
        the type, or the one ``uri`` infers, and the properties that type needs)."""
        if value is not None and self.offload_to is not None:
            from walkit.lake._errors import check_catalog

            check_catalog(value)

    @classmethod
    def from_kwargs(cls, options: Mapping[str, Any], base: LogOptions | None = None) -> LogOptions:
        """The options given as keywords (over ``base``'s, an options object given too)."""
        return options_from_kwargs(cls, options, "log", base)


class LogOptionsDict(TypedDict, total=False):
    """``LogOptions`` as keywords, for type checkers (``Log.open(client, name, **options)``);
    a test keeps it the same list as the class's."""

    roll_entries: int | None
    roll_bytes: int | None
    roll_interval: float | None
    password: bytes | bytearray
    keep_snapshots: int
    snapshot_chunk_size: int
    read_batch: int
    read_ahead: int
    batch_bytes: int
    compression: Codec | str
    trace_context: bool
    takeover_attempts: int
    retain_records: int | None
    retain_bytes: int | None
    retain_age: float | None
    max_backlog_records: int | None
    max_backlog_bytes: int | None
    stalled_ledger_timeout: float | None
    orphan_gc_grace: float | None
    offload_to: str | None
    offload_after: float
    offload_deletion_lag: float
    offload_catalog: dict[str, str] | None
    schema_compatibility: Compatibility | str
