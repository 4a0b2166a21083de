"""Layers that hold: the pure core does no I/O, the bookie's lower layers never load the client,
and docs/architecture.md shows the graph the code has.

Every ``import`` counts (inside functions and ``if TYPE_CHECKING:`` blocks too), as read by
``scripts/import_graph.py``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "import_graph.py"

#: What ``walkit._core`` may not import: it decides, it does not wait, read a clock, draw a
#: random number, touch files or sockets, or log (h11's rule; the caller injects all of that).
IMPURE = ("trio", "anyio", "sniffio", "asyncio", "time", "random", "socket", "os", "logging")
#: What the bookie's storage may use of ``walkit``: the pure core, the errors, the logger and
#: the metadata interface (for its garbage collector); the logger comes from walkit.shared.
STORAGE_MAY_USE = ("walkit._core", "walkit.errors", "walkit.shared", "walkit.metadata")
#: The client side: what neither storage nor server may load, even through another module.
CLIENT_SIDE = ("walkit.client", "walkit.ledger", "walkit.log", "walkit.autorecovery")


def _script() -> ModuleType:
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import import_graph
    finally:
        sys.path.remove(str(SCRIPT.parent))
    return import_graph


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(f"{p}.") for p in prefixes)


def impure_imports(root: Path, package: str) -> list[str]:
    found = _script().imports(root, package)
    return sorted(
        f"{module} imports {target}"
        for module, targets in found.items()
        for target in targets
        if _under(target, IMPURE)
        or (_under(target, ("walkit",)) and not _under(target, ("walkit._core", "walkit.errors")))
    )


def test_the_core_is_pure() -> None:
    assert impure_imports(REPO, "walkit._core".replace(".", "/")) == []


def test_an_impure_import_in_the_core_is_found(tmp_path: Path) -> None:
    core = tmp_path / "walkit" / "_core"
    core.mkdir(parents=True)
    (core / "__init__.py").write_text("")
    (core / "ok.py").write_text("import struct\nfrom walkit.errors import WalkitError\n")
    (core / "clock.py").write_text("def now():\n    from time import monotonic\n    return 1\n")
    (core / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import trio\n"
    )
    (core / "up.py").write_text("from walkit.metadata import MetadataStore\n")
    assert impure_imports(tmp_path, "walkit/_core") == [
        "walkit._core.clock imports time",
        "walkit._core.clock imports time.monotonic",
        "walkit._core.typed imports trio",
        "walkit._core.up imports walkit.metadata",
        "walkit._core.up imports walkit.metadata.MetadataStore",
    ]


def _uses_of_walkit(layer: str) -> dict[str, set[str]]:
    found = _script().imports(REPO, "walkit_bookie")
    return {
        module: {t for t in targets if _under(t, ("walkit",))}
        for module, targets in found.items()
        if _under(module, (layer,))
    }


def test_the_bookie_storage_uses_only_the_core_errors_and_the_metadata_interface() -> None:
    uses = _uses_of_walkit("walkit_bookie.storage")
    assert uses, "no storage modules found"
    wrong = {m: sorted(t for t in ts if not _under(t, STORAGE_MAY_USE)) for m, ts in uses.items()}
    assert {m: ts for m, ts in wrong.items() if ts} == {}


def test_the_bookie_below_its_lifecycle_never_loads_the_client() -> None:
    """Through any chain of imports: storage and server (and the config they read) reach no
    module of the client, the ledgers, the logs or autorecovery. The lifecycle may: it runs
    the bookie's own autorecovery worker, which is a client."""
    script = _script()
    # Rooms three names deep: walkit.shared's modules each count for what they import
    # (walkit.shared.cli's argument declarations are the bookie command's, not the server's).
    walkit_rooms = script.collapse(script.graph(REPO, "walkit"), 3)
    bookie = script.collapse(script.graph(REPO, "walkit_bookie", outside="walkit"), 3)
    for layer in ("walkit_bookie.storage", "walkit_bookie.server", "walkit_bookie._config"):
        reached: set[str] = set()
        todo = [room for room in bookie if _under(room, (layer,))]
        assert todo, layer
        while todo:
            room = todo.pop()
            for target in bookie.get(room, set()) | walkit_rooms.get(room, set()):
                if target not in reached and not _under(target, ("walkit_bookie.lifecycle",)):
                    reached.add(target)
                    todo.append(target)
        assert not [r for r in reached if _under(r, CLIENT_SIDE)], (layer, sorted(reached))


def test_importing_the_bookie_loads_no_client() -> None:
    code = (
        "import sys, walkit_bookie, walkit_bookie.cli, walkit_bookie.server\n"
        f"print(sorted(m for m in sys.modules if m.startswith({CLIENT_SIDE!r})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


def test_the_architecture_doc_shows_the_graphs_the_code_has() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--doc", str(REPO / "docs" / "architecture.md"), "--check"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("fresh", [False, True])
def test_a_stale_graph_in_a_doc_is_found_and_rewritten(tmp_path: Path, fresh: bool) -> None:
    pkg = tmp_path / "pkg"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "high.py").write_text("from pkg.low import x\n")
    body = "pkg      -> -\npkg.low  -> -\npkg.high -> pkg.low\n" if fresh else "pkg.low -> pkg\n"
    doc = tmp_path / "doc.md"
    doc.write_text(f"# A\n\n<!-- import_graph.py pkg --rooms --layers -->\n```text\n{body}```\n")

    def run(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(SCRIPT), "--doc", str(doc), "--root", str(tmp_path), *extra],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    checked = run("--check")
    assert checked.returncode == (0 if fresh else 1), checked.stdout
    if not fresh:
        assert "stale" in checked.stdout
        assert run().returncode == 0
        assert run("--check").returncode == 0
    assert "pkg.high -> pkg.low\n```" in doc.read_text()
