"""Running the `walkit` command as a user would."""

from __future__ import annotations

import os
import subprocess
import sys


def walkit(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `walkit ARGS` as a user would (no WALKIT_METADATA from the environment)."""
    return subprocess.run(
        [sys.executable, "-m", "walkit.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, WALKIT_METADATA=""),
    )
