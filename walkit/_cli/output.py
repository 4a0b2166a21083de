"""Readable tables for people, JSON for scripts."""

from __future__ import annotations

import datetime
import json
from collections.abc import Mapping, Sequence
from typing import Any, TextIO


def emit(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str], *, as_json: bool, out: TextIO
) -> None:
    if as_json:
        json.dump(list(rows), out, indent=2, default=str)
        out.write("\n")
        return
    if not rows:
        out.write("(none)\n")
        return
    cells = [[_text(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    out.write(
        "  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip() + "\n"
    )
    for r in cells:
        out.write("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() + "\n")


def emit_record(record: Mapping[str, Any], *, as_json: bool, out: TextIO) -> None:
    if as_json:
        json.dump(record, out, indent=2, default=str)
        out.write("\n")
        return
    width = max((len(k) for k in record), default=0)
    for key, value in record.items():
        out.write(f"{key.ljust(width)}  {_text(value)}\n")


def _text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        return ",".join(_text(v) for v in value)
    return str(value)


def bytes_as_text(value: bytes) -> str:
    """``value`` as text: UTF-8 as is, anything else (invalid bytes, control characters)
    escaped the way Python writes it in a bytes literal (``\\xff``, ``\\n``)."""
    text = value.decode("utf-8", errors="backslashreplace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def time_text(ms: int | None) -> str | None:
    """A record timestamp as ISO 8601 UTC with milliseconds (None: none)."""
    if ms is None:
        return None
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    except (OverflowError, ValueError, OSError):  # past year 9999
        return str(ms)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
