"""The packages of the ``bookie`` extra, and the one line that says how to install them.

A client install (``pip install walkit``) has no bookie server in it: the bookie's index
(lmdb), its admin endpoint (h11) and its metrics (prometheus-client) come with
``pip install 'walkit[bookie]'``, as BookKeeper ships its client apart from its server. The
bookie's commands check for them before importing the bookie, so that a client install says
what to install instead of printing a traceback.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Final

__all__ = [
    "BOOKIE_MODULES",
    "bookie_hint",
    "bookie_main",
    "missing_bookie_modules",
    "require_bookie_extra",
]

#: The modules the bookie imports that a client install lacks.
BOOKIE_MODULES: Final = ("lmdb", "h11", "prometheus_client")


def missing_bookie_modules() -> list[str]:
    """Which of :data:`BOOKIE_MODULES` cannot be imported here."""
    return [name for name in BOOKIE_MODULES if importlib.util.find_spec(name) is None]


def bookie_hint(what: str, missing: list[str]) -> str:
    """One line: ``what`` needs the bookie extra, what is missing, how to install it."""
    return (
        f"{what} needs walkit's bookie extra (missing: {', '.join(missing)}): "
        "pip install 'walkit[bookie]'"
    )


def require_bookie_extra(what: str) -> None:
    """Exit 1 with :func:`bookie_hint` on stderr when the bookie extra is not installed."""
    missing = missing_bookie_modules()
    if missing:
        print(bookie_hint(what, missing), file=sys.stderr)
        raise SystemExit(1)


def bookie_main() -> None:
    """The ``walkit-bookie`` command: the bookie's own, once its packages are there."""
    require_bookie_extra("walkit-bookie")
    from walkit_bookie.cli import main

    sys.exit(main())
