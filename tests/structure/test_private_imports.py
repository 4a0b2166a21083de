"""The bookie and the client share code by public names only: ``walkit_bookie`` imports no
private module of ``walkit`` but the pure protocol (``walkit._core``), and ``walkit`` imports
no private module of ``walkit_bookie``. What they share lives in ``walkit.shared``, so renaming
a private module of the client cannot break the server. Every ``import`` counts (inside
functions and ``if TYPE_CHECKING:`` blocks too), as read by ``scripts/import_graph.py``."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "import_graph.py"

#: Private modules another package may import all the same: the pure, I/O-free protocol.
SHARED_PRIVATE = ("walkit._core",)


def _script() -> ModuleType:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import import_graph
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return import_graph


def _private(target: str, package: str) -> bool:
    """Whether ``target`` (a module, or a name in one) reaches past a private name of
    ``package``, outside what it shares on purpose."""
    parts = target.split(".")
    if parts[0] != package:
        return False
    if any(target == p or target.startswith(f"{p}.") for p in SHARED_PRIVATE):
        return False
    return any(part.startswith("_") and not part.startswith("__") for part in parts[1:])


def private_imports(root: Path, importer: str, imported: str) -> list[str]:
    found = _script().imports(root, importer)
    return sorted(
        f"{module} imports {target}"
        for module, targets in found.items()
        for target in targets
        if _private(target, imported)
    )


def test_the_bookie_imports_no_private_module_of_the_client() -> None:
    assert private_imports(REPO, "walkit_bookie", "walkit") == []


def test_the_client_imports_no_private_module_of_the_bookie() -> None:
    assert private_imports(REPO, "walkit", "walkit_bookie") == []


def test_a_private_import_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "walkit_bookie"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ok.py").write_text(
        "from walkit._core.wire import encode_frame\nfrom walkit.shared import get_logger\n"
    )
    (pkg / "bad.py").write_text(
        "from walkit.net._direct import write_now\n"
        "def f():\n    from walkit._logging import get_logger\n"
    )
    assert private_imports(tmp_path, "walkit_bookie", "walkit") == [
        "walkit_bookie.bad imports walkit._logging",
        "walkit_bookie.bad imports walkit._logging.get_logger",
        "walkit_bookie.bad imports walkit.net._direct",
        "walkit_bookie.bad imports walkit.net._direct.write_now",
    ]
