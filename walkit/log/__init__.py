"""The log API: named, replicated, single-writer logs made of chains of ledgers.

See docs/log.md. ``walkit.Log.open(client, name)`` is the entry point.
"""

from walkit._core.log_metadata import (
    LedgerConfig,
    LogLedger,
    LogMetadata,
    SinkMark,
    SnapshotRecord,
)
from walkit._core.log_position import LogPosition
from walkit._core.record_set import ProducerTag, encode_record_set
from walkit.errors import LogTruncatedError, NoSuchLogError
from walkit.log._consumer import LogConsumer
from walkit.log._gc import Orphan
from walkit.log._lag import ConsumerInfo
from walkit.log._link import LinkResult, StagedLedger
from walkit.log._log import Log
from walkit.log._options import DEFAULT_ROLL_INTERVAL, LogOptions, LogOptionsDict
from walkit.log._passwords import ledger_password, log_password
from walkit.log._reader import LogReader, LogRecord
from walkit.log._retention import RetentionResult
from walkit.log._snapshot import Snapshot
from walkit.log._store import list_logs, log_path, read_log
from walkit.log._writer import LogWriter

__all__ = [
    "DEFAULT_ROLL_INTERVAL",
    "ConsumerInfo",
    "LedgerConfig",
    "LinkResult",
    "Log",
    "LogConsumer",
    "LogLedger",
    "LogMetadata",
    "LogOptions",
    "LogOptionsDict",
    "LogPosition",
    "LogReader",
    "LogRecord",
    "LogTruncatedError",
    "LogWriter",
    "NoSuchLogError",
    "Orphan",
    "ProducerTag",
    "RetentionResult",
    "SinkMark",
    "Snapshot",
    "SnapshotRecord",
    "StagedLedger",
    "encode_record_set",
    "ledger_password",
    "list_logs",
    "log_password",
    "log_path",
    "read_log",
]
