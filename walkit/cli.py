"""The `walkit` command: a sandbox cluster and admin commands in the spirit of the bookkeeper shell.

    walkit sandbox [--bookies 3] [--data-dir DIR] [--metadata URL]
    walkit bookies | ledgers [--metadata URL] [--json]
    walkit ledger show ID | ledger read ID [--first N] [--last N] [--password PW]
    walkit simpletest [--entries N] [--ensemble E] [--write-quorum QW] [--ack-quorum QA]
    walkit bench [--entries N] [--size B] [--in-flight K] [--batch B] [--log NAME]
    walkit log list | log show NAME | log tail NAME [--from POS] [--follow]

The metadata URL comes from ``--metadata`` or the ``WALKIT_METADATA`` environment variable.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import trio

from walkit._logging import configure_cli_logging
from walkit.errors import WalkitError


def _configure_logging(verbose: bool) -> None:
    configure_cli_logging("debug" if verbose else "warning")


def _metadata_url(args: argparse.Namespace) -> str:
    url = args.metadata or os.environ.get("WALKIT_METADATA")
    if not url:
        raise SystemExit(
            "walkit: error: no metadata URL: pass --metadata URL or set WALKIT_METADATA"
        )
    return str(url)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _ledger_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"ledger id {text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"ledger id {value} is negative")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="walkit", description="walkit: a replicated write-ahead log on BookKeeper's protocol"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug events to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_metadata(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        p.add_argument(
            "--metadata",
            help="metadata URL (zk://, sqlite:///, memory://); default $WALKIT_METADATA",
        )
        p.add_argument("--json", action="store_true", help="print JSON for scripts")
        p.add_argument(
            "--placement",
            default="default",
            help="placement policy: name, module:Class, or entry point",
        )
        return p

    sandbox = sub.add_parser("sandbox", help="run an embedded cluster on this host until Ctrl-C")
    sandbox.add_argument("--bookies", type=_positive, default=3)
    sandbox.add_argument("--data-dir", type=Path, default=Path(".walkit/sandbox"))
    sandbox.add_argument("--metadata", help="metadata URL (default: sqlite in the data dir)")
    sandbox.add_argument("--host", default="127.0.0.1")

    with_metadata(sub.add_parser("bookies", help="list registered bookies"))
    with_metadata(sub.add_parser("ledgers", help="list ledgers"))

    ledger = sub.add_parser("ledger", help="inspect one ledger")
    ledger_sub = ledger.add_subparsers(dest="ledger_command", required=True, metavar="ACTION")
    show = with_metadata(ledger_sub.add_parser("show", help="print a ledger's metadata"))
    show.add_argument("ledger_id", type=_ledger_id)
    read = with_metadata(ledger_sub.add_parser("read", help="print a ledger's entries"))
    read.add_argument("ledger_id", type=_ledger_id)
    read.add_argument("--first", type=int, default=0)
    read.add_argument("--last", type=int, default=None, help="default: the last readable entry")
    read.add_argument("--password", default="", help="the ledger's password")

    from walkit._cli import log as log_cli

    log_cli.add_parsers(sub, with_metadata)

    simple = with_metadata(
        sub.add_parser("simpletest", help="write, read back and delete a test ledger")
    )
    simple.add_argument("--entries", type=_positive, default=1000)
    simple.add_argument("--size", type=_positive, default=100, help="entry size in bytes")
    simple.add_argument("--ensemble", type=_positive, default=3)
    simple.add_argument("--write-quorum", type=_positive, default=2)
    simple.add_argument("--ack-quorum", type=_positive, default=2)

    from walkit._cli import bench as bench_cli

    bench_cli.add_parser(sub, with_metadata, _positive)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    _configure_logging(args.verbose)
    from walkit._cli import admin, sandbox
    from walkit._cli import bench as bench_cli

    command: Callable[[], Awaitable[int]]
    if args.command == "sandbox":
        command = functools.partial(
            sandbox.run_sandbox, args.data_dir, args.bookies, args.metadata, args.host
        )
    else:
        url = _metadata_url(args)
        handlers: dict[str, Callable[..., Awaitable[int]]] = {
            "bookies": admin.bookies,
            "ledgers": admin.ledgers,
            "simpletest": admin.simpletest,
            "bench": bench_cli.bench,
        }
        if args.command == "ledger":
            handler: Callable[..., Awaitable[int]] = (
                admin.ledger_show if args.ledger_command == "show" else admin.ledger_read
            )
        elif args.command == "log":
            from walkit._cli import log as log_cli

            handler = log_cli.handler(args)
        else:
            handler = handlers[args.command]
        command = functools.partial(handler, url, args, sys.stdout)
    try:
        code = trio.run(command)
    except KeyboardInterrupt:
        code = 130
    except WalkitError as exc:
        print(f"walkit: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = 1
    raise SystemExit(code)


if __name__ == "__main__":
    main()
