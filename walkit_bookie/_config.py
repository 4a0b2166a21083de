"""The bookie's configuration: every option declared once (``walkit._core.options``).

``walkit-bookie``'s flags, its config file (``--config FILE``, TOML) and the option reference
in docs/bookie.md are made from these declarations (``walkit_bookie.cli``,
``walkit_bookie._config_file``).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar, final

import attrs

from walkit._core.auth import (
    AUTH_MODES,
    Authenticator,
    Authorization,
    TlsAuthenticator,
    TokenAuthenticator,
    parse_token_file,
)
from walkit._core.options import (
    FRACTION,
    FRAME_SIZE,
    NON_NEGATIVE,
    PER_SECOND,
    PORT,
    POSITIVE,
    RATE,
    SIZE,
    SWITCH,
    THRESHOLD,
    Kind,
    choice,
    count,
    optional,
)
from walkit._core.wire import DEFAULT_MAX_FRAME_SIZE
from walkit.errors import ConfigurationError
from walkit.net import TLSConfig
from walkit.shared import CLIENT_AUTH_MODES, read_private_text

MiB = 1024 * 1024
#: Listening addresses that mean "every interface": never a registered address.
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", "[::]", "*"})


def _dirs(value: Any) -> tuple[str, ...]:
    if isinstance(value, str | os.PathLike):
        value = [value]
    if not isinstance(value, Iterable):
        raise ConfigurationError(f"data_dirs must be a list of paths, not {value!r}")
    dirs = tuple(os.path.abspath(os.fspath(d)) for d in value)
    if not dirs:
        raise ConfigurationError("a bookie needs at least one data directory (--data-dir DIR)")
    if len(set(dirs)) != len(dirs):
        raise ConfigurationError(f"data directories are listed twice: {list(dirs)}")
    return dirs


def _optional_path(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise ConfigurationError(f"a file option must be a path, not {value!r}")
    return os.path.abspath(os.fspath(value))


def _words(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        value = [value]
    words = tuple(value)
    if not all(isinstance(w, str) for w in words):
        raise ConfigurationError(f"expected a list of strings, not {value!r}")
    return words


def _host(value: Any) -> str | None:
    return None if isinstance(value, str) and value else "must be a non-empty string"


def _location(value: Any) -> str | None:
    if isinstance(value, str) and value.startswith("/") and not value.endswith("/"):
        return None
    return "must be a network location like /region/rack"


def _advertised(value: Any) -> str | None:
    if value is None or (
        isinstance(value, str)
        and value
        and value not in WILDCARD_HOSTS
        and value.isprintable()
        and not any(c in value for c in " /")
    ):
        return None
    return "must be a host name or address clients can connect to"


def _token(value: Any) -> str | None:
    if value is None or (
        isinstance(value, str)
        and len(value) >= 16
        and value.isprintable()
        and value == value.strip()
    ):
        return None
    return (
        "must be at least 16 printable characters without surrounding spaces (e.g. from "
        "`python -c 'import secrets; print(secrets.token_urlsafe())'`)"
    )


def _optional_text(value: Any) -> str | None:
    return None if value is None or isinstance(value, str) else "must be a string"


HOST = Kind(problem=_host, metavar="HOST")
OPTIONAL_HOST = Kind(problem=_optional_text, metavar="HOST")
LOCATION = Kind(problem=_location, metavar="/REGION/RACK")
ADVERTISED = Kind(problem=_advertised, metavar="HOST")
TOKEN = Kind(problem=_token, metavar="TOKEN", secret=True)
DATA_DIRS = Kind(convert=_dirs, repeated=True, metavar="DIR")
PATH = Kind(convert=_optional_path, metavar="PATH")
WORDS = Kind(convert=_words, repeated=True, metavar="WORD")
#: Options in seconds (numbers > 0).
SECONDS = POSITIVE
#: Whole numbers > 0.
POSITIVE_INT = count(1)


@final
@attrs.frozen(kw_only=True)
class BookieConfig:
    """Everything a bookie is started with (each option's help says what it does).

    ``data_dirs``: the journal lives in the first directory; entry logs and the index in the
    others (or in the first when there is only one). Every directory gets a cookie.
    """

    #: Errors name an option as the flag's words do ("port must be ...").
    option_noun: ClassVar[str] = ""

    # --- where ------------------------------------------------------------------------------
    data_dirs: tuple[str, ...] = attrs.field(
        converter=_dirs,
        **DATA_DIRS.option(
            "data directory; repeat for more. The first holds the journal, the others the entry "
            "logs (spread over them) and the index (in the first of them); with one, it holds "
            "everything. Put the journal on its own disk when you have two",
            flags=["--data-dir"],
        ),
    )
    host: str = HOST.field(
        "127.0.0.1",
        "address to listen on; the bookie id is host:port. A wildcard (0.0.0.0, ::) needs "
        "--advertised-address",
    )
    port: int = PORT.field(
        0,
        "port to listen on; 0: the port recorded in the cookie when the data directories "
        "already belong to a bookie (a restart comes back at the same address), else a "
        "free one",
    )
    network_location: str = LOCATION.field(
        "/default-region/default-rack",
        "where this bookie sits, for rack- and region-aware placement (registered in the "
        "metadata store)",
    )
    advertised_address: str | None = ADVERTISED.field(
        None,
        "the address registered for clients instead of --host: required with a wildcard "
        "--host (0.0.0.0, ::), which clients cannot connect to; also for NAT",
    )

    # --- admin endpoint ---------------------------------------------------------------------
    http_port: int | None = optional(PORT).field(
        None,
        "serve /metrics (prometheus), /health and /admin/gc over HTTP on this port (0: any "
        "free; printed as `walkit-bookie admin on http://...`); registered as http_port in "
        "the metadata store. Without it, no admin endpoint",
        flags=["--admin-port", "--http-port"],
    )
    http_host: str | None = OPTIONAL_HOST.field(
        "127.0.0.1",
        "address of the admin endpoint, whatever --host is (None in Python: --host)",
        flags=["--admin-host"],
    )
    admin_tls: bool = SWITCH.field(
        True,
        "with --tls-cert the admin endpoint serves HTTPS with the bookie's certificate, "
        "--tls-ca and --tls-client-auth; this flag (admin_tls = false) serves it over "
        "plain HTTP, e.g. for a scraper on the same host",
        flags=["--admin-plain-http"],
    )
    admin_token: str | None = TOKEN.field(
        None,
        "the bearer token admin POSTs need (Authorization: Bearer TOKEN); without one, "
        "admin POSTs get 403. Visible in the process list: prefer --admin-token-file. "
        "Never printed",
        repr=False,
    )

    # --- limits of what clients can make the bookie hold -------------------------------------
    max_frame_size: int = FRAME_SIZE.field(
        DEFAULT_MAX_FRAME_SIZE,
        "larger frames are refused (answered with an error, then the connection closes)",
    )
    max_inflight_adds: int = POSITIVE_INT.field(
        10_000,
        "adds accepted but not yet answered, over all connections; beyond it sockets are not read",
    )
    max_inflight_add_bytes: int = SIZE.field(
        256 * MiB,
        "bytes of the entries of adds in flight, over all connections (held in memory "
        "until stored); past it sockets are not read until adds are stored",
    )
    max_inflight_reads: int = POSITIVE_INT.field(
        1_000, "reads (long polls included) accepted but not yet answered, over all connections"
    )
    max_unsent_bytes: int = SIZE.field(
        16 * MiB,
        "answers queued for one connection that its peer has not read yet; beyond it that "
        "one socket is not read",
    )
    max_unsent_bytes_total: int = SIZE.field(
        256 * MiB,
        "answers queued over all connections that their peers have not read yet; past it "
        "a connection with answers of its own queued is not read until they go "
        "(connections whose peers keep up go on)",
    )
    send_timeout: float = SECONDS.field(
        30.0,
        "close a connection whose peer takes none of its queued answers (about 1 MiB at "
        "a time) for this many seconds; its answers are dropped",
    )
    first_request_timeout: float = SECONDS.field(
        10.0,
        "close a new connection that sends no whole request (its AUTH, with "
        "authentication on; a TLS handshake counts) within this many seconds",
    )
    frame_timeout: float = SECONDS.field(
        30.0,
        "close a connection whose frame is not whole this many seconds after its first "
        "bytes (time the bookie does not read the socket, under backpressure, is not "
        "counted)",
    )
    evict_idle_after: float = SECONDS.field(
        10.0,
        "with --max-connections open, a new connection closes one with nothing in flight "
        "or queued instead of being refused: the oldest that has sent no whole request, "
        "else the one idle longest if idle this many seconds, else one whose frame has "
        "been arriving for over 2 s",
    )
    evict_unread_after: float = SECONDS.field(
        2.0,
        "while the answers queued over all connections are at --max-unsent-bytes-total "
        "and reads wait for room, close the connections whose peers have taken none of "
        "their answers for this many seconds, the longest stuck first, until the total is "
        "under",
    )
    max_long_poll: float = SECONDS.field(
        30.0,
        "longest a long-poll LAC read waits, in seconds, whatever timeout it asks for (the "
        "wire allows 2^32-1 ms, 49 days)",
    )
    max_long_polls: int = POSITIVE_INT.field(
        10_000,
        "long polls waiting at once, over all connections (counted apart from reads: a "
        "wait must not stop the read loop); more are answered TOO_MANY_REQUESTS",
    )
    max_connections: int = POSITIVE_INT.field(
        1_000,
        "client connections open at once; the first request of one more is answered "
        "TOO_MANY_REQUESTS, then it is closed",
    )
    max_connections_per_address: int | None = optional(POSITIVE_INT).field(
        None,
        "client connections open at once from one address (ZooKeeper's maxClientCnxns); "
        "one more closes an idle connection of that address (as at --max-connections) or "
        "is refused, so one host cannot hold every slot. Clients behind one NAT address "
        "share it. Default: no cap of its own",
    )
    max_requests_per_connection: int = POSITIVE_INT.field(
        20_000,
        "requests of one connection accepted but not yet answered (long polls included); "
        "more are answered TOO_MANY_REQUESTS",
    )
    max_partial_frame_bytes: int = SIZE.field(
        256 * MiB,
        "bytes of frames received in part, over all connections; past it a connection "
        "whose partial frame is over 64KiB gets TOO_MANY_REQUESTS and is closed, so slow "
        "or stalled big frames cannot pin memory",
    )
    bad_input_log_burst: int = POSITIVE_INT.field(
        10,
        "warnings about bad input (malformed frames and messages) logged per "
        "--bad-input-log-interval; the rest are counted (walkit_bookie_bad_input_total) "
        "and summed up in the next warning",
    )
    bad_input_log_interval: float = SECONDS.field(60.0, "seconds of --bad-input-log-burst")

    # --- journal, entry logs, checkpoints ------------------------------------------------------
    group_commit_max_wait: float = SECONDS.field(
        0.001,
        "longest an add waits, in seconds, for others to join its journal write (only "
        "while others keep arriving; an idle bookie writes at once)",
    )
    group_commit_max_bytes: int = SIZE.field(
        4 * MiB, "a journal write (one fdatasync) carries at most about this many bytes"
    )
    copy_group_max_bytes: int = SIZE.field(
        8 * MiB,
        "rereplication copies (adds flagged COPY) are stored apart from the journal, "
        "straight in an entry log: one write, one fdatasync and one index transaction per "
        "group of at most about this many bytes",
    )
    journal_thread_min_bytes: int = count(0, "SIZE").field(
        256 * 1024,
        "journal groups of at least this many bytes, and a lone request of a quarter of it, "
        "are written from a worker thread, so receiving and answering go on meanwhile; "
        "smaller ones inline (a small O_DIRECT write costs less than a hand-off to a thread "
        "and back once both cores are busy). 0: always a thread",
    )
    journal_max_size: int = SIZE.field(512 * MiB, "journal file roll size")
    entrylog_max_size: int = SIZE.field(1024 * MiB, "entry log roll size")
    write_cache_max_bytes: int = SIZE.field(
        128 * MiB,
        "entries kept in memory between checkpoints; at twice this, adds wait (the journal "
        "stalls) for a checkpoint",
        flags=["--write-cache-size"],
    )
    checkpoint_interval: float = SECONDS.field(30.0, "seconds between checkpoints")

    # --- disks ----------------------------------------------------------------------------------
    disk_usage_threshold: float = FRACTION.field(
        0.95, "turn read-only above this fraction of used space on any data directory's disk"
    )
    disk_usage_lwm: float | None = optional(FRACTION).field(
        None, "writable again below this fraction (default: 0.05 below --disk-usage-threshold)"
    )
    disk_check_interval: float = SECONDS.field(10.0, "seconds between disk usage checks")

    # --- garbage collection and compaction -------------------------------------------------------
    gc_interval: float = SECONDS.field(
        300.0,
        "seconds between garbage collection rounds: ledgers deleted in the metadata store "
        "are forgotten (only with --metadata) and entry logs with nothing live removed",
    )
    minor_compaction_threshold: float = THRESHOLD.field(
        0.2,
        "compact entry logs with less than this live fraction, every "
        "--minor-compaction-interval (0 disables minor compaction)",
    )
    minor_compaction_interval: float = NON_NEGATIVE.field(
        3600.0, "seconds between minor compactions (0 disables them)"
    )
    major_compaction_threshold: float = THRESHOLD.field(
        0.8,
        "the same for major compaction, which runs less often (0 disables it); the minor "
        "threshold must not be above it",
    )
    major_compaction_interval: float = NON_NEGATIVE.field(
        86400.0, "seconds between major compactions (0 disables them)"
    )
    compaction_max_rate: float = RATE.field(
        0,
        "copy at most this many bytes per second when compacting, to spare the disks for "
        "adds and reads",
    )
    compaction_batch_bytes: int = SIZE.field(
        4 * MiB,
        "compaction copies live entries, and updates the index, this much at a time",
        flags=["--compaction-batch-size"],
    )
    metadata_retry_max: float = SECONDS.field(
        10.0,
        "after the metadata session is lost, the bookie registers again through a new "
        "store, with exponential backoff up to this many seconds between attempts",
    )

    # --- TLS and authentication ----------------------------------------------------------------
    tls_cert: str | None = attrs.field(
        default=None,
        converter=_optional_path,
        **PATH.option(
            "serve TLS only, with this certificate chain (PEM); needs --tls-key",
            metavar="PEM",
        ),
    )
    tls_key: str | None = attrs.field(
        default=None,
        converter=_optional_path,
        **PATH.option("the private key of --tls-cert (PEM)", metavar="PEM"),
    )
    tls_ca: str | None = attrs.field(
        default=None,
        converter=_optional_path,
        **PATH.option(
            "CA bundle that signs client certificates (and, for the autorecovery worker, the "
            "other bookies' certificates)",
            metavar="PEM",
        ),
    )
    tls_client_auth: str = choice(*CLIENT_AUTH_MODES).field(
        "none",
        "ask clients for a certificate signed by --tls-ca: none, optional (checked when "
        "given) or require",
    )
    auth: str = choice(*AUTH_MODES).field(
        "none",
        "authenticate clients: none, token (shared tokens from --auth-token-file) or tls "
        "(the verified client certificate's subject; needs --tls-client-auth require)",
    )
    auth_token_file: str | None = attrs.field(
        default=None,
        converter=_optional_path,
        **PATH.option(
            "with --auth token: a file of PRINCIPAL:TOKEN lines, readable by its owner only (0600)"
        ),
    )
    authorize: tuple[str, ...] = attrs.field(
        default=(),
        converter=_words,
        **WORDS.option(
            "only these principals may do OP (add, fence, read, admin); repeatable; an "
            "operation without a rule is open to every authenticated principal",
            metavar="OP=PRINCIPAL[,PRINCIPAL...]",
        ),
    )
    autorecovery_token_file: str | None = attrs.field(
        default=None,
        converter=_optional_path,
        **PATH.option(
            "a file (0600) holding the token this bookie's autorecovery worker sends to "
            "bookies started with --auth token"
        ),
    )

    # --- autorecovery --------------------------------------------------------------------------
    autorecovery: bool = SWITCH.field(
        False,
        "run an autorecovery auditor candidate and replication worker in this bookie (see "
        "docs/autorecovery.md); --no-autorecovery (autorecovery = false) runs neither, "
        "and the bookie still copies fragments asked of it unless --no-fragment-copies. "
        "On in walkit-bookie; an embedded Bookie opts in",
        flags=["--no-autorecovery"],
        command_default=True,
    )
    fragment_copies: bool = SWITCH.field(
        False,
        "answer COPY_FRAGMENT requests (a rereplicator elsewhere has this bookie copy a lost "
        "copy from the replicas itself), through a client of the metadata store; "
        "--no-fragment-copies (fragment_copies = false) refuses them, and the rereplicator sends "
        "the copies itself (each byte through one more process). On in walkit-bookie",
        flags=["--no-fragment-copies"],
        command_default=True,
    )
    lost_bookie_delay: float = NON_NEGATIVE.field(
        30.0,
        "autorecovery: seconds a bookie must stay gone before its ledgers are marked for "
        "rereplication (stored cluster-wide by the first bookie; `walkit autorecovery "
        "delay` changes it at run time)",
    )
    rereplication_entries_per_second: float | None = optional(PER_SECOND).field(
        None,
        "autorecovery: this bookie's worker copies at most this many entries per second "
        "(0: no limit; default: autorecovery's, 5000)",
    )
    rereplication_bytes_per_second: int | None = optional(RATE).field(
        None,
        "autorecovery: this bookie's worker copies at most this many bytes per second, "
        "e.g. 64MiB/s (0: no limit; default: autorecovery's, 16MiB/s)",
    )

    def tls_server_context(self) -> ssl.SSLContext | None:
        """The TLS context to serve with (None: plain TCP). Reads the files: raises
        ConfigurationError when one is missing or unreadable."""
        if self.tls_cert is None:
            return None
        tls = TLSConfig(cert=self.tls_cert, key=self.tls_key, ca=self.tls_ca)
        return tls.server_context(self.tls_client_auth)  # type: ignore[arg-type]

    def admin_server_context(self) -> ssl.SSLContext | None:
        """The admin endpoint's TLS context (None: plain HTTP)."""
        return self.tls_server_context() if self.admin_tls else None

    def authenticator(self) -> Authenticator | None:
        """The plug-in that authenticates clients (None: authentication is off). Reads the
        token file: raises ConfigurationError when it is missing, unreadable, readable by
        group or others, or malformed."""
        if self.auth == "tls":
            return TlsAuthenticator()
        if self.auth != "token" or self.auth_token_file is None:
            return None
        path = self.auth_token_file
        text = read_private_text(path, "auth token file")
        return TokenAuthenticator(parse_token_file(text, path))

    def authorization(self) -> Authorization | None:
        """The rules of ``authorize`` (None: every authenticated principal may do all)."""
        return Authorization.parse(self.authorize) if self.authorize else None

    def _check_auth(self) -> None:
        if self.authorize:
            Authorization.parse(self.authorize)  # a usage error at once
            if self.auth == "none":
                raise ConfigurationError("--authorize needs authentication: give --auth")
        if self.auth == "token" and self.auth_token_file is None:
            raise ConfigurationError("--auth token needs --auth-token-file")
        if self.auth != "token" and self.auth_token_file is not None:
            raise ConfigurationError("--auth-token-file is only used with --auth token")
        if self.auth == "tls" and self.tls_client_auth != "require":
            raise ConfigurationError(
                "--auth tls needs --tls-client-auth require (every client then has a "
                "certificate to name it)"
            )

    def _check_tls(self) -> None:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigurationError(
                "TLS needs both a certificate and its key (--tls-cert, --tls-key)"
            )
        if self.tls_cert is None and (self.tls_ca is not None or self.tls_client_auth != "none"):
            raise ConfigurationError(
                "--tls-ca and --tls-client-auth need TLS: give --tls-cert and --tls-key"
            )
        if self.tls_client_auth != "none" and self.tls_ca is None:
            raise ConfigurationError(
                f"--tls-client-auth {self.tls_client_auth} needs --tls-ca to check client "
                "certificates"
            )

    @property
    def journal_dir(self) -> Path:
        return Path(self.data_dirs[0])

    @property
    def ledger_dirs(self) -> tuple[Path, ...]:
        dirs = self.data_dirs[1:] or self.data_dirs
        return tuple(Path(d) for d in dirs)

    @property
    def minor_compaction_enabled(self) -> bool:
        return self.minor_compaction_threshold > 0 and self.minor_compaction_interval > 0

    @property
    def major_compaction_enabled(self) -> bool:
        return self.major_compaction_threshold > 0 and self.major_compaction_interval > 0

    @property
    def writable_again_below(self) -> float:
        if self.disk_usage_lwm is not None:
            return self.disk_usage_lwm
        return max(0.0, self.disk_usage_threshold - 0.05)

    def __attrs_post_init__(self) -> None:
        self._check_tls()
        self._check_auth()
        if self.host in WILDCARD_HOSTS and self.advertised_address is None:
            raise ConfigurationError(
                f"host {self.host!r} listens on every interface, which is no address a client "
                "can connect to: give advertised_address (--advertised-address HOST), the "
                "address to register for clients"
            )
        if self.disk_usage_lwm is not None and self.disk_usage_lwm > self.disk_usage_threshold:
            raise ConfigurationError(
                f"disk_usage_lwm ({self.disk_usage_lwm}) must not be above "
                f"disk_usage_threshold ({self.disk_usage_threshold})"
            )
        if (
            self.minor_compaction_enabled
            and self.major_compaction_enabled
            and self.minor_compaction_threshold > self.major_compaction_threshold
        ):
            raise ConfigurationError(
                f"minor_compaction_threshold ({self.minor_compaction_threshold}) must not be "
                f"above major_compaction_threshold ({self.major_compaction_threshold})"
            )
