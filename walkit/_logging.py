"""Library logging: structured events through the standard :mod:`logging` module.

A library must not decide where its output goes. Every walkit and walkit_bookie module takes its
logger from :func:`get_logger` with its ``__name__``: a structlog logger bound to
``logging.getLogger(name)``, whatever structlog's global configuration says. So an application
that configures nothing sees only WARNING and above (through ``logging``'s last-resort handler
on stderr), and one that configures ``logging`` controls all of it by logger name
(``walkit.*``, ``walkit_bookie.*``). Events below a logger's level are dropped before they are
rendered, so debug events cost little when nobody listens.

A record's message is the event rendered as ``event key=value ...``; the event itself rides on the
record as ``record.walkit_event`` (a dict), for a handler that wants the structure (the CLIs'
JSON output). Only the CLIs call :func:`configure_cli_logging`.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping, MutableMapping
from typing import Any, Literal, TextIO

import structlog

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "RENAMED_EVENTS", "configure_cli_logging", "get_logger"]

#: Names accepted by ``--log-level`` and ``--log-format``.
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_FORMATS = ("console", "json")
_EVENT_ATTR = "walkit_event"
_ROOTS = ("walkit", "walkit_bookie")


def _to_stdlib(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The last processor: one stdlib record whose message is ``event key=value ...``."""
    event = dict(event_dict)
    exc_info = event.pop("exc_info", None)
    message = _render_kv(event)
    kwargs: dict[str, Any] = {"extra": {_EVENT_ATTR: event}}
    if exc_info:
        kwargs["exc_info"] = exc_info
    return (message,), kwargs


def _render_kv(event: Mapping[str, Any]) -> str:
    parts = [str(event.get("event", ""))]
    parts.extend(f"{key}={value!r}" for key, value in event.items() if key != "event")
    return " ".join(parts)


#: Events renamed when walkit settled on one word per concept (docs/architecture.md, "Glossary"):
#: new name -> old name. Until the next release each such event also carries
#: ``formerly=<old name>``, so a filter that looks for the old name in the message text, or in
#: the ``formerly`` field, still finds it; one that compares the event field must use the new
#: name.
RENAMED_EVENTS: Mapping[str, str] = {
    "rereplication_relaying_copies": "rereplication_copying_through_healer",
    "underreplication_marker_removed": "ledger_replicated",
}


def _former_name(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    old = RENAMED_EVENTS.get(event_dict.get("event", ""))
    if old is not None:
        event_dict["formerly"] = old
    return event_dict


_PROCESSORS: list[Any] = [
    structlog.stdlib.filter_by_level,
    structlog.processors.StackInfoRenderer(),
    _former_name,
    _to_stdlib,
]


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    """A structlog logger for module ``name`` that writes to ``logging.getLogger(name)``.

    It ignores structlog's global configuration on purpose: an application that configures
    structlog for its own output must not get walkit's debug events in it.
    """
    return structlog.stdlib.BoundLogger(logging.getLogger(name), _PROCESSORS, context={})


class _Formatter(logging.Formatter):
    """Console (``time level logger event key=value``) or JSON lines (one object per record)."""

    def __init__(self, fmt: Literal["console", "json"]) -> None:
        super().__init__()
        self._json = fmt == "json"

    def format(self, record: logging.LogRecord) -> str:
        timestamp = self.formatTime(record, "%Y-%m-%dT%H:%M:%S")
        timestamp = f"{timestamp}.{int(record.msecs):03d}"
        event = getattr(record, _EVENT_ATTR, None)
        if self._json:
            data: dict[str, Any] = {
                "timestamp": timestamp,
                "level": record.levelname.lower(),
                "logger": record.name,
            }
            if event is None:
                data["event"] = record.getMessage()
            else:
                data.update(event)
            if record.exc_info:
                data["exception"] = self.formatException(record.exc_info)
            return json.dumps(data, default=repr)
        text = f"{timestamp} [{record.levelname.lower():<7}] {record.name}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure_cli_logging(
    level: str = "warning",
    fmt: str = "console",
    *,
    stream: TextIO | None = None,
) -> None:
    """Send log records of ``level`` and above to ``stream`` (stderr), as console text or JSON.

    For the ``walkit`` and ``walkit-bookie`` commands only: it replaces the handlers of the root
    logger. Libraries other than walkit (kazoo, for one) are held at WARNING whatever ``level``
    says, so ``--log-level debug`` shows walkit's events, not a dependency's chatter.
    """
    if level not in LOG_LEVELS:
        raise ValueError(f"log level {level!r} is not one of {', '.join(LOG_LEVELS)}")
    if fmt not in LOG_FORMATS:
        raise ValueError(f"log format {fmt!r} is not one of {', '.join(LOG_FORMATS)}")
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(_Formatter("json" if fmt == "json" else "console"))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    numeric = getattr(logging, level.upper())
    root.setLevel(max(numeric, logging.WARNING))
    for name in _ROOTS:
        logging.getLogger(name).setLevel(numeric)
