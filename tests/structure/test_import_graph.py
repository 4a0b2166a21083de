"""The import graph (scripts/import_graph.py): walkit_bookie's rooms run one way, no cycles."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "import_graph.py"


def run(*args: str, root: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--root", str(root)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_walkit_bookie_has_no_cycle_between_modules_or_rooms() -> None:
    done = run("walkit_bookie", "--rooms")
    assert done.returncode == 0, done.stderr
    rooms = dict(line.split(" -> ") for line in done.stdout.splitlines())
    # lifecycle -> server -> storage, all three read the config; nothing points back up.
    assert rooms["walkit_bookie.storage"] == "walkit_bookie._config"
    assert rooms["walkit_bookie.server"] == "walkit_bookie._config, walkit_bookie.storage"
    assert "walkit_bookie.server" in rooms["walkit_bookie.lifecycle"]


def test_walkit_has_no_cycle_between_modules_or_rooms() -> None:
    # Type-only imports count too: walkit.log's helpers name the LogContext protocol, not Log,
    # and walkit.errors names no module of walkit (every one raises its errors).
    done = run("walkit", "--rooms")
    assert done.returncode == 0, done.stderr
    assert "cycle" not in done.stderr
    rooms = dict(line.split(" -> ") for line in done.stdout.splitlines())
    assert rooms["walkit.errors"] == "-"
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import import_graph
    finally:
        sys.path.remove(str(SCRIPT.parent))
    edges = import_graph.graph(REPO, "walkit")
    assert import_graph.tangles(edges) == []
    assert import_graph.tangles(import_graph.collapse(edges, 2)) == []
    # The log's helpers point at the protocols, never back at the handle that builds them.
    helpers = ("_reader", "_writer", "_roll", "_writer_state", "_recovery", "_link", "_snapshot")
    for helper in (*helpers, "_retention", "_gc"):
        assert "walkit.log._log" not in edges[f"walkit.log.{helper}"], helper


@pytest.mark.parametrize("relative", [False, True])
def test_a_cycle_is_found_and_fails(tmp_path: Path, relative: bool) -> None:
    pkg = tmp_path / "tangled"
    (pkg / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inner" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from tangled.inner import b\n")
    back = "from .. import a" if relative else "import tangled.a"
    (pkg / "inner" / "b.py").write_text(f"def f():\n    {back}\n")
    done = run("tangled", root=tmp_path)
    assert done.returncode == 1
    assert "import cycle between modules: tangled.a -> tangled.inner.b -> tangled.a" in done.stderr
    (pkg / "inner" / "b.py").write_text("X = 1\n")
    assert run("tangled", root=tmp_path).returncode == 0
    rooms = run("tangled", "--rooms", root=tmp_path)
    assert rooms.returncode == 0 and "tangled.a -> tangled.inner" in rooms.stdout


def test_a_missing_package_is_a_clear_error(tmp_path: Path) -> None:
    done = run("nothing_here", root=tmp_path)
    assert done.returncode == 2 and "no package 'nothing_here'" in done.stderr
