"""The `walkit` command: a sandbox cluster and admin commands in the spirit of the bookkeeper shell.

    walkit [--log-level LEVEL] [--log-format console|json] [CONNECTION OPTIONS] COMMAND ...
    walkit sandbox [--bookies 3] [--data-dir DIR] [--metadata URL] [--exit-on-bookie-failure]
    walkit bookies | ledgers [--metadata URL] [--json]
    walkit ledger show ID | ledger read ID [--first N] [--last N] [--password PW]
    walkit simpletest [--entries N] [--ensemble E] [--write-quorum QW] [--ack-quorum QA]
    walkit bench [--entries N] [--size B] [--in-flight K] [--batch B] [--log NAME]
    walkit log list | log show NAME | log tail NAME [--from POS] [--follow]
    walkit log retain NAME [--records N] [--bytes N] [--age S] [--dry-run]
    walkit log delete NAME [--yes] | log gc [NAME] [--grace S] [--dry-run]
    walkit underreplicated | recover BOOKIE | bookie decommission BOOKIE
    walkit autorecovery status | enable | disable | delay SECONDS
    walkit metadata export URL FILE | import FILE URL | migrate --from URL --to URL [--force]
    walkit cluster check [--timeout SECONDS] [--lake URI] [--lake-catalog JSON]

The metadata URL comes from ``--metadata`` or the ``WALKIT_METADATA`` environment variable.
The connection options (``--metadata``, ``--placement``, ``--tls-ca/--tls-cert/--tls-key``,
``--auth-token-file``) go before or after the command: ``walkit --metadata URL bookies`` and
``walkit bookies --metadata URL`` are the same.
Logs go to stderr: WARNING and above by default; ``--log-level`` and ``--log-format`` (before or
after the command) change that, ``-v`` is ``--log-level debug`` and ``--log-json`` is
``--log-format json``.
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

import anyio

from walkit import _loop
from walkit._cli._args import at_least
from walkit._cli._connect import (
    accept_connection_options,
    add_connection_options,
    check_connection_options,
    connection,
)
from walkit._logging import LOG_FORMATS, configure_cli_logging, get_logger
from walkit.errors import WalkitError

CLI_LOG_LEVELS = ("debug", "info", "warning", "error")

log = get_logger("walkit.cli")  # (not __name__: `python -m walkit.cli` runs it as __main__)


def _add_log_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The log options, on the top parser and again on each command (so both orders work).

    On a command they default to SUPPRESS, so an option given before the command stands."""
    default: object = None if top else argparse.SUPPRESS
    group = parser.add_argument_group("logging (to stderr)")
    group.add_argument(
        "--log-level",
        choices=CLI_LOG_LEVELS,
        default=default,
        help="show walkit's log events of this level and above (default: warning)",
    )
    group.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default=default,
        help="console text or JSON lines (default: console)",
    )
    group.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="same as --log-level debug",
    )
    group.add_argument(
        "--log-json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="same as --log-format json",
    )


class _DefaultsHelpFormatter(argparse.HelpFormatter):
    """Adds ``(default: X)`` to an option's help, unless there is no meaningful default."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.default in (None, False, argparse.SUPPRESS) or "default" in text:
            return text
        return text + " (default: %(default)s)"


def log_settings(args: argparse.Namespace) -> tuple[str, str]:
    """(level, format) from the log options and their aliases."""
    level = args.log_level or ("debug" if args.verbose else "warning")
    fmt = args.log_format or ("json" if args.log_json else "console")
    return level, fmt


def _metadata_url(args: argparse.Namespace) -> str:
    url = connection(args).metadata
    if not url:
        raise SystemExit(
            "walkit: error: no metadata URL: pass --metadata URL or set WALKIT_METADATA"
        )
    return str(url)


_positive = at_least(1)
_ledger_id = at_least(0, "ledger id")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="walkit",
        description="walkit: a replicated write-ahead log on BookKeeper's protocol",
        # A command's own options (`bench --log NAME`) must not read as abbreviations of these.
        allow_abbrev=False,
    )
    _add_log_options(parser, top=True)
    add_connection_options(parser)
    # Only a command says which connection options it takes (check_connection_options).
    accept_connection_options(parser, ())
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_metadata(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
        _add_log_options(p, top=False)
        p.add_argument("--json", action="store_true", help="print JSON for scripts")
        add_connection_options(p)
        return p

    sandbox = sub.add_parser(
        "sandbox",
        help="run an embedded cluster on this host until Ctrl-C",
        description="Run N bookie processes on this host with sqlite metadata (by default) "
        "until Ctrl-C or SIGTERM. It prints the metadata URL and an `export WALKIT_METADATA=...` "
        "line, keeps its data (and ports) across restarts, and restarts a bookie that exits "
        "on its own.",
        formatter_class=_DefaultsHelpFormatter,
    )
    sandbox.add_argument("--bookies", type=_positive, default=3, help="number of bookies")
    sandbox.add_argument(
        "--data-dir",
        type=Path,
        default=Path(".walkit/sandbox"),
        help="where the bookies' data, the sqlite metadata and sandbox.json live",
    )
    accept_connection_options(
        sandbox,
        ["metadata"],
        help="metadata URL; default: sqlite:///DATA_DIR/metadata.db (or the one used last time)",
    )
    sandbox.add_argument("--host", default="127.0.0.1", help="address the bookies listen on")
    sandbox.add_argument(
        "--tls",
        action="store_true",
        help="TLS between clients and bookies: make a CA and certificates in DATA_DIR/tls "
        "(kept), start the bookies requiring client certificates, and print the "
        "WALKIT_TLS_* exports",
    )
    sandbox.add_argument(
        "--auth",
        action="store_true",
        help="bookies that require a token from every client: tokens made in DATA_DIR/auth "
        "(kept), and the WALKIT_AUTH_TOKEN_FILE export printed",
    )
    sandbox.add_argument(
        "--exit-on-bookie-failure",
        action="store_true",
        help="exit 1 when a bookie exits on its own, instead of restarting it",
    )
    _add_log_options(sandbox, top=False)

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

    from walkit._cli import autorecovery as autorecovery_cli

    autorecovery_cli.add_parsers(sub, with_metadata)

    from walkit._cli import metadata as metadata_cli

    metadata_cli.add_parsers(sub, _add_log_options)

    from walkit._cli import cluster as cluster_cli

    cluster_cli.add_parsers(sub, with_metadata)
    return parser


async def _until_interrupted(command: Callable[[], Awaitable[int]]) -> int:
    """Run ``command``; Ctrl-C (SIGINT) cancels it and gives exit code 130. A cancellation,
    not a KeyboardInterrupt raised wherever the code happens to be, so the client's close
    (connections, the metadata session) always runs to its end."""
    interrupted = False
    code = 1
    failure: list[Exception] = []

    async def on_sigint(cancel: anyio.CancelScope) -> None:
        nonlocal interrupted
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            async for _ in signals:
                interrupted = True
                cancel.cancel()
                return

    async with anyio.create_task_group() as nursery:

        async def run() -> None:
            nonlocal code
            try:
                code = await command()
            except Exception as exc:  # raised below, outside the nursery (no group)
                failure.append(exc)
            finally:
                nursery.cancel_scope.cancel()

        nursery.start_soon(on_sigint, nursery.cancel_scope)
        nursery.start_soon(run)
    if interrupted:  # (what the cancelled command raised while stopping does not matter)
        return 130
    if failure:
        raise failure[0]
    return code


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_connection_options(parser, args)
    level, fmt = log_settings(args)
    configure_cli_logging(level, fmt)
    from walkit._cli import admin, sandbox
    from walkit._cli import bench as bench_cli

    command: Callable[[], Awaitable[int]]
    if args.command == "sandbox":
        from walkit._extras import require_bookie_extra

        require_bookie_extra("walkit sandbox")
        command = functools.partial(
            sandbox.run_sandbox,
            args.data_dir,
            args.bookies,
            getattr(args, "metadata", None),
            args.host,
            exit_on_bookie_failure=args.exit_on_bookie_failure,
            bookie_args=["--log-level", level, "--log-format", fmt],
            tls=args.tls,
            auth=args.auth,
        )
    elif args.command == "metadata":
        from walkit._cli import metadata as metadata_cli

        command = functools.partial(
            _until_interrupted, functools.partial(metadata_cli.run, args, sys.stdout)
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
        elif args.command == "cluster":
            from walkit._cli import cluster as cluster_cli

            handler = cluster_cli.check
        elif args.command in ("underreplicated", "recover", "bookie", "autorecovery"):
            from walkit._cli import autorecovery as autorecovery_cli

            handler = autorecovery_cli.handler(args)
        else:
            handler = handlers[args.command]
        command = functools.partial(
            _until_interrupted, functools.partial(handler, url, args, sys.stdout)
        )

    async def logged() -> int:
        log.debug("command_started", command=args.command, event_loop=_loop.event_loop_name())
        return await command()

    try:
        # asyncio, on uvloop when it imports: the bookie's `--event-loop auto` rule.
        code = _loop.run(logged)
    except KeyboardInterrupt:
        code = 130
    except WalkitError as exc:
        from walkit._cli._connect import describe_error

        print(f"walkit: error: {describe_error(exc)}", file=sys.stderr)
        code = 1
    raise SystemExit(code)


if __name__ == "__main__":
    main()
