"""Run a server from another checkout beside this one's, in one benchmark run (``--compare-tree``).

A compared tree is another checkout of walkit (a ``git worktree`` at an older commit, say). Its
processes run on this process's interpreter and packages with the tree first on the import
path (``PYTHONPATH``) and as their working directory, so that the two sides differ by their
code only: no venv is needed in the tree, and a package the tree lacks comes from this one's
venv (the tree's own ``.venv`` is not used: its packages could differ too). bench/kv.py runs
the KV example's replicas this way, bench/bookie.py the bookie.

The trees take turns within each run, in an order that rotates from run to run (``rotated``),
so that a drift of the machine (other load, the disk) falls on both alike.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def add_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """The ``--compare-tree DIR`` option, declared once for every benchmark that has it."""
    parser.add_argument(
        "--compare-tree",
        metavar="DIR",
        type=tree,
        help=f"also run {what} from this other checkout of walkit, alternating with this one's "
        "(its code on this interpreter: DIR first on the import path)",
    )


def tree(text: str) -> Path:
    """A checkout of walkit, resolved (argparse type: a clear error for anything else)."""
    path = Path(text).resolve()
    if not (path / "walkit" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(
            f"{text}: not a checkout of walkit (no walkit/__init__.py)"
        )
    return path


def tree_command(tree: Path, argv: Sequence[str]) -> list[str]:
    """``argv`` run with ``tree`` first on the import path (``env`` execs, so the pid is the
    command's own, for its CPU)."""
    return ["env", f"PYTHONPATH={tree}", *argv]


def check_imports(tree: Path, module: str) -> None:
    """Fail unless ``module`` imports from ``tree`` when run as ``tree_command`` runs it (an
    editable install or a stray working directory would otherwise run the wrong code)."""
    code = f"import {module}; print({module}.__file__)"
    found = subprocess.run(
        tree_command(tree, [sys.executable, "-c", code]),
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(found).resolve().is_relative_to(tree):
        raise RuntimeError(f"{module} imports from {found}, not from {tree}")


def cpu_seconds(pids: Sequence[int]) -> float:
    """User + system CPU seconds of these processes so far (Linux ``/proc/<pid>/stat``)."""
    total = 0.0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def rotated(items: Sequence[T], run: int) -> list[T]:
    """``items`` in the order of run ``run`` (0-based): each goes first in some run."""
    turn = run % len(items) if items else 0
    return [*items[turn:], *items[:turn]]
