"""Print the import graph of a Python package, read from its source with ``ast``; exit 1 on a cycle.

    python scripts/import_graph.py walkit_bookie            # modules and their imports
    python scripts/import_graph.py walkit_bookie --rooms    # collapsed to subpackages
    python scripts/import_graph.py walkit --dot > walkit.dot  # Graphviz (dot -Tsvg walkit.dot)
    python scripts/import_graph.py walkit_bookie --rooms --outside walkit   # and what it uses of walkit
    python scripts/import_graph.py --doc docs/architecture.md [--check]     # regenerate the doc's graphs

Every ``import`` counts, at any depth of the module (``if TYPE_CHECKING:`` blocks and imports
inside functions too: they are arrows as well, only later ones). Only imports of modules inside
the package are drawn; ``from pkg.mod import name`` is an arrow to ``pkg.mod.name`` when that
is a module, else to ``pkg.mod``. Importing a submodule also runs its parents' ``__init__``;
those implicit arrows are not drawn (Python resolves them whatever the order).

``--rooms`` collapses each module to its first ``--depth`` name parts (default 2, so
``walkit_bookie.storage._journal`` becomes ``walkit_bookie.storage``) and checks that graph as
well: rooms whose imports run one way. ``--layers`` prints the rooms bottom up (a room after
every room it imports), arrows aligned. ``--outside PKG`` adds the arrows to PKG's rooms.

``--doc FILE`` rewrites the graphs of a Markdown page: each fenced block preceded by a line
``<!-- import_graph.py ARGS -->`` gets the output of those arguments; with ``--check`` nothing is
written and the exit status is 1 when a block is stale (the docs test runs it).
"""

from __future__ import annotations

import argparse
import ast
import re
import shlex
import sys
from collections.abc import Callable, Iterable, Iterator
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


def imports(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> every module name it imports, of any package (``from a import b``: ``a.b``
    and ``a``, as it cannot be told here whether ``b`` is a module)."""
    found: dict[str, set[str]] = {}
    for name, path in modules(root, package).items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found[name] = set()
        for target, names in _imported(tree, name, path.name == "__init__.py"):
            found[name].add(target)
            found[name].update(f"{target}.{n}" for n in names)
    return found


def graph(root: Path, package: str, outside: str | None = None) -> dict[str, set[str]]:
    """Module -> the modules of the same package it imports (and of ``outside``, if given)."""
    known = modules(root, package)
    targets = known if outside is None else {**known, **modules(root, outside)}
    edges: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for target, names in _imported(tree, name, path.name == "__init__.py"):
            hits = [f"{target}.{n}" for n in names if f"{target}.{n}" in targets]
            if not hits and target in targets:
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


def layered(edges: dict[str, set[str]]) -> list[str]:
    """The nodes bottom up: each after every node it imports (by height, then by name)."""
    height: dict[str, int] = {}

    def measure(node: str, seen: frozenset[str]) -> int:
        if node not in height:
            below = [measure(t, seen | {node}) for t in edges.get(node, ()) if t not in seen]
            height[node] = 1 + max(below, default=-1)
        return height[node]

    return sorted(edges, key=lambda node: (measure(node, frozenset()), node))


def render(edges: dict[str, set[str]], dot: bool, layers: bool = False) -> Iterable[str]:
    if dot:
        yield "digraph imports {"
        yield "  rankdir=LR; node [shape=box, fontsize=10];"
        for name in sorted(edges):
            yield f'  "{name}";'
            for target in sorted(edges[name]):
                yield f'  "{name}" -> "{target}";'
        yield "}"
        return
    names = layered(edges) if layers else sorted(edges)
    width = max(map(len, names), default=0) if layers else 0
    for name in names:
        targets = ", ".join(sorted(edges[name])) or "-"
        yield f"{name:{width}} -> {targets}"


#: The line before a generated block, naming the arguments that draw it.
DOC_MARK = re.compile(r"^<!-- import_graph\.py (?P<args>[^>]*?) -->\n(?P<fence>```\w*\n)", re.M)


def update_doc(
    text: str,
    draw: Callable[[list[str]], list[str]],
    mark: re.Pattern[str] = DOC_MARK,
    end: str = "```",
) -> str:
    """``text`` with what ``draw(args)`` prints between each ``mark`` (a line naming the
    arguments, group ``args``, then a fence) and the next ``end``."""
    out: list[str] = []
    at = 0
    for found in mark.finditer(text):
        stop = text.index(end, found.end())
        out.append(text[at : found.end()])
        out.append("".join(f"{line}\n" for line in draw(shlex.split(found["args"]))))
        at = stop
    out.append(text[at:])
    return "".join(out)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("package", nargs="?", help="a top-level package, e.g. walkit_bookie")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--rooms", action="store_true", help="collapse to subpackages")
    parser.add_argument("--depth", type=int, default=2, help="name parts of a room (--rooms)")
    parser.add_argument("--dot", action="store_true", help="print Graphviz dot")
    parser.add_argument("--layers", action="store_true", help="bottom up, arrows aligned")
    parser.add_argument("--outside", metavar="PKG", help="also draw the arrows into PKG")
    parser.add_argument("--quiet", action="store_true", help="print only a cycle")
    parser.add_argument("--doc", type=Path, metavar="FILE", help="regenerate FILE's graphs")
    parser.add_argument("--check", action="store_true", help="with --doc: only compare")
    return parser


def draw(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """(the lines of the graph, the cycles found in it)."""
    edges = graph(args.root, args.package, args.outside)
    checked = [("modules", edges)]
    if args.rooms:
        checked.append(("rooms", collapse(edges, args.depth)))
    cycles = [
        f"import cycle between {what}: {' -> '.join(find_cycle(tree, tangle))}"
        for what, tree in checked
        for tangle in tangles(tree)
    ]
    return list(render(checked[-1][1], args.dot, args.layers)), cycles


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.doc is not None:
        return _doc(parser, args)
    if args.package is None:
        parser.error("name a package, or --doc FILE")
    if not (args.root / args.package).is_dir():
        parser.error(f"no package {args.package!r} under {args.root}")
    lines, cycles = draw(args)
    if not args.quiet:
        for line in lines:
            print(line)
    for cycle in cycles:
        print(cycle, file=sys.stderr)
    return 1 if cycles else 0


def _doc(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    text = args.doc.read_text(encoding="utf-8")
    status = 0

    def from_args(words: list[str]) -> list[str]:
        nonlocal status
        block = parser.parse_args([*words, "--root", str(args.root)])
        lines, cycles = draw(block)
        for cycle in cycles:
            print(f"{args.doc}: {cycle}", file=sys.stderr)
            status = 1
        return lines

    fresh = update_doc(text, from_args)
    if fresh == text:
        return status
    if args.check:
        print(
            f"{args.doc}: the import graphs are stale: run {Path(__file__).name} --doc {args.doc}"
        )
        return 1
    args.doc.write_text(fresh, encoding="utf-8")
    return status


if __name__ == "__main__":
    sys.exit(main())
