"""The one read-decide-compare-and-set loop for metadata (kazoo's ``KazooRetry`` idea).

Every change to a versioned node (ledger metadata, log metadata, under-replication markers,
settings, id counters) goes through :func:`cas_update`: read the node, ask a decision of the
caller (a pure transition from ``walkit._core``, sometimes after I/O the decision needs), write
it with a compare-and-set on the version read, and on a lost race pause with the one backoff
policy of :mod:`walkit._retry` and decide again from a fresh read. Nothing else catches
:class:`~walkit.errors.MetadataVersionError` (``tests/structure`` checks it), so every loop
pauses, gives up and reports alike.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Awaitable, Callable
from typing import Final, Generic, TypeVar, cast, final

import attrs

from walkit._core.backoff import Backoff
from walkit._retry import pause
from walkit.errors import MetadataVersionError, NodeExistsError, NoSuchNodeError, WalkitError
from walkit.metadata._store import MetadataStore

__all__ = [
    "ABSENT",
    "CAS_BACKOFF",
    "CAS_ROUNDS",
    "Decision",
    "cas_update",
    "create_or_set",
    "lost_race",
    "read_or_absent",
]

M_co = TypeVar("M_co", covariant=True)
R_co = TypeVar("R_co", covariant=True)
V = TypeVar("V")
W = TypeVar("W")
R = TypeVar("R")

#: Pauses after losing a compare-and-set race (full jitter, so racers spread out).
CAS_BACKOFF: Final = Backoff(first=0.005, cap=0.2)
#: Lost races in a row before an update gives up.
CAS_ROUNDS: Final = 100
#: The version :func:`read_or_absent` gives a node that does not exist (create it to write).
ABSENT: Final = -1


@final
@attrs.frozen
class Decision(Generic[M_co, R_co]):
    """What one round decided: write ``write`` (None: nothing to write) and return ``result``.

    With ``again``, a successful write is not the end: the loop decides once more from what it
    wrote (a change made of several compare-and-sets, such as OPEN -> IN_RECOVERY -> CLOSED).
    """

    result: R_co
    write: M_co | None = None
    again: bool = False


async def cas_update(
    what: str,
    *,
    read: Callable[[], Awaitable[tuple[V, int]]],
    write: Callable[[W, int], Awaitable[int]],
    decide: Callable[[V], Decision[W, R] | Awaitable[Decision[W, R]]],
    rng: random.Random,
    current: tuple[V, int] | None = None,
    rounds: int = CAS_ROUNDS,
    backoff: Backoff = CAS_BACKOFF,
    exhausted: Callable[[str], WalkitError] = MetadataVersionError,
) -> tuple[V | W, int, R]:
    """Read, decide, compare-and-set until a write lands or the decision writes nothing.

    ``read()`` gives the value and its version; ``write(value, version)`` is the CAS and
    returns the new version (raising MetadataVersionError when the version moved on);
    ``decide(value)`` returns a :class:`Decision` (or an awaitable of one, when it must do
    I/O first, such as recovering a ledger) or raises to refuse the change. ``current`` is a
    value and version the caller already holds, used for the first round instead of a read.
    Returns the value last written (or read), its version and the decision's result. A
    decision with ``again`` must write a value that ``decide`` can read back. After
    ``rounds`` lost races it raises ``exhausted(message)`` naming ``what``.
    """
    held = current
    lost = 0
    while True:
        if held is None:
            held = await read()
        value, version = held
        decided = decide(value)
        decision = await decided if inspect.isawaitable(decided) else decided
        if decision.write is None:
            return value, version, decision.result
        try:
            new_version = await write(decision.write, version)
        except MetadataVersionError:
            lost += 1
            if lost >= rounds:
                raise exhausted(
                    f"{what}: kept losing compare-and-set races ({lost} in a row); try again"
                ) from None
            await pause(backoff, lost - 1, rng)
            held = None
            continue
        if not decision.again:
            return decision.write, new_version, decision.result
        held = (cast(V, decision.write), new_version)


async def lost_race(op: Callable[[], Awaitable[object]]) -> bool:
    """Run one conditional write (a delete or set at a version); True if it lost the race
    (the node changed meanwhile), for the callers to whom a changed node means "leave it"."""
    try:
        await op()
    except MetadataVersionError:
        return True
    return False


async def read_or_absent(store: MetadataStore, path: str) -> tuple[bytes | None, int]:
    """A node's value and version, or (None, :data:`ABSENT`) when there is none: the ``read``
    of a :func:`cas_update` whose first write creates the node."""
    try:
        node = await store.get(path)
    except NoSuchNodeError:
        return None, ABSENT
    return node.value, node.version


async def create_or_set(store: MetadataStore, path: str, value: bytes, version: int) -> int:
    """The ``write`` that goes with :func:`read_or_absent`: create the node at :data:`ABSENT`,
    else compare-and-set it. A node created or deleted meanwhile is a lost race too."""
    try:
        if version == ABSENT:
            return await store.create(path, value)
        return await store.set(path, value, version)
    except (NodeExistsError, NoSuchNodeError):
        raise MetadataVersionError(
            f"metadata node {path} was created or deleted meanwhile"
        ) from None
