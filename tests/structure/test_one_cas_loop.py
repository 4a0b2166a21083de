"""One compare-and-set loop: only walkit/metadata/_cas.py catches MetadataVersionError.

Every metadata update reads, asks a decision and compare-and-sets through
``walkit.metadata.cas_update`` (or ``lost_race`` for a single conditional write), so that every
loop pauses with the one backoff policy, gives up after the same number of lost races and says
so the same way. An ``ast`` scan of walkit/ and walkit_bookie/ finds any other ``except`` that
names the error, alone or in a tuple, by its bare or dotted name.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: The one module that may catch it.
THE_LOOP = "walkit/metadata/_cas.py"


def _names(node: ast.expr | None) -> list[str]:
    if node is None:
        return []
    if isinstance(node, ast.Tuple):
        return [n for elt in node.elts for n in _names(elt)]
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    return []


def version_catches(source: str) -> list[int]:
    """The lines of every ``except`` clause that catches MetadataVersionError."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ExceptHandler) and "MetadataVersionError" in _names(node.type)
    ]


def test_only_the_cas_loop_catches_lost_races() -> None:
    offenders = {}
    for package in ("walkit", "walkit_bookie"):
        for path in sorted((REPO / package).rglob("*.py")):
            name = path.relative_to(REPO).as_posix()
            if name == THE_LOOP:
                continue
            lines = version_catches(path.read_text(encoding="utf-8"))
            if lines:
                offenders[name] = lines
    assert offenders == {}, "go through walkit.metadata.cas_update (or lost_race)"
    assert version_catches((REPO / THE_LOOP).read_text(encoding="utf-8")), "the scan is blind"


def test_the_scan_finds_every_spelling() -> None:
    source = """
try:
    pass
except MetadataVersionError:
    pass
except (NoSuchNodeError, errors.MetadataVersionError):
    pass
except OSError:
    pass
"""
    assert version_catches(source) == [4, 6]
