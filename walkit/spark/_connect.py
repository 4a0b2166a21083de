"""How the Spark data source reaches a cluster: the metadata URL, the ledger password, and what
a secured cluster asks of a client.

The options (``docs/spark.md``, "A secured cluster"): ``tls.ca``/``tls.cert``/``tls.key`` (PEM
files, for :class:`walkit.TLSConfig`), ``token`` (for :class:`walkit.TokenAuth`), and, for a
``zk://`` URL, ``zk.credentialsFile`` and ``zk.tls.ca``/``zk.tls.cert``/``zk.tls.key`` (the
metadata store's ``credentials_file`` and ``tls_*`` options, ``docs/security.md``, "Metadata
store"). They come from the query's options or from the session's ``spark.walkit.*`` conf, as
Kafka's source takes ``kafka.*``; a query's option wins.

Files are named, never read into the options: every process that connects (the driver's
planner and every task) loads them itself, so they must be readable on the driver and on every
executor. The secrets that are values (``password``, ``token``) never show in a repr, and no
error message quotes them. Every error this module raises names the option to fix.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection, Mapping
from typing import Any, Final, final

import attrs

from walkit._core.auth import TokenAuth
from walkit.client import Client
from walkit.errors import (
    AuthenticationError,
    ConfigurationError,
    MetadataAccessError,
    TLSError,
    WalkitError,
)
from walkit.net import TLSConfig

__all__ = [
    "CONF_PREFIX",
    "CONNECTION_OPTIONS",
    "Connection",
    "SessionOptions",
    "connect",
    "connection",
    "session_options",
]

#: Options that say how to reach the cluster (taken by every form, and from the conf).
CONNECTION_OPTIONS: Final = (
    "metadata",
    "password",
    "token",
    "tls.ca",
    "tls.cert",
    "tls.key",
    "zk.credentialsFile",
    "zk.tls.ca",
    "zk.tls.cert",
    "zk.tls.key",
)
#: The Spark conf prefix of the connection options (``spark.walkit.tls.ca``, ...).
CONF_PREFIX: Final = "spark.walkit."
#: The options whose values are secrets.
SECRET_OPTIONS: Final = ("password", "token")
#: The Spark options -> the metadata store's options (``walkit.metadata.open_metadata_store``).
_ZK_OPTIONS: Final = {
    "zk.credentialsFile": "credentials_file",
    "zk.tls.ca": "tls_ca",
    "zk.tls.cert": "tls_cert",
    "zk.tls.key": "tls_key",
}
_METADATA_SCHEMES: Final = ("zk://", "sqlite://")


@final
@attrs.frozen(repr=False)
class SessionOptions:
    """The connection options of the session's ``spark.walkit.*`` conf, keyed by option name.
    Its repr names the options only: the values may be secrets."""

    values: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:
        return f"SessionOptions({', '.join(name for name, _ in self.values)})"

    def merged(self, options: Mapping[str, str]) -> dict[str, str]:
        """The conf's options under ``options`` (a query's option wins)."""
        return {**dict(self.values), **options}


def session_options(
    conf: Mapping[str, str], startup: Collection[str] | None = None
) -> SessionOptions:
    """The ``spark.walkit.*`` entries of a session's conf. ``startup``: the keys of the
    SparkConf the application started with (None: unknown, as with Spark Connect).

    ConfigurationError for a key that is no connection option (a typo would otherwise be
    ignored), and for a secret set on the running session only (``spark.conf.set``): Spark
    copies the session's conf into the properties of every job and stage it logs, and redacts
    (``spark.redaction.regex``) only the keys of the SparkConf there."""
    spelling = {name.lower(): name for name in CONNECTION_OPTIONS}
    found: list[tuple[str, str]] = []
    for key, value in sorted(conf.items()):
        if not key.lower().startswith(CONF_PREFIX):
            continue
        name = spelling.get(key[len(CONF_PREFIX) :].lower())
        if name is None:
            known = ", ".join(CONF_PREFIX + n for n in CONNECTION_OPTIONS)
            raise ConfigurationError(
                f"walkit: unknown Spark conf {key!r} (the conf takes the connection options: "
                f"{known})"
            )
        if name in SECRET_OPTIONS and startup is not None and key not in startup:
            raise ConfigurationError(
                f"walkit: the Spark conf {key!r} is set on the running session "
                "(spark.conf.set): Spark would show it in the properties of every job and "
                "stage (its event log and UI), unredacted. Set it when the application starts "
                f'(spark-submit --conf {key}=..., or SparkSession.builder.config("{key}", ...) '
                f'before the first session), or give the query .option("{name}", ...)'
            )
        found.append((name, value))
    return SessionOptions(tuple(found))


@final
@attrs.frozen
class Connection:
    """Where the cluster's metadata is, the password of the ledgers read or written, and the
    credentials of a secured cluster (file paths; the ``token`` itself)."""

    metadata: str
    #: The ``password`` option; None when it was not given: then a log's ledgers are read and
    #: written with the password stored with the log, and other ledgers with the empty one.
    password: bytes | None = attrs.field(default=None, repr=False)
    token: str | None = attrs.field(default=None, repr=False)
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    #: The metadata store's options (``credentials_file``, ``tls_ca``, ...) of ``zk.*``.
    zk: tuple[tuple[str, str], ...] = ()

    def client_args(self) -> dict[str, Any]:
        """``Client.connect`` keyword arguments; the files are loaded to check them (each
        process that connects does this: the files must be readable on every executor).
        ConfigurationError naming the option."""
        return {
            "tls": self._tls(),
            "auth": self._auth(),
            "metadata_options": self._zk_options(),
        }

    def _tls(self) -> TLSConfig | None:
        ca, cert, key = self.tls_ca, self.tls_cert, self.tls_key
        if ca is None and cert is None and key is None:
            return None
        if (cert is None) != (key is None):
            raise ConfigurationError(
                "walkit: options 'tls.cert' and 'tls.key' go together: give the client "
                "certificate and its key, or neither"
            )
        for option, path in (("tls.ca", ca), ("tls.cert", cert), ("tls.key", key)):
            _check_readable(option, path)
        try:
            TLSConfig(ca=ca).client_context()
        except ConfigurationError as exc:
            raise ConfigurationError(f"walkit: option 'tls.ca': {exc}") from None
        tls = TLSConfig(ca=ca, cert=cert, key=key)
        try:
            tls.client_context()
        except ConfigurationError as exc:
            raise ConfigurationError(f"walkit: options 'tls.cert' and 'tls.key': {exc}") from None
        return tls

    def _auth(self) -> TokenAuth | None:
        if self.token is None:
            return None
        try:
            return TokenAuth(token=self.token)
        except ConfigurationError as exc:  # its text never quotes the token
            raise ConfigurationError(f"walkit: option 'token': {exc}") from None

    def _zk_options(self) -> dict[str, str]:
        given = dict(self.zk)
        if not given:
            return {}
        try:
            from walkit.metadata._zk_security import read_credentials_file, zk_tls
        except ImportError as exc:  # pragma: no cover - kazoo is in the zookeeper extra
            raise ConfigurationError(
                f"walkit: zk:// needs kazoo (pip install 'walkit[zookeeper]'): {exc}"
            ) from None
        for option, store in _ZK_OPTIONS.items():
            _check_readable(option, given.get(store))
        if "credentials_file" in given:
            try:
                read_credentials_file(given["credentials_file"])
            except ConfigurationError as exc:  # its text never quotes the password
                raise ConfigurationError(f"walkit: option 'zk.credentialsFile': {exc}") from None
        ca, cert, key = given.get("tls_ca"), given.get("tls_cert"), given.get("tls_key")
        if ca is None and (cert is not None or key is not None):
            raise ConfigurationError(
                "walkit: options 'zk.tls.cert' and 'zk.tls.key' need 'zk.tls.ca' (the CA that "
                "signs the ZooKeeper servers' certificates), which turns TLS to ZooKeeper on"
            )
        if (cert is None) != (key is None):
            raise ConfigurationError(
                "walkit: options 'zk.tls.cert' and 'zk.tls.key' go together: give the client "
                "certificate and its key, or neither"
            )
        try:
            zk_tls(ca, cert, key)
        except ConfigurationError as exc:
            raise ConfigurationError(f"walkit: options 'zk.tls.*': {exc}") from None
        return given


def _check_readable(option: str, path: str | None) -> None:
    if path is None:
        return
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ConfigurationError(
            f"walkit: option {option!r}: cannot read {path}: {exc.strerror or exc} (it must "
            "be readable on the driver and on every executor)"
        ) from None


def connection(options: Mapping[str, str]) -> Connection:
    """The connection options (keyed by their documented spelling), checked: the ``metadata``
    URL is required, and the files named are loaded (ConfigurationError naming the option)."""
    url = options.get("metadata", "").strip()
    if not url:
        raise ConfigurationError(
            'walkit: the option "metadata" is required: the metadata URL of the cluster '
            '(zk://host:port/root or sqlite:///path.db), e.g. .option("metadata", URL) or the '
            f"Spark conf {CONF_PREFIX}metadata"
        )
    if url.startswith("memory://"):
        raise ConfigurationError(
            f'walkit: option "metadata" is {url!r}: a memory:// store lives in one process, '
            "and Spark reads and writes from other processes; use zk:// or sqlite://"
        )
    if not url.startswith(_METADATA_SCHEMES):
        raise ConfigurationError(
            f'walkit: option "metadata" is {url!r}, not a metadata URL '
            "(zk://host:port[,host:port...]/root or sqlite:///path.db)"
        )
    zk_given = [option for option in _ZK_OPTIONS if option in options]
    if zk_given and not url.startswith("zk://"):
        raise ConfigurationError(
            f"walkit: option {zk_given[0]!r} is for a zk:// metadata URL, and the option "
            f"'metadata' is {url!r}"
        )
    zk = tuple((_ZK_OPTIONS[option], options[option]) for option in zk_given)
    password = options.get("password")
    conn = Connection(
        url,
        password=None if password is None else password.encode(),
        token=options.get("token"),
        tls_ca=options.get("tls.ca"),
        tls_cert=options.get("tls.cert"),
        tls_key=options.get("tls.key"),
        zk=zk,
    )
    conn.client_args()  # on the driver, before any task starts
    return conn


@contextlib.asynccontextmanager
async def connect(conn: Connection, **options: Any) -> AsyncIterator[Client]:
    """``Client.connect`` with the connection's credentials; a credential the cluster refuses
    is re-raised (same class) with the option to fix in front of its text."""
    args = conn.client_args()
    try:
        async with Client.connect(conn.metadata, **args, **options) as client:
            yield client
    except (AuthenticationError, TLSError, MetadataAccessError) as exc:
        explained = type(exc)(f"walkit: {_culprit(exc, conn)}: {exc}")
        for note in getattr(exc, "__notes__", ()):
            explained.add_note(note)
        raise explained from None


def _culprit(exc: WalkitError, conn: Connection) -> str:
    """Which option to fix for a refusal."""
    text = str(exc)
    if isinstance(exc, AuthenticationError):
        if conn.token is None:
            return "the bookies require a token: give the option 'token'"
        return "option 'token'"
    if isinstance(exc, TLSError):
        if conn.tls_ca is None and conn.tls_cert is None:
            return "the bookies serve TLS: give the options 'tls.ca', 'tls.cert' and 'tls.key'"
        if "CERTIFICATE_VERIFY_FAILED" in text:
            return "option 'tls.ca'"
        if "client certificate" in text or "client's certificate" in text:
            return "options 'tls.cert' and 'tls.key'"
        return "options 'tls.ca', 'tls.cert' and 'tls.key'"
    if "TLS" in text:
        if "CERTIFICATE_VERIFY_FAILED" in text:
            return "option 'zk.tls.ca'"
        return "options 'zk.tls.ca', 'zk.tls.cert' and 'zk.tls.key'"
    return "option 'zk.credentialsFile'"
