"""Print the import graph of a Python package, read from its source with ``ast``; exit 1 on a cycle.

    python scripts/import_graph.py walkit_bookie            # modules and their imports
    python scripts/import_graph.py walkit_bookie --rooms    # collapsed to subpackages
    python scripts/import_graph.py walkit --dot > walkit.dot  # Graphviz (dot -Tsvg walkit.dot)

Every ``import`` counts, at any depth of the module (``if TYPE_CHECKING:`` blocks and imports
inside functions too: they are arrows as well, only later ones). Only imports of modules inside
the package are drawn; ``from pkg.mod import name`` is an arrow to ``pkg.mod.name`` when that
is a module, else to ``pkg.mod``. Importing a submodule also runs its parents' ``__init__``;
those implicit arrows are not drawn (Python resolves them whatever the order).

``--rooms`` collapses each module to its first ``--depth`` name parts (default 2, so
``walkit_bookie.storage._journal`` becomes ``walkit_bookie.storage``) and checks that graph as
well: rooms whose imports run one way.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path


def modules(root: Path, package: str) -> dict[str, Path]:
    """Every module of the package under ``root`` (``root/package``), by dotted name."""
    found: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported(tree: ast.AST, name: str, is_package: bool) -> Iterator[tuple[str, list[str]]]:
    """(module, names) for each import in the tree, relative imports resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                if not is_package:
                    parts.pop()
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            yield base, [alias.name for alias in node.names]


def graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports."""
    known = modules(root, package)
    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for target, names in _imported(tree, name, path.name == "__init__.py"):
            hits = [f"{target}.{n}" for n in names if f"{target}.{n}" in known]
            if not hits and target in known:
                hits = [target]
            edges[name].update(hit for hit in hits if hit != name)
    return edges


def collapse(edges: dict[str, set[str]], depth: int) -> dict[str, set[str]]:
    """The graph between the first ``depth`` parts of each name (no arrows inside a room)."""

    def room(name: str) -> str:
        return ".".join(name.split(".")[:depth])

    rooms: dict[str, set[str]] = {}
    for name, targets in edges.items():
        here = rooms.setdefault(room(name), set())
        here.update(room(t) for t in targets if room(t) != room(name))
    return rooms


def tangles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of more than one node: each holds at least one cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            part: list[str] = []
            while not part or part[-1] != node:
                part.append(stack.pop())
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return sorted(found)


def find_cycle(edges: dict[str, set[str]], among: list[str]) -> list[str]:
    """One cycle through the first of ``among`` (a tangle), as [a, b, ..., a]."""
    inside = set(among)
    start = among[0]
    paths = {start: [start]}
    todo = [start]
    while todo:  # breadth first: the shortest way back to start
        node = todo.pop(0)
        for target in sorted(edges.get(node, set()) & inside):
            if target == start:
                return [*paths[node], start]
            if target not in paths:
                paths[target] = [*paths[node], target]
                todo.append(target)
    raise AssertionError("a tangle always holds a cycle")


def render(edges: dict[str, set[str]], dot: bool) -> Iterable[str]:
    if dot:
        yield "digraph imports {"
        yield "  rankdir=LR; node [shape=box, fontsize=10];"
        for name in sorted(edges):
            yield f'  "{name}";'
            for target in sorted(edges[name]):
                yield f'  "{name}" -> "{target}";'
        yield "}"
        return
    for name in sorted(edges):
        targets = ", ".join(sorted(edges[name])) or "-"
        yield f"{name} -> {targets}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", help="a top-level package, e.g. walkit_bookie")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--rooms", action="store_true", help="collapse to subpackages")
    parser.add_argument("--depth", type=int, default=2, help="name parts of a room (--rooms)")
    parser.add_argument("--dot", action="store_true", help="print Graphviz dot")
    parser.add_argument("--quiet", action="store_true", help="print only a cycle")
    args = parser.parse_args(argv)
    if not (args.root / args.package).is_dir():
        parser.error(f"no package {args.package!r} under {args.root}")
    edges = graph(args.root, args.package)
    checked = [("modules", edges)]
    if args.rooms:
        checked.append(("rooms", collapse(edges, args.depth)))
    if not args.quiet:
        for line in render(checked[-1][1], args.dot):
            print(line)
    status = 0
    for what, tree in checked:
        for tangle in tangles(tree):
            cycle = " -> ".join(find_cycle(tree, tangle))
            print(f"import cycle between {what}: {cycle}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
