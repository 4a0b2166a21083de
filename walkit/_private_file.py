"""Reading a file that holds a secret (a token, a password): only its owner may read it."""

from __future__ import annotations

import os
import stat

from walkit.errors import ConfigurationError

__all__ = ["read_private_text"]


def read_private_text(path: str, what: str, *, limit: int = 1024 * 1024) -> str:
    """The text of ``path`` (at most ``limit`` bytes), a ``what`` such as "auth token file".
    ConfigurationError when it cannot be read, is not UTF-8, or is readable by group or
    others (its mode is checked on the open file, so a swap in between does not matter)."""
    try:
        with open(path, encoding="utf-8") as file:
            mode = os.fstat(file.fileno()).st_mode
            text = file.read(limit)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read the {what} {path}: {exc}") from None
    if mode & 0o077:
        raise ConfigurationError(
            f"the {what} {path} is readable by others (group or world; mode "
            f"{stat.S_IMODE(mode):04o}): chmod 600 it"
        )
    return text
