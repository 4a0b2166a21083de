"""``walkit-bookie``: run one bookie until SIGTERM or Ctrl-C.

    walkit-bookie [--config FILE] --data-dir DIR [--data-dir DIR2 ...] [--host 127.0.0.1]
                  [--port 3181] [--network-location /region/rack] [--metadata URL]
                  [--admin-port PORT] [--gc-interval S] [--event-loop auto] ...
                  [--log-level debug|info|warning|error] [--log-format console|json]

Every flag is an option declared once, in ``BookieConfig`` (``walkit_bookie._config``) or
``BookieCommand`` (here): the parser and the config file (TOML) are made from them.

Prints ``walkit-bookie listening on HOST:PORT`` on stdout once it serves. Exit codes: 0 after a
clean shutdown, 1 when the bookie cannot start or fails (the message says why), 2 for bad
arguments.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from typing import Any, ClassVar, TypeVarTuple, final

import anyio
import attrs

from walkit._core.options import SWITCH, TEXT, choice, declared, optional
from walkit.errors import ConfigurationError, WalkitError
from walkit.shared import (
    EVENT_LOOPS,
    LOG_FORMATS,
    configure_cli_logging,
    get_logger,
    group_leaves,
    read_private_text,
    resolve_event_loop,
    run_event_loop,
)
from walkit.shared import read_token_file as read_auth_token_file
from walkit.shared.cli import add_options, given
from walkit_bookie._config import BookieConfig
from walkit_bookie._config_file import read_config_file
from walkit_bookie.lifecycle import Bookie

log = get_logger("walkit_bookie.cli")

SWITCH_INTERVAL = 0.0005
CLI_LOG_LEVELS = ("debug", "info", "warning", "error")
OPTIONAL_TEXT = optional(TEXT)
Ts = TypeVarTuple("Ts")


@final
@attrs.frozen(kw_only=True)
class BookieCommand:
    """The options of the ``walkit-bookie`` command that are not the bookie's configuration
    (declared as ``BookieConfig``'s are: flags and config file keys alike)."""

    option_noun: ClassVar[str] = ""

    config: str | None = OPTIONAL_TEXT.field(
        None,
        "read options from this TOML file first: a key per option (its name, listed in "
        "docs/bookie.md; mostly the flag's words with _ for -, e.g. journal_max_size = "
        '"512MiB"); flags given here win over it',
        metavar="FILE",
    )
    metadata: str | None = OPTIONAL_TEXT.field(
        None,
        "metadata store (zk://host:port/root, sqlite:///abs/path.db): register there, "
        "take the cluster instance id from it and garbage-collect the ledgers deleted there",
        metavar="URL",
    )
    admin_token_file: str | None = OPTIONAL_TEXT.field(
        None,
        "file holding the admin token (its first line; must not be readable by group or "
        "others); instead of --admin-token",
        metavar="PATH",
    )
    event_loop: str = choice(*EVENT_LOOPS).field(
        "auto",
        "the event loop the bookie runs on: uvloop (the fastest; the bookie extra installs "
        "it), asyncio's own, or trio; auto: uvloop when it is installed, else asyncio",
    )
    log_level: str = choice(*CLI_LOG_LEVELS).field(
        "info", "log events of this level and above, to stderr"
    )
    log_format: str | None = optional(choice(*LOG_FORMATS)).field(
        None, "console text (default) or JSON lines", flags=["--log-format"]
    )
    log_json: bool = SWITCH.field(False, "same as --log-format json", flags=["--log-json"])
    check_config: bool = SWITCH.field(
        False,
        "check the options (flags and config file) and the files they name (TLS, tokens), "
        "say so, and exit without starting (0: fine, 2: not); the metadata store is not "
        "contacted",
    )


#: Keys a config file may not have: another file, and the check of the file itself.
_NOT_IN_FILES = frozenset({"config", "check_config"})


def build_parser() -> argparse.ArgumentParser:
    """The flags of ``walkit-bookie``: one per option of ``BookieCommand`` and ``BookieConfig``."""
    parser = argparse.ArgumentParser(
        prog="walkit-bookie",
        description="Run a walkit bookie (the storage server of the replication protocol). "
        "Every option can also be set in a TOML file (--config FILE; see docs/bookie.md).",
    )
    add_options(parser, BookieCommand)
    add_options(parser, BookieConfig)
    return parser


def configure(args: argparse.Namespace) -> tuple[BookieCommand, BookieConfig]:
    """The command's options and the bookie's configuration: the declarations' defaults, then
    the config file's values, then the flags given. Raises ConfigurationError."""
    flags = {**given(args, BookieCommand), **given(args, BookieConfig)}
    from_file: dict[str, Any] = {}
    if flags.get("config") is not None:
        from_file = read_config_file(
            flags["config"], (BookieCommand, BookieConfig), exclude=_NOT_IN_FILES
        )
    values = {**from_file, **flags}
    command_names = {field.name for field, _ in declared(BookieCommand)}
    command = BookieCommand(**{k: v for k, v in values.items() if k in command_names})
    options = {k: v for k, v in values.items() if k not in command_names}
    for field, option in declared(BookieConfig):
        if option.command_default is not attrs.NOTHING:
            options.setdefault(field.name, option.command_default)
    if "data_dirs" not in options:
        raise ConfigurationError(
            "a bookie needs a data directory: give --data-dir DIR (or data_dirs in the config file)"
        )
    token = _admin_token(flags, from_file)
    if token is not None:
        options["admin_token"] = token
    return command, BookieConfig(**options)


def config_from_args(args: argparse.Namespace) -> BookieConfig:
    """The bookie's configuration from parsed flags (and the config file they name)."""
    return configure(args)[1]


def _admin_token(*sources: dict[str, Any]) -> str | None:
    """The admin token from the first source (flags, then the file) that gives one."""
    for source in sources:
        token, path = source.get("admin_token"), source.get("admin_token_file")
        if token is not None and path is not None:
            raise ConfigurationError(
                "give the admin token or a file holding it (--admin-token, --admin-token-file), "
                "not both"
            )
        if path is not None:
            return read_token_file(path)
        if token is not None:
            return str(token)
    return None


def read_token_file(path: str) -> str:
    """The admin token: the first line of ``path``, which only its owner may read."""
    lines = read_private_text(path, "admin token file", limit=4096).splitlines()
    if not lines or not lines[0].strip():
        raise ConfigurationError(f"the admin token file {path} is empty")
    return lines[0].strip()


def event_loop(name: str) -> str:
    """The loop ``--event-loop NAME`` runs the bookie on (``auto`` resolved): ``asyncio``,
    ``uvloop`` or ``trio``. Raises ConfigurationError when that loop cannot run here."""
    try:
        return resolve_event_loop(name)
    except ConfigurationError as exc:
        raise ConfigurationError(f"--event-loop {name}: {exc}") from None


def configure_logging(level: str, json_lines: bool, fmt: str | None = None) -> None:
    """``fmt`` (``--log-format``) wins over ``json_lines`` (``--log-json``, its alias)."""
    configure_cli_logging(level.lower(), fmt or ("json" if json_lines else "console"))


async def _serve(
    config: BookieConfig, metadata_url: str | None, event_loop: tuple[str, str]
) -> None:
    """Serve until SIGTERM or SIGINT; ``event_loop``: the loop running, and the one asked."""
    store = None
    if metadata_url is not None:
        from walkit.metadata import open_metadata_store

        store = await open_metadata_store(metadata_url)
    try:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as nursery:

                async def stop_on_signal() -> None:
                    async for signum in signals:
                        log.info("bookie_stopping", signal=signal.Signals(signum).name)
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(stop_on_signal)
                bookie = Bookie(config, metadata=store)
                bookie_id = await nursery.start(bookie.run)
                log.info("bookie_event_loop", event_loop=event_loop[0], asked=event_loop[1])
                print(f"walkit-bookie listening on {bookie_id}", flush=True)
                if bookie.admin_address is not None:
                    host, port = bookie.admin_address
                    scheme = "https" if config.tls_cert and config.admin_tls else "http"
                    print(f"walkit-bookie admin on {scheme}://{host}:{port}/metrics", flush=True)
    finally:
        if store is not None:
            with anyio.CancelScope(shield=True):
                await store.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        command, config = configure(args)
        loop = event_loop(command.event_loop)
        config.tls_server_context()  # unreadable TLS files: a usage error, before anything
        config.authenticator()  # and an unreadable or unsafe token file
        if config.autorecovery_token_file is not None:
            read_auth_token_file(config.autorecovery_token_file)
    except ConfigurationError as bad:
        parser.error(str(bad))  # exits 2
    if command.check_config:
        print(f"walkit-bookie: configuration OK (data directories: {', '.join(config.data_dirs)})")
        return 0
    configure_logging(command.log_level, command.log_json, command.log_format)
    # Large journal groups are written from a worker thread that needs the GIL back after its
    # system call; the default 5 ms switch interval would add that to each of them under load.
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        run_event_loop(
            _serve, config, command.metadata, (loop, command.event_loop), event_loop=loop
        )
    except KeyboardInterrupt:
        return 0
    except BaseExceptionGroup as group:
        leaves = [leaf for leaf in group_leaves(group) if not isinstance(leaf, KeyboardInterrupt)]
        for leaf in leaves:
            _report(leaf)
        return _exit_code(leaves)
    except (WalkitError, OSError) as exc:
        _report(exc)
        return _exit_code([exc])
    return 0


def _exit_code(errors: Sequence[BaseException]) -> int:
    """2 when the arguments were wrong (e.g. a malformed metadata URL), else 1."""
    if errors and all(isinstance(e, ConfigurationError) for e in errors):
        return 2
    return 1 if errors else 0


def _report(exc: BaseException) -> None:
    if isinstance(exc, KeyboardInterrupt):
        return
    if not isinstance(exc, WalkitError | OSError):
        log.error("bookie_crashed", exc_info=exc)
    print(f"walkit-bookie: error: {exc}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
