"""Tokens for ``walkit sandbox --auth``: made once and kept in ``DATA_DIR/auth`` (files 0600 in
a 0700 directory): the bookies' token file (``PRINCIPAL:TOKEN`` lines), the client's token, and
the token the bookies' own autorecovery workers send."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import final

import attrs

__all__ = ["SandboxTokens", "sandbox_tokens"]


@final
@attrs.frozen
class SandboxTokens:
    """Paths of the token files."""

    bookie_file: Path
    client_file: Path
    autorecovery_file: Path


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def sandbox_tokens(directory: Path) -> SandboxTokens:
    """The sandbox's token files in ``directory``, made if missing."""
    paths = SandboxTokens(
        bookie_file=directory / "bookie-tokens",
        client_file=directory / "client-token",
        autorecovery_file=directory / "autorecovery-token",
    )
    if all(p.exists() for p in (paths.bookie_file, paths.client_file, paths.autorecovery_file)):
        return paths
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    client, autorecovery = secrets.token_hex(32), secrets.token_hex(32)
    _write(paths.client_file, client + "\n")
    _write(paths.autorecovery_file, autorecovery + "\n")
    _write(paths.bookie_file, f"client:{client}\nautorecovery:{autorecovery}\n")
    return paths
