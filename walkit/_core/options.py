"""Building an attrs options class from keyword arguments, with clear errors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

import attrs

from walkit.errors import ConfigurationError

__all__ = ["options_from_kwargs"]

T = TypeVar("T")


def options_from_kwargs(cls: type[T], options: Mapping[str, Any], what: str) -> T:
    """``cls(**options)``; unknown names and bad values raise ConfigurationError naming
    ``what`` ("client", "log") and the known options."""
    known = {a.name for a in attrs.fields(cls)}  # type: ignore[arg-type]  # cls is attrs
    unknown = sorted(set(options) - known)
    if unknown:
        raise ConfigurationError(
            f"unknown {what} option(s) {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"bad {what} option: {exc}") from None
