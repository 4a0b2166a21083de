"""Errors of the log layer (in the walkit.errors hierarchy)."""

from __future__ import annotations

from walkit.errors import NoSuchNodeError


class NoSuchLogError(NoSuchNodeError):
    """The log does not exist (``Log.open(..., create=False)``, ``walkit log show``)."""


__all__ = ["NoSuchLogError"]
