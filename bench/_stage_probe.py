"""Stamps for bench/stages.py: wraps the functions of the log's hot path so that each call
records (CLOCK_MONOTONIC ns, step, entry id or -1) in memory, written to ``<dir>/<pid>.txt``
at exit. The writer's ``_add`` and the bookie's group-commit ``submit`` carry the entry id, so
an append is paired with its own adds on each bookie (a bookie outside the ack quorum may
still be journaling the entry before).

It reads private names of walkit (a rename breaks it; tests/log/test_bench_stages.py runs it).
"""

from __future__ import annotations

import atexit
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: [ns, step, entry id or -1] in call order (a list: a stamp gets its entry id after the call).
EVENTS: list[list[Any]] = []
_now = time.monotonic_ns
#: What install replaced: (owner, name, original), to put back in :func:`uninstall`.
_REPLACED: list[tuple[Any, str, Any]] = []


def mark(step: str) -> None:
    EVENTS.append([_now(), step, -1])


def _around(
    owner: Any,
    name: str,
    before: str | None,
    after: str | None,
    entry: Callable[[tuple[Any, ...], Any], int] | None = None,
) -> None:
    """Stamp ``before`` and ``after`` a call; ``entry(args, result)`` gives the stamps' entry
    id (known after the call: the ``before`` stamp keeps its place and gets it then)."""
    inner = getattr(owner, name)

    @functools.wraps(inner)
    def wrapper(*args: Any) -> Any:
        stamp = [_now(), before, -1]
        if before:
            EVENTS.append(stamp)
        result = inner(*args)
        stamp[2] = entry_id = -1 if entry is None else entry(args, result)
        if after:
            EVENTS.append([_now(), after, entry_id])
        return result

    _replace(owner, name, wrapper)
    # A module function is also bound by name in the modules that imported it already.
    for module in list(sys.modules.values()):
        if module is not None and module is not owner and getattr(module, name, None) is inner:
            _replace(module, name, wrapper)


def _replace(owner: Any, name: str, new: Any) -> None:
    _REPLACED.append((owner, name, getattr(owner, name)))
    setattr(owner, name, new)


def _after_await(owner: Any, name: str, step: str) -> None:
    inner: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(inner)
    async def wrapper(*args: Any) -> Any:
        result = await inner(*args)
        EVENTS.append([_now(), step, -1])
        return result

    _replace(owner, name, wrapper)


def install(directory: str | Path | None = None) -> None:
    """Wrap the steps, and write the stamps to ``directory`` at exit (None: the caller reads
    :data:`EVENTS` itself, and calls :func:`uninstall`)."""
    EVENTS.clear()
    from walkit.ledger import _writer
    from walkit.log import _batches
    from walkit.net import _direct, _receive

    _after_await(_receive.Receiver, "receive_into", "received")
    _around(_direct, "write_now", None, "wrote")
    _around(_writer.LedgerWriter, "_add", "entry", "sent", lambda args, last: int(last))
    _around(_writer._SlotSink, "on_response", "answer", None)
    _around(_batches.RecordBatch, "set", "acknowledged", None)
    _after_await(_batches.RecordBatch, "wait", "woken")
    try:
        from walkit_bookie.server import _intake
        from walkit_bookie.storage import _directio, _journal
    except ImportError:  # (a client without the bookie installed)
        pass
    else:
        # (on asyncio a bookie receives from its reader callback, without Receiver)
        _around(_intake._Receiver, "now", None, "received")
        _around(_directio.AlignedFile, "write_at", "journal_write", "journal_written")
        _around(
            _journal.GroupCommit,
            "submit",
            "submitted",
            None,
            lambda args, _: getattr(args[2], "entry_id", -1),
        )

    if directory is None:
        return
    path = Path(directory) / f"{os.getpid()}.txt"

    def dump() -> None:
        with path.open("w") as f:
            f.writelines(f"{ns} {step} {entry_id}\n" for ns, step, entry_id in EVENTS)

    atexit.register(dump)


def uninstall() -> None:
    """Put back what :func:`install` wrapped."""
    while _REPLACED:
        owner, name, original = _REPLACED.pop()
        setattr(owner, name, original)
