"""ZooKeeper session security: digest credentials from a file, and the ACL walkit's nodes get.

A credentials file holds one ``user:password`` line (blank lines and ``#`` comments are
skipped); like the token files, it must not be readable by group or others. With it, the
session authenticates with ZooKeeper's ``digest`` scheme and every node the store creates gets
one ACL entry: that identity may do everything, nobody else anything (ZooKeeper's
``CREATOR_ALL_ACL``; ledger metadata holds password hashes, so others do not even read).
"""

from __future__ import annotations

import os
import stat
from typing import final

import attrs
from kazoo.security import ACL, make_digest_acl

from walkit.errors import ConfigurationError

__all__ = ["DigestCredentials", "read_credentials_file"]


@final
@attrs.frozen
class DigestCredentials:
    """A ZooKeeper digest identity (the password never shows in a repr)."""

    user: str
    password: str = attrs.field(repr=False)
    source: str = ""

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """kazoo's ``auth_data``: sent again on every (re)connection."""
        return [("digest", f"{self.user}:{self.password}")]

    @property
    def acl(self) -> list[ACL]:
        """The ACL of every node this identity creates: all rights to it, none to others."""
        return [make_digest_acl(self.user, self.password, all=True)]


def read_credentials_file(path: str) -> DigestCredentials:
    """The ``user:password`` in ``path``. ConfigurationError says what is wrong (never the
    password)."""
    try:
        with open(path, encoding="utf-8") as file:
            mode = os.fstat(file.fileno()).st_mode
            text = file.read(64 * 1024)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(
            f"cannot read the ZooKeeper credentials file {path}: {exc}"
        ) from exc
    if mode & 0o077:
        raise ConfigurationError(
            f"the ZooKeeper credentials file {path} is readable by others "
            f"(mode {stat.S_IMODE(mode):04o}): chmod 600 it"
        )
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    if not lines:
        raise ConfigurationError(f"the ZooKeeper credentials file {path} holds no user:password")
    user, colon, password = lines[0].partition(":")
    if not colon or not user or not password:
        raise ConfigurationError(
            f"the ZooKeeper credentials file {path} must hold one user:password line "
            "(a non-empty user and password)"
        )
    if len(lines) > 1:
        raise ConfigurationError(
            f"the ZooKeeper credentials file {path} holds more than one line; "
            "it must hold one user:password"
        )
    return DigestCredentials(user=user, password=password, source=path)
