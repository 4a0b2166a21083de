"""Errors of the log layer (in the walkit.errors hierarchy)."""

from __future__ import annotations

from walkit.errors import NoSuchEntryError, NoSuchNodeError


class NoSuchLogError(NoSuchNodeError):
    """The log does not exist (``Log.open(..., create=False)``, ``walkit log show``)."""


class LogTruncatedError(NoSuchEntryError):
    """Records a reader needs lie before the log's truncation point (``reader(...,
    skip_truncated=False)``; a replica whose snapshot is older than the truncation point)."""


__all__ = ["LogTruncatedError", "NoSuchLogError"]
