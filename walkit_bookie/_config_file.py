"""The bookie's config file (``walkit-bookie --config FILE``): TOML, a key per option.

The keys are the options' names, the flags' words with ``_`` for ``-`` (``journal_max_size``
for ``--journal-max-size``; the few flags named otherwise say their key in the reference in
docs/bookie.md), in one flat list as BookKeeper's bk_server.conf has them. Values are TOML's
types; sizes and rates may be written as on the command line (``"256MiB"``, ``"64MiB/s"``).
Each value gets the checks its option declares; an unknown key, a bad value or a file that
is not TOML is a ConfigurationError naming the file and the key.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Collection, Sequence
from typing import Any

from walkit._core.options import Option, declared
from walkit.errors import ConfigurationError

__all__ = ["read_config_file"]


def read_config_file(
    path: str, classes: Sequence[type], exclude: Collection[str] = ()
) -> dict[str, Any]:
    """The options set in the TOML file ``path``, by name, checked: keys are the options of
    ``classes`` but ``exclude``."""
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except OSError as exc:
        raise ConfigurationError(f"cannot read config file {path}: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"config file {path} is not TOML: {exc}") from None
    known: dict[str, Option] = {
        field.name: option
        for cls in classes
        for field, option in declared(cls)
        if field.name not in exclude
    }
    values: dict[str, Any] = {}
    for key, value in data.items():
        option = known.get(key)
        if option is None:
            raise ConfigurationError(f"config file {path}: unknown key {key!r}{_hint(key, known)}")
        if isinstance(value, dict):
            raise ConfigurationError(
                f"config file {path}: {key} is a table; options are plain keys (key = value)"
            )
        try:
            values[key] = option.kind.from_value(value)
        except ValueError as exc:
            raise ConfigurationError(f"config file {path}, key {key}: {exc}") from None
    return values


def _hint(key: str, known: Collection[str]) -> str:
    close = difflib.get_close_matches(key.replace("-", "_"), known, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known keys: {', '.join(sorted(known))})"
