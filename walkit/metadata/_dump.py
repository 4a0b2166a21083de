"""Export, import and migration of a cluster's metadata, through the MetadataStore interface.

An export walks the whole tree (so kinds of nodes added later are carried without a change
here), leaving out ephemeral nodes (live sessions: bookie registrations, workers' locks,
elections) and the driver's own id-counter nodes (``/idgen`` on ZooKeeper), and reads the id
counters. An import writes it into an *empty* store, the instance id last: a store filled
halfway (an import that died) has no instance id, so bookies refuse it (their cookies name
the cluster) instead of taking it for a whole cluster. The file format is
:mod:`walkit._core.metadata_dump`.

A dump is read node by node, not at one instant: a cluster that changes its metadata while it
is exported (a writer rolling its ledger, a bookie's ensemble change) may be caught half way.
:func:`migrate_metadata` therefore refuses a source with live sessions; see
``docs/operations.md``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar, final

import anyio
import attrs

from walkit._core.metadata_dump import MetadataDump
from walkit._groups import collapse
from walkit._version import __version__
from walkit.errors import (
    ClusterRunningError,
    InvalidArgumentError,
    MetadataNotEmptyError,
    NoSuchNodeError,
)
from walkit.metadata._cluster import (
    BOOKIES_AVAILABLE_PATH,
    BOOKIES_READONLY_PATH,
    ID_COUNTERS_PATH,
    INSTANCE_ID_PATH,
)
from walkit.metadata._paths import ROOT, check_id_value, check_name, check_path, join, parent_of
from walkit.metadata._store import MetadataStore

__all__ = ["Export", "export_metadata", "import_metadata", "migrate_metadata"]

#: Store calls in flight at once while walking or filling a tree (ZooKeeper answers each in
#: about a millisecond; one at a time, a tree of 100,000 ledgers would take minutes).
CONCURRENCY = 16

T = TypeVar("T")
R = TypeVar("R")


@final
@attrs.frozen
class Export:
    """What an export found: the dump, and the ephemeral nodes it left out (paths)."""

    dump: MetadataDump
    ephemeral: tuple[str, ...]

    @property
    def registered_bookies(self) -> tuple[str, ...]:
        """The bookies registered when the dump was taken (running ones)."""
        bases = (BOOKIES_AVAILABLE_PATH + "/", BOOKIES_READONLY_PATH + "/")
        return tuple(p.rpartition("/")[2] for p in self.ephemeral if p.startswith(bases))


def _scheme(store: MetadataStore) -> str:
    return store.url.partition("://")[0] or type(store).__name__


async def export_metadata(store: MetadataStore) -> Export:
    """Read every persistent node and every id counter of ``store``."""
    nodes: list[tuple[str, bytes]] = []
    ephemeral: list[str] = []
    level = [ROOT]
    while level:
        found = await _each(level, lambda path: _visit_children(store, path))
        level = []
        for children in found:
            for path, value, is_ephemeral in children:
                if is_ephemeral:
                    ephemeral.append(path)
                else:
                    nodes.append((path, value))
                    level.append(path)
    counters = await store.id_counters()
    dump = MetadataDump(
        nodes=tuple(sorted(nodes, key=lambda n: n[0].split("/"))),
        counters=counters,
        source=_scheme(store),
        walkit_version=__version__,
    )
    return Export(dump, tuple(sorted(ephemeral)))


async def _visit_children(store: MetadataStore, path: str) -> list[tuple[str, bytes, bool]]:
    try:
        names = await store.children(path)
    except NoSuchNodeError:
        return []  # deleted while we walked
    out = []
    for name in names:
        child = join(path, name)
        if child == ID_COUNTERS_PATH:
            continue  # the zk driver's counters: in the dump's counters instead
        try:
            node = await store.get_node(child)
        except NoSuchNodeError:
            continue
        out.append((child, node.value, node.ephemeral))
    return out


def check_dump_tree(dump: MetadataDump) -> None:
    """InvalidArgumentError unless the dump's nodes form a tree an empty store can take:
    valid paths, each once, every parent present (before its children)."""
    seen = {ROOT}
    for path, _value in dump.nodes:
        try:
            check_path(path)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"the dump holds a bad node path: {exc}") from None
        if path == ROOT or path in seen:
            raise InvalidArgumentError(f"the dump holds node {path} twice")
        if path == ID_COUNTERS_PATH or path.startswith(ID_COUNTERS_PATH + "/"):
            raise InvalidArgumentError(
                f"the dump holds {path}: id counters go in its counters, not in nodes"
            )
        if parent_of(path) not in seen:
            raise InvalidArgumentError(f"the dump holds {path} but not its parent")
        seen.add(path)
    for name, last in dump.counters.items():
        check_name(name, what="id counter")
        check_id_value(last)


async def check_empty(store: MetadataStore) -> None:
    """MetadataNotEmptyError unless ``store`` holds no node at all (besides its root)."""
    found = await store.children(ROOT)
    if found:
        raise MetadataNotEmptyError(
            f"{store.url} is not empty (it holds {', '.join('/' + n for n in found[:5])}"
            f"{' ...' if len(found) > 5 else ''}): import only into a new sqlite file or an "
            "empty ZooKeeper root"
        )


async def import_metadata(store: MetadataStore, dump: MetadataDump) -> None:
    """Write ``dump`` into the empty ``store``: nodes parents first, the instance id last,
    then the id counters. Refuses (MetadataNotEmptyError) a store that holds anything."""
    check_dump_tree(dump)
    await check_empty(store)
    by_depth: dict[int, list[tuple[str, bytes]]] = {}
    last: list[tuple[str, bytes]] = []
    for path, value in dump.nodes:
        if path == INSTANCE_ID_PATH:
            last.append((path, value))
        else:
            by_depth.setdefault(path.count("/"), []).append((path, value))

    async def create(node: tuple[str, bytes]) -> None:
        await store.create(node[0], node[1], make_parents=False)

    for depth in sorted(by_depth):
        await _each(by_depth[depth], create)
    for node in last:
        await create(node)
    for name, counter in sorted(dump.counters.items()):
        await store.advance_id_counter(name, counter)


async def migrate_metadata(
    source: MetadataStore, destination: MetadataStore, *, force: bool = False
) -> Export:
    """Copy a stopped cluster's metadata from ``source`` into the empty ``destination``.

    Refuses (ClusterRunningError) a source with live sessions -- ephemeral nodes: registered
    bookies, autorecovery locks, elections -- unless ``force``, and (MetadataNotEmptyError) a
    destination that holds anything. Returns what was exported.
    """
    await check_empty(destination)
    found = await export_metadata(source)
    if found.ephemeral and not force:
        shown = ", ".join(found.ephemeral[:5]) + (" ..." if len(found.ephemeral) > 5 else "")
        raise ClusterRunningError(
            f"{source.url} has live sessions ({shown}): stop the bookies and every other "
            "process of the cluster first (docs/operations.md), or pass --force to copy it "
            "anyway"
        )
    await import_metadata(destination, found.dump)
    return found


async def _each(items: Sequence[T], work: Callable[[T], Awaitable[R]]) -> list[R]:
    """``work(item)`` for every item, CONCURRENCY at a time; the results in item order."""
    results: dict[int, R] = {}
    todo = iter(enumerate(items))

    async def worker() -> None:
        for index, item in todo:
            results[index] = await work(item)

    try:
        async with anyio.create_task_group() as group:
            for _ in range(min(CONCURRENCY, len(items))):
                group.start_soon(worker)
    except BaseExceptionGroup as group_error:
        raise collapse(group_error) from None
    return [results[index] for index in range(len(items))]
