"""argparse types shared by the `walkit` subcommands: each turns bad text into a one-line
error (argparse exits 2 with it), never a traceback."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["at_least", "seconds"]


def at_least(minimum: int, what: str = "") -> Callable[[str], int]:
    """An int type refusing values below ``minimum`` (``what`` names the value in errors)."""
    label = f"{what} " if what else ""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{label}{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{label}{value} must be at least {minimum}")
        return value

    return parse


def seconds(text: str) -> float:
    """A finite number of seconds >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}") from None
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value
