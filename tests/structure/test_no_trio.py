"""One runtime layer: walkit's code is written against AnyIO, so it runs on trio and asyncio
alike, and no module imports trio itself but two places:

- ``walkit.testing``, the deterministic simulation, which runs whole clusters on trio's
  ``MockClock``;
- ``walkit._loop``, the one backend adapter (what AnyIO does not offer, once per backend).

Every ``import trio`` and ``from trio... import`` counts, at any depth of a module (inside
functions and ``if TYPE_CHECKING:`` blocks too). docs/architecture.md, "Where each runtime
runs", says which loop runs where.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("walkit", "walkit_bookie")

#: Where trio may be imported: a module, or a package and everything under it.
ALLOWED = ("walkit.testing", "walkit._loop")


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports_trio(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        if any(name == "trio" or name.startswith("trio.") for name in names):
            return True
    return False


def trio_importers(root: Path) -> set[str]:
    """The modules of walkit and walkit_bookie under ``root`` that import trio."""
    found: set[str] = set()
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if _imports_trio(ast.parse(path.read_text(encoding="utf-8"), str(path))):
                found.add(_module_name(root, path))
    return found


def _allowed(module: str) -> bool:
    return any(module == place or module.startswith(f"{place}.") for place in ALLOWED)


def unported(root: Path) -> list[str]:
    """The modules that import trio where they may not."""
    return sorted(m for m in trio_importers(root) if not _allowed(m))


def test_no_module_imports_trio_outside_the_simulation_and_the_loop_adapter() -> None:
    assert unported(REPO) == [], (
        "these modules import trio: write them against AnyIO (what it lacks goes in "
        "walkit/_loop.py)"
    )


def test_an_import_of_trio_is_found(tmp_path: Path) -> None:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "walkit" / "_loop.py").write_text("import trio\n")
    (tmp_path / "walkit" / "testing").mkdir()
    (tmp_path / "walkit" / "testing" / "__init__.py").write_text("from trio import sleep\n")
    (tmp_path / "walkit" / "ok.py").write_text("import anyio\nfrom walkit import trio_like\n")
    (tmp_path / "walkit" / "plain.py").write_text("import trio.lowlevel\n")
    (tmp_path / "walkit_bookie" / "late.py").write_text(
        "def f():\n    from trio.testing import MockClock\n"
    )
    assert unported(tmp_path) == [
        "walkit.plain",
        "walkit_bookie.late",
    ]
