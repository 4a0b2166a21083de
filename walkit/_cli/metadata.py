"""``walkit metadata export URL FILE | import FILE URL | migrate --from URL --to URL [--force]``.

A dump holds secrets (ledger and log passwords, cookies), so the file is written for its owner
only (0600), atomically: a temporary file beside it, synced, then renamed over it.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any, TextIO

from walkit._core.metadata_dump import MetadataDump, decode_dump, encode_dump
from walkit.errors import ConfigurationError
from walkit.metadata import Export

#: Largest dump file read (a dump is read whole; 100,000 ledgers take ~60 MB).
MAX_DUMP_BYTES = 2 << 30


def add_parsers(sub: Any, add_log_options: Any) -> None:
    """Register ``metadata export|import|migrate`` under the ``walkit`` command's subparsers."""
    metadata = sub.add_parser(
        "metadata",
        help="export, import and migrate a cluster's metadata (back up; sqlite to ZooKeeper)",
        description="Dump every persistent metadata node and id counter of a cluster to a "
        "versioned, checksummed file, load one into an empty store, or move a stopped "
        "cluster's metadata from one store to another (docs/operations.md).",
    )
    actions = metadata.add_subparsers(dest="metadata_command", required=True, metavar="ACTION")
    export = actions.add_parser(
        "export",
        help="write a store's metadata to FILE",
        description="Write every persistent node and id counter of the store at URL to FILE "
        "(mode 0600: it holds passwords). Ephemeral nodes (registered bookies, locks) are left "
        "out. The store is read node by node: for a backup to restore as is, take it while "
        "no writer changes the cluster.",
    )
    export.add_argument("url", metavar="URL", help="metadata URL to read")
    export.add_argument("file", metavar="FILE", type=Path, help="dump file to write")
    load = actions.add_parser(
        "import",
        help="load FILE into an empty store",
        description="Check FILE whole (version, checksum, tree) and write it into the store at "
        "URL, which must be empty (a new sqlite file, an empty ZooKeeper root).",
    )
    load.add_argument("file", metavar="FILE", type=Path, help="dump file to read")
    load.add_argument("url", metavar="URL", help="metadata URL to write (an empty store)")
    migrate = actions.add_parser(
        "migrate",
        help="move a stopped cluster's metadata to another store",
        description="Copy every persistent node and id counter from one store to another, "
        "empty one. Stop the cluster first (bookies, writers, readers, autorecovery): a "
        "source with live sessions is refused unless --force.",
    )
    migrate.add_argument("--from", dest="source", metavar="URL", required=True)
    migrate.add_argument("--to", dest="destination", metavar="URL", required=True)
    migrate.add_argument(
        "--force",
        action="store_true",
        help="copy even though processes still hold sessions in the source (they keep "
        "changing it: what they change after the copy is lost)",
    )
    for parser in (export, load, migrate):
        add_log_options(parser, top=False)
        parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _summary(dump: MetadataDump) -> str:
    return f"{_count(len(dump.nodes), 'node')} and {_count(len(dump.counters), 'id counter')}"


def _report(export: Export, **fields: Any) -> dict[str, Any]:
    return {
        **fields,
        "nodes": len(export.dump.nodes),
        "counters": dict(export.dump.counters),
        "left_out_ephemeral": list(export.ephemeral),
    }


def _print(record: dict[str, Any], text: str, args: argparse.Namespace, out: TextIO) -> None:
    if args.json:
        json.dump(record, out, indent=2)
        out.write("\n")
    else:
        out.write(text + "\n")


async def run(args: argparse.Namespace, out: TextIO) -> int:
    from walkit.metadata import (
        export_metadata,
        import_metadata,
        migrate_metadata,
        open_metadata_store,
    )

    command = args.metadata_command
    if command == "export":
        async with await open_metadata_store(args.url) as store:
            found = await export_metadata(store)
        data = encode_dump(found.dump)
        write_private(args.file, data)
        left = f"; left out {_count(len(found.ephemeral), 'ephemeral node')}"
        _print(
            _report(found, source=args.url, file=str(args.file), bytes=len(data)),
            f"exported {_summary(found.dump)} from {args.url} to {args.file} ({len(data)} "
            f"bytes{left if found.ephemeral else ''})",
            args,
            out,
        )
        return 0
    if command == "import":
        dump = decode_dump(read_dump_file(args.file), name=str(args.file))
        async with await open_metadata_store(args.url) as store:
            await import_metadata(store, dump)
        _print(
            {"file": str(args.file), "destination": args.url, "nodes": len(dump.nodes)},
            f"imported {_summary(dump)} from {args.file} into {args.url}",
            args,
            out,
        )
        return 0
    async with (
        await open_metadata_store(args.source) as source,
        await open_metadata_store(args.destination) as destination,
    ):
        found = await migrate_metadata(source, destination, force=args.force)
    _print(
        _report(found, source=args.source, destination=args.destination),
        f"migrated {_summary(found.dump)} from {args.source} to {args.destination}; start "
        f"the bookies and clients with --metadata {args.destination}",
        args,
        out,
    )
    return 0


def read_dump_file(path: Path) -> bytes:
    try:
        with open(path, "rb") as file:
            data = file.read(MAX_DUMP_BYTES + 1)
    except OSError as exc:
        raise ConfigurationError(f"cannot read dump file {path}: {exc}") from None
    if len(data) > MAX_DUMP_BYTES:
        raise ConfigurationError(f"dump file {path} is larger than {MAX_DUMP_BYTES} bytes")
    return data


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` for its owner only, atomically (a crash leaves the old file
    or the new one, never a part)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # (a stale temporary file keeps its mode through O_TRUNC)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise ConfigurationError(f"cannot write dump file {path}: {exc}") from None
