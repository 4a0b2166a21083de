"""The lakes of ``walkit cluster check``: each lake that logs offloaded ledgers to (found in
their metadata: the lake of their data files), or that ``--lake`` names, checked within
``--timeout`` (``walkit.lake._check``): one row each.

A lake named with ``--lake`` that cannot be checked here (no lake extra) fails the check; one
found in the metadata is listed as not checked, saying what to install.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Mapping
from typing import Any

import anyio

from walkit._core.lake import lake_of_file, parse_lake_uri, redact
from walkit.errors import ConfigurationError, WalkitError

__all__ = ["add_arguments", "check_lakes", "lake_rows_text"]


def add_arguments(check: argparse.ArgumentParser) -> None:
    check.add_argument(
        "--lake",
        action="append",
        default=None,
        metavar="URI",
        help="check this lake (file:///abs/dir or s3://bucket/prefix) instead of the lakes "
        "the logs' metadata names (repeatable)",
    )
    check.add_argument(
        "--lake-catalog",
        default=None,
        metavar="JSON",
        help="the lakes' pyiceberg catalog properties as a JSON object (default for "
        "file://DIR: a SQL catalog in DIR/catalog.db; an s3:// lake needs it)",
    )


def _catalog(args: argparse.Namespace) -> dict[str, str] | None:
    if args.lake_catalog is None:
        return None
    from walkit.log._options import CATALOG

    try:
        found: dict[str, str] = CATALOG.from_text(args.lake_catalog)
    except ValueError as exc:
        raise ConfigurationError(f"--lake-catalog: {exc}") from None
    return found


async def _lakes_in_metadata(store: Any) -> dict[str, list[str]]:
    """Each lake the logs' metadata names (the lake of their first data file), with its logs."""
    from walkit.log import list_logs, read_log

    lakes: dict[str, list[str]] = {}
    for name in await list_logs(store):
        try:
            md, _version = await read_log(store, name)
        except WalkitError:
            continue  # (deleted meanwhile, or unreadable: the log commands say so)
        files = [f for x in md.offloaded for f in x.files]
        if files:
            lakes.setdefault(lake_of_file(files[0]), []).append(name)
    return lakes


async def check_lakes(store: Any, args: argparse.Namespace, timeout: float) -> list[dict[str, Any]]:
    """One row per lake: ``lake``, its ``logs``, ``ok`` (None: not checked), ``ms``, ``error``."""
    catalog = _catalog(args)
    found = await _lakes_in_metadata(store)
    named = args.lake is not None
    if named:
        lakes: dict[str, list[str]] = {}
        for uri in args.lake:
            try:
                key = str(parse_lake_uri(uri))
            except ConfigurationError as exc:
                raise ConfigurationError(str(exc).replace("offload_to", "--lake", 1)) from None
            lakes[key] = [n for lake, names in found.items() if lake == key for n in names]
    else:
        lakes = found
    rows: dict[str, dict[str, Any]] = {}

    async def one(uri: str, logs: list[str]) -> None:
        rows[uri] = await _check_one(uri, logs, catalog, timeout, named)

    async with anyio.create_task_group() as nursery:
        for uri, logs in sorted(lakes.items()):
            nursery.start_soon(one, uri, logs)
    return [rows[uri] for uri in sorted(rows)]


async def _check_one(
    uri: str, logs: list[str], catalog: Mapping[str, str] | None, timeout: float, named: bool
) -> dict[str, Any]:
    row: dict[str, Any] = {"lake": uri, "logs": logs, "ok": False, "ms": None, "error": None}
    from walkit.lake import check_available

    try:
        check_available()
    except ConfigurationError as exc:
        row["error"] = f"not checked: {exc}".replace("offload_to needs", "the lake needs")
        row["ok"] = False if named else None
        return row
    from walkit.lake._check import LakeUnreachable, check_lake

    started = time.perf_counter()  # (uvloop's loop clock counts whole milliseconds)
    stage: list[str] = []
    try:
        with anyio.move_on_after(timeout) as deadline:
            await anyio.to_thread.run_sync(
                functools.partial(check_lake, uri, catalog, logs, timeout, stage),
                abandon_on_cancel=True,
            )
        if deadline.cancelled_caught:
            where = f"{stage[-1]}: " if stage else ""
            row["error"] = f"{where}no answer within {timeout:g} s"
        else:
            row["ok"] = True
            row["ms"] = round((time.perf_counter() - started) * 1000, 3)
    except (LakeUnreachable, ConfigurationError) as exc:
        row["error"] = redact(str(exc), catalog)
    return row


def lake_rows_text(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as the text report shows them (a status word)."""
    return [
        {**row, "status": {True: "ok", False: "FAILED", None: "not checked"}[row["ok"]]}
        for row in rows
    ]
