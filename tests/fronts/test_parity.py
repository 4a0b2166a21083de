"""One API on every front: each public method and property of the async classes has a
:mod:`walkit.sync` twin with the same parameters (names, kinds, defaults, annotations) and the
same return annotation, async types mapped to their sync twins.

``async def`` pairs with ``def``, async iterators with iterators, async context managers with
context managers, ``aclose`` with ``close``. What may stay async-only is listed below with the
reason; anything else missing or different fails here.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any, Final

import pytest

import walkit
import walkit.sync
from walkit.recipes import LeaderElection
from walkit.statemachine import Leader, Replica

PAIRS: Final[list[tuple[type[Any], type[Any]]]] = [
    (walkit.Client, walkit.sync.Client),
    (walkit.Log, walkit.sync.Log),
    (walkit.LogWriter, walkit.sync.LogWriter),
    (walkit.LogReader, walkit.sync.LogReader),
    (walkit.LogConsumer, walkit.sync.LogConsumer),
    (walkit.LedgerWriter, walkit.sync.LedgerWriter),
    (walkit.LedgerReader, walkit.sync.LedgerReader),
    (walkit.Snapshot, walkit.sync.Snapshot),
    (Replica, walkit.sync.Replica),
    (Leader, walkit.sync.Leader),
    (LeaderElection, walkit.sync.LeaderElection),
]

#: Classes whose constructor is public (the others are made by a factory: connect, open...).
CONSTRUCTED: Final = {"Replica", "LeaderElection"}

#: Methods and properties that stay async-only, and why.
ASYNC_ONLY: Final[dict[str, str]] = {
    "Client.metadata_store": "the async metadata store, for code in the client's loop",
    "LedgerWriter.submit": "the log writer's hook: takes a loop-side waiter",
    "LedgerWriter.start_background": "the log writer's hook: a task started in the loop",
    "Snapshot.from_record": "internal constructor",
    "LeaderElection.run": "the task itself; the sync form is start()/stop() (or with)",
    # aclose is the async spelling of close; the sync twin has close.
    "Log.aclose": "close",
    "LogWriter.aclose": "close",
    "LogReader.aclose": "close",
    "LedgerWriter.aclose": "close",
    "LedgerReader.aclose": "close",
}

#: Parameters that are the simulation's seams: the async API takes them, the sync one has no
#: simulation to take them from (walkit.testing drives the async API on a trio MockClock).
SIMULATION_SEAMS: Final = {
    ("Client.connect", "network"),
    ("Client.connect", "rng"),
    ("LeaderElection.__init__", "rng"),
}

#: Parameters only the blocking API has: which loop runs the client, and a bound on a wait
#: (an async caller bounds it with a cancel scope).
SYNC_ONLY_PARAMETERS: Final = {
    ("Client.connect", "backend"),
    ("LeaderElection.__init__", "backend"),
    ("Log.reader", "timeout"),
    ("Log.consumer", "timeout"),
    ("LeaderElection.wait_changed", "timeout"),
}

#: Return annotations that differ on purpose.
RETURNS: Final[dict[str, str]] = {
    "LeaderElection.wait_changed": "a blocking wait with a timeout says whether it changed",
}

#: Async annotations (as written) and the sync ones that mean the same.
_ANNOTATION_TWINS: Final = [
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsyncIterable\b", "Iterable"),
    (r"\bAbstractAsyncContextManager\b", "AbstractContextManager"),
    (r"\b_Connector\b", "Client"),
    (r"\b_Opener\b", "Log"),
    (r"\b_WriterOpener\b", "LogWriter"),
]


def _sync_annotation(annotation: Any) -> Any:
    if not isinstance(annotation, str):
        return annotation
    for pattern, twin in _ANNOTATION_TWINS:
        annotation = re.sub(pattern, twin, annotation)
    return annotation


def _members(cls: type[Any]) -> dict[str, Any]:
    """Public methods and properties (the constructor if public), as declared."""
    out = {}
    for klass in reversed(cls.__mro__):
        for name, value in vars(klass).items():
            if name.startswith("_") and not (name == "__init__" and cls.__name__ in CONSTRUCTED):
                continue
            if callable(value) or isinstance(value, property | staticmethod | classmethod):
                out[name] = value
    return out


def _function(member: Any) -> Callable[..., Any]:
    if isinstance(member, staticmethod | classmethod):
        return member.__func__
    return member  # type: ignore[no-any-return]


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)


def _drift(cls: type[Any], twin: type[Any]) -> list[str]:
    problems = []
    theirs = _members(twin)
    for name, member in _members(cls).items():
        where = f"{cls.__name__}.{name}"
        if where in ASYNC_ONLY:
            reason = ASYNC_ONLY[where]
            if reason == "close":
                assert "close" in theirs, f"{twin.__name__} has no close"
            continue
        if name not in theirs:
            problems.append(f"{where}: missing in walkit.sync")
            continue
        other = theirs[name]
        if isinstance(member, property):
            if not isinstance(other, property):
                problems.append(f"{where}: a property, not in walkit.sync")
            continue
        if isinstance(member, staticmethod) != isinstance(other, staticmethod):
            problems.append(f"{where}: static in one API only")
        fn, sync_fn = _function(member), _function(other)
        if _is_async(sync_fn):
            problems.append(f"{where}: async in walkit.sync")
        problems += _signature_drift(where, fn, sync_fn)
    return problems


def _signature_drift(where: str, fn: Callable[..., Any], sync_fn: Callable[..., Any]) -> list[str]:
    ours = inspect.signature(fn).parameters
    theirs = inspect.signature(sync_fn).parameters
    problems = []
    for name, param in ours.items():
        if (where, name) in SIMULATION_SEAMS:
            continue  # (walkit.sync may take it too, as LeaderElection's rng, or not)
        twin = theirs.get(name)
        if twin is None:
            problems.append(f"{where}: parameter {name} missing in walkit.sync")
            continue
        for aspect in ("kind", "default"):
            if getattr(param, aspect) != getattr(twin, aspect):
                problems.append(
                    f"{where}({name}): {aspect} {getattr(param, aspect)!r} "
                    f"!= {getattr(twin, aspect)!r}"
                )
        if _sync_annotation(param.annotation) != twin.annotation:
            problems.append(f"{where}({name}): {param.annotation!r} != {twin.annotation!r}")
    for name in theirs:
        if name not in ours and {(where, name)} - SYNC_ONLY_PARAMETERS - SIMULATION_SEAMS:
            problems.append(f"{where}: parameter {name} only in walkit.sync")
    positional = [
        n
        for n, p in ours.items()
        if p.kind is not p.KEYWORD_ONLY and (where, n) not in SIMULATION_SEAMS
    ]
    sync_positional = [
        n
        for n, p in theirs.items()
        if p.kind is not p.KEYWORD_ONLY and (where, n) not in SIMULATION_SEAMS
    ]
    if positional != sync_positional:
        problems.append(f"{where}: positional order {positional} != {sync_positional}")
    returns = _sync_annotation(inspect.signature(fn).return_annotation)
    sync_returns = inspect.signature(sync_fn).return_annotation
    if returns != sync_returns and where not in RETURNS:
        problems.append(f"{where}: returns {returns!r} != {sync_returns!r}")
    return problems


@pytest.mark.parametrize(("cls", "twin"), PAIRS, ids=[c.__name__ for c, _ in PAIRS])
def test_every_public_method_has_a_sync_twin_with_the_same_signature(
    cls: type[Any], twin: type[Any]
) -> None:
    assert _drift(cls, twin) == []


@pytest.mark.parametrize(("cls", "twin"), PAIRS, ids=[c.__name__ for c, _ in PAIRS])
def test_protocols_pair_up(cls: type[Any], twin: type[Any]) -> None:
    """async with ↔ with, async for ↔ for."""
    if hasattr(cls, "__aenter__"):
        assert hasattr(twin, "__enter__") and hasattr(twin, "__exit__")
    if hasattr(cls, "__aiter__"):
        assert hasattr(twin, "__iter__")
    if hasattr(cls, "__anext__"):
        assert hasattr(twin, "__next__")


def test_the_exemptions_name_real_things() -> None:
    """A listed exemption that no longer exists must go from the lists."""
    members = {f"{c.__name__}.{n}" for c, _ in PAIRS for n in _members(c)}
    assert set(ASYNC_ONLY) <= members
    assert set(RETURNS) <= members
    for where, name in SIMULATION_SEAMS:
        cls = next(c for c, _ in PAIRS if c.__name__ == where.split(".")[0])
        assert name in inspect.signature(getattr(cls, where.split(".")[1])).parameters


def test_the_check_catches_drift() -> None:
    """A twin that lost a parameter, changed a default or lost a method is reported."""

    class Async:
        async def append(self, payload: bytes, *, flush: bool = False) -> int:
            return 0

        async def close(self) -> None:
            pass

    class Lost:
        def append(self, payload: bytes) -> int:
            return 0

    class Changed:
        def append(self, payload: bytes, *, flush: bool = True) -> int:
            return 0

        def close(self) -> None:
            pass

    assert _drift(Async, Lost) == [
        "Async.append: parameter flush missing in walkit.sync",
        "Async.close: missing in walkit.sync",
    ]
    assert _drift(Async, Changed) == ["Async.append(flush): default False != True"]
