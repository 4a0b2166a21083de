"""The bookie's configuration."""

from __future__ import annotations

import os
import ssl
from collections.abc import Iterable
from pathlib import Path
from typing import Any, final

import attrs

from walkit._core.auth import (
    AUTH_MODES,
    Authenticator,
    Authorization,
    TlsAuthenticator,
    TokenAuthenticator,
    parse_token_file,
)
from walkit._core.wire import DEFAULT_MAX_FRAME_SIZE
from walkit._private_file import read_private_text
from walkit.errors import ConfigurationError
from walkit.net import TLSConfig
from walkit.net._tls import CLIENT_AUTH_MODES

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
        raise ConfigurationError("a bookie needs at least one data directory")
    if len(set(dirs)) != len(dirs):
        raise ConfigurationError(f"data directories are listed twice: {list(dirs)}")
    return dirs


def _optional_path(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str | os.PathLike) or not os.fspath(value):
        raise ConfigurationError(f"a TLS file must be a path, not {value!r}")
    return os.path.abspath(os.fspath(value))


def _positive(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
        raise ConfigurationError(f"{attribute.name} must be a positive number, not {value!r}")


def _fraction(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigurationError(f"{attribute.name} must be in (0, 1], not {value!r}")


def _non_negative(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
        raise ConfigurationError(f"{attribute.name} must be 0 or more, not {value!r}")


def _threshold(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
        raise ConfigurationError(f"{attribute.name} must be in [0, 1], not {value!r}")


def _frame_size(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 2048 <= value < 2**32:
        raise ConfigurationError(
            f"max_frame_size must be from 2048 (room for a frame's headers, key and digest) "
            f"to 2^32-1 (frame lengths are 32-bit), not {value!r}"
        )


def _port(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 65536:
        raise ConfigurationError(f"port must be in 0..65535, not {value!r}")


def _location(instance: Any, attribute: attrs.Attribute[Any], value: Any) -> None:
    if not isinstance(value, str) or not value.startswith("/") or value.endswith("/"):
        raise ConfigurationError(f"network location must look like /region/rack, not {value!r}")


@final
@attrs.frozen(kw_only=True)
class BookieConfig:
    """Everything a bookie is started with.

    ``data_dirs``: the journal lives in the first directory; entry logs and the index in the
    others (or in the first when there is only one). Every directory gets a cookie.

    ``port`` 0 means: the port recorded in the cookie when the directories already belong to a
    bookie (so a restart comes back at the same address), else a free one.
    """

    data_dirs: tuple[str, ...] = attrs.field(converter=_dirs)
    host: str = "127.0.0.1"
    port: int = attrs.field(default=0, validator=_port)
    network_location: str = attrs.field(default="/default-region/default-rack", validator=_location)

    #: Port of the HTTP admin endpoint (/metrics, /health, /admin/gc); None: no endpoint,
    #: 0: any free (``--admin-port``).
    http_port: int | None = attrs.field(default=None, validator=attrs.validators.optional(_port))
    #: Address of the HTTP admin endpoint: loopback unless given (``--admin-host``), whatever
    #: ``host`` is. None means ``host`` (the old behaviour, for callers that relied on it).
    http_host: str | None = "127.0.0.1"
    #: The bearer token POSTs to the admin endpoint need (``Authorization: Bearer TOKEN``);
    #: None: admin POSTs are refused (403). Never printed.
    admin_token: str | None = attrs.field(default=None, repr=False)
    #: The address registered for clients when ``host`` is a wildcard (0.0.0.0, ::), which
    #: clients cannot connect to; required then.
    advertised_address: str | None = None

    #: Frames larger than this are refused (answered with an error, then the connection closes).
    max_frame_size: int = attrs.field(default=DEFAULT_MAX_FRAME_SIZE, validator=_frame_size)
    #: Adds accepted but not yet answered, over all connections; beyond it sockets are not read.
    max_inflight_adds: int = attrs.field(default=10_000, validator=_positive)
    #: Bytes of those adds' entries (they are held in memory until stored); beyond it sockets
    #: are not read either, so big entries cannot pile up to ``max_inflight_adds`` of them.
    max_inflight_add_bytes: int = attrs.field(default=256 * MiB, validator=_positive)
    #: Reads (including long polls) accepted but not yet answered, over all connections.
    max_inflight_reads: int = attrs.field(default=1_000, validator=_positive)
    #: Answers queued for one connection that its peer has not read yet; beyond it that one
    #: socket is not read.
    max_unsent_bytes: int = attrs.field(default=16 * MiB, validator=_positive)
    #: Answers queued over all connections that their peers have not read yet; beyond it a
    #: connection with answers of its own still queued is not read until they go (connections
    #: whose peers keep up go on).
    max_unsent_bytes_total: int = attrs.field(default=256 * MiB, validator=_positive)
    #: Seconds a connection's queued answers may wait without its peer taking any of them
    #: (about 1 MiB at a time); past it the connection is closed and its answers dropped.
    send_timeout: float = attrs.field(default=30.0, validator=_positive)
    #: Seconds a new connection has to deliver its first whole request (its AUTH, with
    #: authentication on; a TLS handshake counts); past it the connection is closed. Clients
    #: connect when they have something to send.
    first_request_timeout: float = attrs.field(default=10.0, validator=_positive)
    #: Seconds a frame may take to arrive once its first bytes have (time the bookie does not
    #: read the socket, under backpressure, is not counted); past it the connection is closed.
    frame_timeout: float = attrs.field(default=30.0, validator=_positive)
    #: With ``max_connections`` open, a new connection closes an open one with nothing in
    #: flight or queued instead of being refused: the oldest that has not sent a whole request,
    #: else the one idle longest if idle at least this many seconds, else one whose frame has
    #: been arriving for over 2 s. Silent and slow connections cannot hold the slots.
    evict_idle_after: float = attrs.field(default=10.0, validator=_positive)
    #: With ``max_unsent_bytes_total`` of answers queued and reads waiting for room, a
    #: connection whose peer has taken none of its answers for this many seconds is closed
    #: (the longest stuck first) until the total is under: peers that read nothing cannot hold
    #: the answer budget, and so the memory, from the clients that do read.
    evict_unread_after: float = attrs.field(default=2.0, validator=_positive)
    #: Longest a long-poll LAC read waits, in seconds, whatever timeout it asks for.
    max_long_poll: float = attrs.field(default=30.0, validator=_positive)
    #: Long polls waiting at once, over all connections. They are counted apart from reads
    #: (a wait must not stop the read loop); beyond it they are answered TOO_MANY_REQUESTS.
    max_long_polls: int = attrs.field(default=10_000, validator=_positive)
    #: Client connections open at once; a connection beyond it gets its first request
    #: answered TOO_MANY_REQUESTS, then is closed.
    max_connections: int = attrs.field(default=1_000, validator=_positive)
    #: Client connections open at once from one address (host); None: no cap of its own
    #: (ZooKeeper's maxClientCnxns, Kafka's max.connections.per.ip). At it, a new connection
    #: from that address closes one of that address's idle connections (as at
    #: ``max_connections``) or is refused: one host cannot hold every slot with connections
    #: that look busy. Clients behind one NAT address share it.
    max_connections_per_address: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(_positive)
    )
    #: Requests of one connection accepted but not yet answered (long polls included);
    #: beyond it they are answered TOO_MANY_REQUESTS.
    max_requests_per_connection: int = attrs.field(default=20_000, validator=_positive)
    #: Bytes of frames received in part, over all connections (a client sends a big frame
    #: in pieces). A connection whose partial frame (over 64 KiB) finds the bookie past it gets
    #: TOO_MANY_REQUESTS and is closed: slow or stalled big frames cannot pin memory.
    max_partial_frame_bytes: int = attrs.field(default=256 * MiB, validator=_positive)
    #: Warnings about bad input (malformed frames and messages) logged per ``bad_input_log_
    #: interval`` seconds; the rest are counted (metric ``walkit_bookie_bad_input_total``) and
    #: summed up in the next warning.
    bad_input_log_burst: int = attrs.field(default=10, validator=_positive)
    bad_input_log_interval: float = attrs.field(default=60.0, validator=_positive)

    #: Longest an add waits for others to join its journal write (it waits only while others
    #: keep arriving; an idle bookie writes at once).
    group_commit_max_wait: float = attrs.field(default=0.001, validator=_positive)
    #: A journal write (one fdatasync) carries at most about this many bytes.
    group_commit_max_bytes: int = attrs.field(default=4 * MiB, validator=_positive)
    #: Rereplication copies (adds flagged COPY) are stored apart from the journal, straight in
    #: an entry log: one write, one fdatasync and one index transaction per group of at most
    #: about this many bytes.
    copy_group_max_bytes: int = attrs.field(default=8 * MiB, validator=_positive)
    #: Groups of at least this many bytes are written from a worker thread, so receiving and
    #: answering go on meanwhile; smaller ones are written inline on the event loop (a small
    #: O_DIRECT write takes ~0.1-0.3 ms, less than a hand-off to a thread and back once both
    #: cores are busy). 0: always a thread.
    journal_thread_min_bytes: int = attrs.field(
        default=256 * 1024, validator=attrs.validators.ge(0)
    )
    journal_max_size: int = attrs.field(default=512 * MiB, validator=_positive)
    entrylog_max_size: int = attrs.field(default=1024 * MiB, validator=_positive)
    #: Entries kept in memory before a checkpoint writes them to entry logs; adds wait (the
    #: journal stalls) when twice this is in memory.
    write_cache_max_bytes: int = attrs.field(default=128 * MiB, validator=_positive)
    checkpoint_interval: float = attrs.field(default=30.0, validator=_positive)

    #: Above this fraction of used space on any data dir's disk the bookie turns read-only...
    disk_usage_threshold: float = attrs.field(default=0.95, validator=_fraction)
    #: ...and turns writable again below this one (default: 0.05 below the threshold).
    disk_usage_lwm: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(_fraction)
    )
    disk_check_interval: float = attrs.field(default=10.0, validator=_positive)

    #: Seconds between garbage collection rounds: ledgers deleted in the metadata store are
    #: forgotten (only with a metadata store) and entry logs with nothing live are removed.
    gc_interval: float = attrs.field(default=300.0, validator=_positive)
    #: Minor compaction: entry logs whose live fraction is below the threshold are compacted,
    #: every interval (seconds). A threshold or interval of 0 disables it.
    minor_compaction_threshold: float = attrs.field(default=0.2, validator=_threshold)
    minor_compaction_interval: float = attrs.field(default=3600.0, validator=_non_negative)
    #: Major compaction: the same with a higher threshold, less often.
    major_compaction_threshold: float = attrs.field(default=0.8, validator=_threshold)
    major_compaction_interval: float = attrs.field(default=86400.0, validator=_non_negative)
    #: Compaction copies at most this many bytes per second (0: as fast as it can).
    compaction_max_rate: float = attrs.field(default=0, validator=_non_negative)
    #: Live entries are copied, and the index updated, this many bytes at a time.
    compaction_batch_bytes: int = attrs.field(default=4 * MiB, validator=_positive)
    #: After the metadata session is lost, the bookie registers again through a new store,
    #: retrying with exponential backoff up to this many seconds between attempts.
    metadata_retry_max: float = attrs.field(default=10.0, validator=_positive)

    #: TLS: the bookie's certificate chain and private key (PEM). Set: clients must use TLS.
    tls_cert: str | None = attrs.field(default=None, converter=_optional_path)
    tls_key: str | None = attrs.field(default=None, converter=_optional_path)
    #: CA bundle that signs client certificates (needed to check them).
    tls_ca: str | None = attrs.field(default=None, converter=_optional_path)
    #: Ask clients for a certificate: "none", "optional" (checked if given) or "require".
    tls_client_auth: str = "none"
    #: With ``tls_cert``: serve the admin endpoint over HTTPS with the same certificate, CA and
    #: client-certificate rule (False: plain HTTP, e.g. for a scraper on the same host).
    admin_tls: bool = True
    #: Authentication of clients: "none", "token" (shared tokens from ``auth_token_file``) or
    #: "tls" (the verified client certificate's subject; needs ``tls_client_auth="require"``).
    auth: str = "none"
    #: With ``auth="token"``: a file of ``PRINCIPAL:TOKEN`` lines, not readable by group or
    #: others (0600).
    auth_token_file: str | None = attrs.field(default=None, converter=_optional_path)
    #: Authorization rules, ``OP=PRINCIPAL[,PRINCIPAL...]`` (OP: add, fence, read, admin);
    #: an operation without a rule is allowed to every authenticated principal.
    authorize: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    #: A file (0600) holding the token the bookie's autorecovery worker sends to bookies
    #: that authenticate clients by token.
    autorecovery_token_file: str | None = attrs.field(default=None, converter=_optional_path)
    #: Run an autorecovery auditor candidate and replication worker (docs/autorecovery.md).
    #: ``walkit-bookie`` turns it on unless ``--no-autorecovery``; an embedded Bookie opts in.
    autorecovery: bool = False
    #: Answer COPY_FRAGMENT requests (copy a fragment from its replicas to this bookie, for
    #: a healer elsewhere), through a client of the metadata store; with or without
    #: ``autorecovery``. ``walkit-bookie`` turns it on unless ``--no-fragment-copies``.
    fragment_copies: bool = False
    #: Seconds a bookie stays unregistered before its ledgers are marked (stored in the
    #: metadata by the first bookie; ``walkit autorecovery delay`` changes it at run time).
    lost_bookie_delay: float = attrs.field(default=30.0, validator=_non_negative)
    #: The replication worker's copy rate limits (0: none; None: autorecovery's defaults,
    #: 5,000 entries/s and 16 MiB/s).
    rereplication_entries_per_second: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(_non_negative)
    )
    rereplication_bytes_per_second: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(_non_negative)
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
        if self.auth not in AUTH_MODES:
            raise ConfigurationError(
                f"auth must be one of {', '.join(AUTH_MODES)}, not {self.auth!r}"
            )
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
        if self.tls_client_auth not in CLIENT_AUTH_MODES:
            raise ConfigurationError(
                f"tls_client_auth must be one of {', '.join(CLIENT_AUTH_MODES)}, "
                f"not {self.tls_client_auth!r}"
            )
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

    @property
    def registered_host(self) -> str:
        """The host clients are told to connect to."""
        return self.advertised_address or self.host

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.host, str) or not self.host:
            raise ConfigurationError(f"host must be a non-empty string, not {self.host!r}")
        self._check_tls()
        self._check_auth()
        advertised = self.advertised_address
        if advertised is not None and (
            not isinstance(advertised, str)
            or not advertised
            or advertised in WILDCARD_HOSTS
            or not advertised.isprintable()
            or any(c in advertised for c in " /")
        ):
            raise ConfigurationError(
                f"advertised_address must be a host name or address clients can connect to, "
                f"not {self.advertised_address!r}"
            )
        if self.host in WILDCARD_HOSTS and self.advertised_address is None:
            raise ConfigurationError(
                f"host {self.host!r} listens on every interface, which is no address a client "
                "can connect to: give advertised_address (--advertised-address HOST), the "
                "address to register for clients"
            )
        if self.admin_token is not None and (
            not isinstance(self.admin_token, str)
            or len(self.admin_token) < 16
            or not self.admin_token.isprintable()
            or self.admin_token != self.admin_token.strip()
        ):
            raise ConfigurationError(
                "admin_token must be at least 16 printable characters without surrounding "
                "spaces (e.g. from `python -c 'import secrets; print(secrets.token_urlsafe())'`)"
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
