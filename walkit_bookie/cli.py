"""``walkit-bookie``: run one bookie until SIGTERM or Ctrl-C.

    walkit-bookie --data-dir DIR [--data-dir DIR2 ...] [--host 127.0.0.1] [--port 3181]
                  [--network-location /region/rack] [--metadata URL] [--http-port PORT]
                  [--gc-interval S] [--minor-compaction-threshold F] ...
                  [--log-level debug|info|warning|error] [--log-format console|json]

Prints ``walkit-bookie listening on HOST:PORT`` on stdout once it serves. Exit codes: 0 after a
clean shutdown, 1 when the bookie cannot start or fails (the message says why), 2 for bad
arguments.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from typing import Any

import trio

from walkit._groups import leaves as group_leaves
from walkit._logging import configure_cli_logging, get_logger
from walkit._private_file import read_private_text
from walkit.errors import ConfigurationError, WalkitError
from walkit.net._auth import read_token_file as read_auth_token_file
from walkit_bookie._config import BookieConfig
from walkit_bookie.lifecycle import Bookie

log = get_logger("walkit_bookie.cli")

SWITCH_INTERVAL = 0.0005


def _size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    mult = 1
    if t and t[-1] in units:
        mult = units[t[-1]]
        t = t[:-1]
    try:
        value = int(float(t) * mult)
    except (ValueError, OverflowError):  # OverflowError: "inf"
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 5MiB, 512k)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"size must be positive: {text!r}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"port out of range 0..65535: {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more: {text!r}")
    return value


def _entries_rate(text: str) -> float:
    value = _non_negative_float(text)
    if value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be finite (0 is no limit): {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive: {text!r}")
    return value


def _threshold(text: str) -> float:
    value = _non_negative_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1]: {text!r}")
    return value


def _rate(text: str) -> int:
    if text.strip() == "0":
        return 0
    return _size(text.strip().lower().removesuffix("/s"))


def _fraction(text: str) -> float:
    value = _positive_float(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"must be in (0, 1]: {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="walkit-bookie",
        description="Run a walkit bookie (the storage server of the replication protocol).",
    )
    p.add_argument(
        "--data-dir",
        action="append",
        required=True,
        metavar="DIR",
        help="data directory; repeat for more (the first holds the journal, the others the "
        "entry logs and index)",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--port",
        type=_port,
        default=0,
        help="port to listen on; 0 (default) reuses the port in the cookie, or picks a free one",
    )
    p.add_argument(
        "--network-location",
        default="/default-region/default-rack",
        metavar="/REGION/RACK",
        help="where this bookie sits, for rack- and region-aware placement",
    )
    p.add_argument(
        "--metadata",
        metavar="URL",
        help="metadata store (zk://host:port/root, sqlite:///abs/path.db): register there, "
        "take the cluster instance id from it and garbage-collect the ledgers deleted there",
    )
    p.add_argument(
        "--advertised-address",
        metavar="HOST",
        help="the address registered for clients (required with --host 0.0.0.0 or ::)",
    )
    p.add_argument(
        "--admin-port",
        "--http-port",
        dest="http_port",
        type=_port,
        metavar="PORT",
        help="serve /metrics (prometheus), /health and /admin/gc over HTTP on this port "
        "(0: any free)",
    )
    p.add_argument(
        "--admin-host",
        metavar="HOST",
        help="address of the HTTP admin endpoint (default 127.0.0.1, whatever --host is)",
    )
    p.add_argument(
        "--admin-plain-http",
        action="store_true",
        help="serve the admin endpoint over plain HTTP even when --tls-cert is given "
        "(by default it then serves HTTPS with the bookie's certificate and --tls-client-auth)",
    )
    token = p.add_mutually_exclusive_group()
    token.add_argument(
        "--admin-token",
        metavar="TOKEN",
        help="bearer token that admin POSTs need (visible in the process list: prefer "
        "--admin-token-file); without one, admin POSTs are refused",
    )
    token.add_argument(
        "--admin-token-file",
        metavar="PATH",
        help="file holding the admin token (its first line; must not be readable by group "
        "or others)",
    )
    p.add_argument("--max-frame-size", type=_size, help="largest frame accepted (default 5MiB)")
    p.add_argument("--journal-max-size", type=_size, help="journal file roll size")
    p.add_argument("--entrylog-max-size", type=_size, help="entry log roll size")
    p.add_argument(
        "--write-cache-size", type=_size, help="entries kept in memory between checkpoints"
    )
    p.add_argument(
        "--checkpoint-interval",
        type=_positive_float,
        metavar="SECONDS",
        help="seconds between checkpoints",
    )
    p.add_argument(
        "--disk-usage-threshold",
        type=_fraction,
        metavar="FRACTION",
        help="turn read-only above this fraction of used disk space (default 0.95)",
    )
    p.add_argument(
        "--disk-check-interval",
        type=_positive_float,
        metavar="SECONDS",
        help="seconds between disk usage checks (default 10)",
    )
    p.add_argument(
        "--gc-interval",
        type=_positive_float,
        metavar="SECONDS",
        help="seconds between garbage collection rounds (default 300)",
    )
    for kind, threshold, interval in (("minor", "0.2", "3600"), ("major", "0.8", "86400")):
        p.add_argument(
            f"--{kind}-compaction-threshold",
            type=_threshold,
            metavar="FRACTION",
            help=f"compact entry logs with less than this live fraction (default {threshold}; "
            "0 disables)",
        )
        p.add_argument(
            f"--{kind}-compaction-interval",
            type=_non_negative_float,
            metavar="SECONDS",
            help=f"seconds between {kind} compactions (default {interval}; 0 disables)",
        )
    p.add_argument(
        "--compaction-max-rate",
        type=_rate,
        metavar="SIZE/s",
        help="copy at most this many bytes per second when compacting (default 0: no limit)",
    )
    p.add_argument(
        "--compaction-batch-size",
        type=_size,
        metavar="SIZE",
        help="compaction copies and re-indexes this much at a time (default 4MiB)",
    )
    p.add_argument("--tls-cert", metavar="PEM", help="serve TLS only, with this certificate chain")
    p.add_argument("--tls-key", metavar="PEM", help="the private key of --tls-cert")
    p.add_argument(
        "--tls-ca",
        metavar="PEM",
        help="CA bundle that signs client certificates (and, for the autorecovery worker, "
        "the other bookies' certificates)",
    )
    p.add_argument(
        "--tls-client-auth",
        choices=["none", "optional", "require"],
        help="ask clients for a certificate signed by --tls-ca: none (default), optional "
        "(checked when given), require",
    )
    p.add_argument(
        "--auth",
        choices=["none", "token", "tls"],
        help="authenticate clients: none (default), token (shared tokens from "
        "--auth-token-file), tls (the client certificate's subject; needs --tls-client-auth "
        "require)",
    )
    p.add_argument(
        "--auth-token-file",
        metavar="PATH",
        help="with --auth token: a file (mode 0600) of PRINCIPAL:TOKEN lines",
    )
    p.add_argument(
        "--authorize",
        action="append",
        metavar="OP=PRINCIPAL[,PRINCIPAL...]",
        help="only these principals may do OP (add, fence, read, admin); repeatable; "
        "operations without a rule are open to every authenticated principal",
    )
    p.add_argument(
        "--autorecovery-token-file",
        metavar="PATH",
        help="a file (mode 0600) holding the token this bookie's autorecovery worker sends "
        "to bookies started with --auth token",
    )
    p.add_argument(
        "--max-long-poll",
        type=_positive_float,
        metavar="SECONDS",
        help="longest a long-poll LAC read waits, whatever it asks for (default 30)",
    )
    p.add_argument(
        "--max-long-polls",
        type=_positive_int,
        metavar="N",
        help="long polls waiting at once; more are answered TOO_MANY_REQUESTS (default 10000)",
    )
    p.add_argument(
        "--max-connections",
        type=_positive_int,
        metavar="N",
        help="client connections at once; more are answered TOO_MANY_REQUESTS and closed "
        "(default 1000)",
    )
    p.add_argument(
        "--max-connections-per-address",
        type=_positive_int,
        metavar="N",
        help="client connections at once from one address; more close one of that address's "
        "idle connections or are refused (default: no cap of its own)",
    )
    p.add_argument(
        "--max-requests-per-connection",
        type=_positive_int,
        metavar="N",
        help="requests of one connection in flight; more are answered TOO_MANY_REQUESTS "
        "(default 20000)",
    )
    p.add_argument(
        "--max-partial-frame-bytes",
        type=_size,
        metavar="SIZE",
        help="frames received in part, over all connections; past it a connection with a "
        "partial frame over 64KiB gets TOO_MANY_REQUESTS and is closed (default 256MiB)",
    )
    p.add_argument(
        "--max-inflight-add-bytes",
        type=_size,
        metavar="SIZE",
        help="bytes of entries of adds in flight, over all connections; past it sockets are "
        "not read until adds are stored (default 256MiB)",
    )
    p.add_argument(
        "--max-unsent-bytes-total",
        type=_size,
        metavar="SIZE",
        help="answers queued over all connections; past it a connection with answers of its "
        "own queued is not read until they go (default 256MiB)",
    )
    p.add_argument(
        "--send-timeout",
        type=_positive_float,
        metavar="SECONDS",
        help="close a connection whose peer takes none of its queued answers for this long "
        "(default 30)",
    )
    p.add_argument(
        "--first-request-timeout",
        type=_positive_float,
        metavar="SECONDS",
        help="close a new connection that sends no whole request within this long (default 10)",
    )
    p.add_argument(
        "--frame-timeout",
        type=_positive_float,
        metavar="SECONDS",
        help="close a connection whose frame is not whole this long after its first bytes "
        "(default 30)",
    )
    p.add_argument(
        "--evict-idle-after",
        type=_positive_float,
        metavar="SECONDS",
        help="with max-connections open, a new connection closes one idle this long instead "
        "of being refused (default 10)",
    )
    p.add_argument(
        "--evict-unread-after",
        type=_positive_float,
        metavar="SECONDS",
        help="with max-unsent-bytes-total of answers queued and reads waiting, close "
        "connections whose peers took none of their answers for this long (default 2)",
    )
    p.add_argument(
        "--lost-bookie-delay",
        type=_non_negative_float,
        metavar="SECONDS",
        help="autorecovery: seconds a bookie must stay gone before its ledgers are rereplicated "
        "(default 30; stored cluster-wide by the first bookie, see `walkit autorecovery delay`)",
    )
    p.add_argument(
        "--rereplication-entries-per-second",
        type=_entries_rate,
        metavar="RATE",
        help="autorecovery: this bookie's worker copies at most this many entries/s "
        "(0: no limit; default 5000)",
    )
    p.add_argument(
        "--rereplication-bytes-per-second",
        type=_rate,
        metavar="SIZE/s",
        help="autorecovery: this bookie's worker copies at most this many bytes/s, e.g. "
        "64MiB/s (0: no limit; default 16MiB/s)",
    )
    p.add_argument(
        "--no-autorecovery",
        action="store_true",
        help="run no autorecovery auditor or replication worker in this bookie (it still "
        "copies fragments asked of it, by `walkit recover` say, unless --no-fragment-copies)",
    )
    p.add_argument(
        "--no-fragment-copies",
        action="store_true",
        help="refuse COPY_FRAGMENT requests: a healer outside this bookie then sends it the "
        "copies itself (each byte through one more process)",
    )
    p.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log events of this level and above, to stderr (default info)",
    )
    p.add_argument(
        "--log-format",
        choices=["console", "json"],
        default=None,
        help="console text (default) or JSON lines",
    )
    p.add_argument("--log-json", action="store_true", help="same as --log-format json")
    return p


def config_from_args(args: argparse.Namespace) -> BookieConfig:
    options: dict[str, Any] = {
        "data_dirs": args.data_dir,
        "host": args.host,
        "port": args.port,
        "network_location": args.network_location,
    }
    if args.admin_host is not None:
        options["http_host"] = args.admin_host
    if args.admin_plain_http:
        options["admin_tls"] = False
    if args.advertised_address is not None:
        options["advertised_address"] = args.advertised_address
    if args.admin_token is not None:
        options["admin_token"] = args.admin_token
    elif args.admin_token_file is not None:
        options["admin_token"] = read_token_file(args.admin_token_file)
    for arg, field in (
        ("http_port", "http_port"),
        ("max_frame_size", "max_frame_size"),
        ("journal_max_size", "journal_max_size"),
        ("entrylog_max_size", "entrylog_max_size"),
        ("write_cache_size", "write_cache_max_bytes"),
        ("checkpoint_interval", "checkpoint_interval"),
        ("disk_usage_threshold", "disk_usage_threshold"),
        ("disk_check_interval", "disk_check_interval"),
        ("gc_interval", "gc_interval"),
        ("minor_compaction_threshold", "minor_compaction_threshold"),
        ("minor_compaction_interval", "minor_compaction_interval"),
        ("major_compaction_threshold", "major_compaction_threshold"),
        ("major_compaction_interval", "major_compaction_interval"),
        ("compaction_max_rate", "compaction_max_rate"),
        ("compaction_batch_size", "compaction_batch_bytes"),
        ("tls_cert", "tls_cert"),
        ("tls_key", "tls_key"),
        ("tls_ca", "tls_ca"),
        ("tls_client_auth", "tls_client_auth"),
        ("auth", "auth"),
        ("auth_token_file", "auth_token_file"),
        ("authorize", "authorize"),
        ("autorecovery_token_file", "autorecovery_token_file"),
        ("max_long_poll", "max_long_poll"),
        ("max_long_polls", "max_long_polls"),
        ("max_connections", "max_connections"),
        ("max_connections_per_address", "max_connections_per_address"),
        ("max_requests_per_connection", "max_requests_per_connection"),
        ("max_partial_frame_bytes", "max_partial_frame_bytes"),
        ("max_inflight_add_bytes", "max_inflight_add_bytes"),
        ("max_unsent_bytes_total", "max_unsent_bytes_total"),
        ("send_timeout", "send_timeout"),
        ("first_request_timeout", "first_request_timeout"),
        ("frame_timeout", "frame_timeout"),
        ("evict_idle_after", "evict_idle_after"),
        ("evict_unread_after", "evict_unread_after"),
        ("lost_bookie_delay", "lost_bookie_delay"),
        ("rereplication_entries_per_second", "rereplication_entries_per_second"),
        ("rereplication_bytes_per_second", "rereplication_bytes_per_second"),
    ):
        value = getattr(args, arg)
        if value is not None:
            options[field] = value
    options["autorecovery"] = not args.no_autorecovery
    options["fragment_copies"] = not args.no_fragment_copies
    return BookieConfig(**options)


def read_token_file(path: str) -> str:
    """The admin token: the first line of ``path``, which only its owner may read."""
    lines = read_private_text(path, "admin token file", limit=4096).splitlines()
    if not lines or not lines[0].strip():
        raise ConfigurationError(f"the admin token file {path} is empty")
    return lines[0].strip()


def configure_logging(level: str, json_lines: bool, fmt: str | None = None) -> None:
    """``fmt`` (``--log-format``) wins over ``json_lines`` (``--log-json``, its alias)."""
    configure_cli_logging(level.lower(), fmt or ("json" if json_lines else "console"))


async def _serve(config: BookieConfig, metadata_url: str | None) -> None:
    store = None
    if metadata_url is not None:
        from walkit.metadata import open_metadata_store

        store = await open_metadata_store(metadata_url)
    try:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:

                async def stop_on_signal() -> None:
                    async for signum in signals:
                        log.info("bookie_stopping", signal=signal.Signals(signum).name)
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(stop_on_signal)
                bookie = Bookie(config, metadata=store)
                bookie_id = await nursery.start(bookie.run)
                print(f"walkit-bookie listening on {bookie_id}", flush=True)
                if bookie.admin_address is not None:
                    host, port = bookie.admin_address
                    scheme = "https" if config.tls_cert and config.admin_tls else "http"
                    print(f"walkit-bookie admin on {scheme}://{host}:{port}/metrics", flush=True)
    finally:
        if store is not None:
            with trio.CancelScope(shield=True):
                await store.aclose()


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        config = config_from_args(args)
        config.tls_server_context()  # unreadable TLS files: a usage error, before anything
        config.authenticator()  # and an unreadable or unsafe token file
        if config.autorecovery_token_file is not None:
            read_auth_token_file(config.autorecovery_token_file)
    except ConfigurationError as bad:
        parser.error(str(bad))  # exits 2
    configure_logging(args.log_level, args.log_json, args.log_format)
    # Large journal groups are written from a worker thread that needs the GIL back after its
    # system call; the default 5 ms switch interval would add that to each of them under load.
    sys.setswitchinterval(SWITCH_INTERVAL)
    try:
        trio.run(_serve, config, args.metadata)
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
