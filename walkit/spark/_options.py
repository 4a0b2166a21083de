"""Options of the ``walkit`` Spark data source, shared by its readers and writers.

Spark hands a data source its options in a case-insensitive dict (``.option("startingPosition",
...)`` arrives under ``startingposition``) and the path of ``.load(path)``/``.save(path)`` as
the option ``path``. Every value is a string. This module checks them all on the driver, before
any task starts, and raises one :class:`~walkit.errors.ConfigurationError` that names the option
(in the spelling of the docs) and says what it expected.

The parsed options are small frozen attrs classes: Spark ships them to the executors inside the
reader and the partitions.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Final, final

import attrs

from walkit._core.consumers import check_consumer_name
from walkit._core.log_metadata import check_log_name
from walkit._core.log_position import LogPosition
from walkit._core.record import MAX_TIMESTAMP
from walkit.errors import ConfigurationError, InvalidArgumentError
from walkit.spark._connect import CONNECTION_OPTIONS, Connection, SessionOptions, connection

__all__ = [
    "COMMON_OPTIONS",
    "READ_OPTIONS",
    "ReadOptions",
    "check_options",
    "log_name",
    "read_options",
]

#: Options every form takes: how to reach the cluster (also from the ``spark.walkit.*`` conf),
#: and the path of ``load``/``save``, which arrives as ``path``.
COMMON_OPTIONS: Final = (*CONNECTION_OPTIONS, "path")
#: Options of the read forms (batch and streaming, logs and ledgers).
READ_OPTIONS: Final = (
    *COMMON_OPTIONS,
    "ledgers",
    "startingPosition",
    "startingTimestamp",
    "endingPosition",
    "splitEntries",
    "maxRecordsPerTrigger",
    "failOnDataLoss",
    "consumer",
    "offloadCatalog",
)

#: Entries one Spark partition reads at most, unless ``splitEntries`` says otherwise.
DEFAULT_SPLIT_ENTRIES: Final = 250_000
#: The same for entries of record-set ledgers (up to 64 KiB of records each by default: about
#: 64 MiB per partition), unless ``splitEntries`` says otherwise.
DEFAULT_SPLIT_RECORD_SETS: Final = 1024


@final
@attrs.frozen
class ReadOptions:
    """Every read option, checked. ``log`` is None for a read of raw ledgers."""

    connection: Connection
    log: str | None
    #: ``None`` (a log read), ``"all"``, or the ledger ids asked for.
    ledgers: str | tuple[int, ...] | None
    starting: LogPosition
    #: None: the end of what is readable when the query is planned (``latest``).
    ending: LogPosition | None
    split_entries: int
    max_records_per_trigger: int | None
    fail_on_data_loss: bool
    #: Entries of record-set ledgers one partition reads at most (``splitEntries`` if given).
    split_record_sets: int = DEFAULT_SPLIT_RECORD_SETS
    #: ``startingTimestamp`` (ms since the epoch): start at the first record at or after it,
    #: in place of ``starting`` (resolved on the driver when the query starts).
    starting_timestamp: int | None = None
    #: The durable consumer a streaming query commits its progress to (None: none).
    consumer: str | None = None
    #: ``offloadCatalog``: the properties the lake's files are read with (an S3 endpoint and
    #: credentials, as the log option ``offload_catalog`` gives them); none: pyarrow's
    #: defaults (local files, the standard AWS credential chain).
    lake_properties: tuple[tuple[str, str], ...] = attrs.field(default=(), repr=False)


def check_options(options: Mapping[str, str], known: Collection[str], what: str) -> dict[str, str]:
    """The options as a plain dict keyed by their documented spelling; ConfigurationError for
    an option not in ``known`` (which holds the documented spellings). ``what`` names the form
    in the message ("read", "write", ...)."""
    spelling = {name.lower(): name for name in known}
    result: dict[str, str] = {}
    for key, value in options.items():
        name = spelling.get(str(key).lower())
        if name is None:
            allowed = ", ".join(sorted(n for n in known if n != "path"))
            raise ConfigurationError(
                f"walkit: unknown option {key!r} for a {what} (known options: {allowed})"
            )
        result[name] = str(value)
    return result


def log_name(options: Mapping[str, str]) -> str | None:
    """The log named by the path of ``load``/``save`` (None when there is none)."""
    path = options.get("path")
    if path is None or path == "":
        return None
    try:
        return check_log_name(path)
    except InvalidArgumentError as exc:
        raise ConfigurationError(f"walkit: bad log name in the path: {exc}") from None


def _position(options: Mapping[str, str], name: str, default: str) -> LogPosition:
    text = options.get(name, default).strip()
    try:
        return LogPosition.parse(text)
    except InvalidArgumentError:
        raise ConfigurationError(
            f"walkit: option {name!r} is {text!r}: expected earliest, latest, or a log "
            "position SEQ:ENTRY:SLOT such as 3:17:0"
        ) from None


def _timestamp(options: Mapping[str, str], name: str) -> int | None:
    text = options.get(name)
    if text is None:
        return None
    stripped = text.strip()
    if not stripped.isdigit() or int(stripped) > MAX_TIMESTAMP:
        raise ConfigurationError(
            f"walkit: option {name!r} is {text!r}: expected milliseconds since the epoch, "
            "an integer such as 1700000000000"
        )
    return int(stripped)


def _positive(options: Mapping[str, str], name: str) -> int | None:
    text = options.get(name)
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigurationError(f"walkit: option {name!r} is {text!r}: expected an integer >= 1")
    return value


def _boolean(options: Mapping[str, str], name: str, default: bool) -> bool:
    text = options.get(name)
    if text is None:
        return default
    lowered = text.strip().lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    raise ConfigurationError(f"walkit: option {name!r} is {text!r}: expected true or false")


def _ledgers(text: str) -> str | tuple[int, ...]:
    stripped = text.strip()
    if stripped.lower() == "all":
        return "all"
    ids: list[int] = []
    for part in stripped.split(","):
        part = part.strip()
        if not part.isdigit() or len(part) > 19:
            raise ConfigurationError(
                f"walkit: option 'ledgers' is {text!r}: expected all, or ledger ids separated "
                "by commas such as 12,15"
            )
        if int(part) not in ids:
            ids.append(int(part))
    return tuple(ids)


def read_options(
    raw: Mapping[str, str], *, streaming: bool, session: SessionOptions | None = None
) -> ReadOptions:
    """Check the options of a read (ConfigurationError naming the option); ``session``: the
    connection options of the session's conf, under the query's."""
    what = "streaming read" if streaming else "read"
    options = check_options(raw, READ_OPTIONS, what)
    if session is not None:
        options = session.merged(options)
    conn = connection(options)
    name = log_name(options)
    ledgers_text = options.get("ledgers")
    ledgers: str | tuple[int, ...] | None = None
    if ledgers_text is not None:
        if name is not None:
            raise ConfigurationError(
                f"walkit: option 'ledgers' reads raw ledgers and takes no path, but the path "
                f"names the log {name!r}: use one or the other"
            )
        if streaming:
            raise ConfigurationError(
                "walkit: option 'ledgers' is for batch reads; a streaming read reads a log"
            )
        ledgers = _ledgers(ledgers_text)
        log_only = (
            "startingPosition",
            "startingTimestamp",
            "endingPosition",
            "maxRecordsPerTrigger",
            "consumer",
        )
        for option in log_only:
            if option in options:
                raise ConfigurationError(
                    f"walkit: option {option!r} applies to a log read, not to 'ledgers'"
                )
    elif name is None:
        raise ConfigurationError(
            'walkit: name the log to read, as in .load("orders"), or read raw ledgers '
            'with .option("ledgers", "all") or .option("ledgers", "12,15")'
        )
    starting = _position(options, "startingPosition", "earliest")
    starting_timestamp = _timestamp(options, "startingTimestamp")
    if starting_timestamp is not None and "startingPosition" in options:
        raise ConfigurationError(
            "walkit: options 'startingPosition' and 'startingTimestamp' both say where to "
            "start: give one"
        )
    ending_text = options.get("endingPosition")
    ending: LogPosition | None = None
    if ending_text is not None:
        if streaming:
            raise ConfigurationError(
                "walkit: option 'endingPosition' is for batch reads; a stream never ends"
            )
        ending = _position(options, "endingPosition", "latest")
        if ending == LogPosition.LATEST:
            ending = None
    split = _positive(options, "splitEntries")
    max_records = _positive(options, "maxRecordsPerTrigger")
    if max_records is not None and not streaming:
        raise ConfigurationError(
            "walkit: option 'maxRecordsPerTrigger' is for streaming reads (spark.readStream)"
        )
    consumer = _consumer(options, streaming)
    return ReadOptions(
        connection=conn,
        log=name,
        ledgers=ledgers,
        starting=starting,
        ending=ending,
        split_entries=split or DEFAULT_SPLIT_ENTRIES,
        max_records_per_trigger=max_records,
        fail_on_data_loss=_boolean(options, "failOnDataLoss", True),
        split_record_sets=split or DEFAULT_SPLIT_RECORD_SETS,
        starting_timestamp=starting_timestamp,
        consumer=consumer,
        lake_properties=_lake_properties(options),
    )


def _lake_properties(options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    text = options.get("offloadCatalog")
    if text is None:
        return ()
    try:
        found = json.loads(text)
    except ValueError:
        found = None
    if not isinstance(found, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in found.items()
    ):
        # (the value may hold credentials: it is not repeated)
        raise ConfigurationError(
            "walkit: option 'offloadCatalog' must be a JSON object of strings, the pyiceberg "
            'properties the lake is read with, such as {"s3.endpoint": "http://host:9000"}'
        )
    return tuple(sorted(found.items()))


def _consumer(options: Mapping[str, str], streaming: bool) -> str | None:
    name = options.get("consumer")
    if name is None:
        return None
    if not streaming:
        raise ConfigurationError(
            "walkit: option 'consumer' is for streaming reads (spark.readStream): it commits "
            "each micro-batch's progress"
        )
    try:
        return check_consumer_name(name.strip())
    except InvalidArgumentError as exc:
        raise ConfigurationError(f"walkit: option 'consumer': {exc}") from None
