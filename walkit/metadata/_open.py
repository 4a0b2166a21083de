"""``open_metadata_store(url)``: parse a metadata URL and open the driver it names."""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Callable
from typing import Any

import anyio.lowlevel

from walkit.errors import ConfigurationError, InvalidArgumentError
from walkit.metadata._paths import check_path
from walkit.metadata._store import MetadataStore

SCHEMES = ("zk", "sqlite", "memory")

#: Options every driver accepts (so generic callers can pass them); the type each must have.
_COMMON = {"session_timeout": float, "connect_timeout": float}
_OPTIONS: dict[str, dict[str, Any]] = {
    "memory": {},
    "sqlite": {"clock": Callable, "busy_timeout": float, "poll_interval": float},
    "zk": {
        "operation_timeout": float,
        "max_threads": int,
        "credentials_file": str,
        "tls_ca": str,
        "tls_cert": str,
        "tls_key": str,
    },
}


async def open_metadata_store(url: str, **options: Any) -> MetadataStore:
    """Open the metadata store ``url`` names; the caller closes it (``aclose`` / ``async with``).

    - ``zk://host:port[,host:port...]/root`` -- ZooKeeper (needs kazoo); the root is created.
    - ``sqlite:///abs/path.db`` -- an embedded file shared by the processes of one host.
    - ``memory://name`` -- in this process only; stores with the same name share one tree.

    Options (keyword arguments, or ``?name=value`` in the URL; keywords win):
    ``session_timeout`` (seconds; zk 10, sqlite 5; memory ignores it), ``connect_timeout``
    (zk, seconds, default 5), ``operation_timeout`` and ``max_threads`` (zk), ``clock``,
    ``busy_timeout`` and ``poll_interval`` (sqlite).

    ZooKeeper security (``docs/security.md``, "Metadata store"): ``credentials_file`` names a
    file (mode 0600) holding ``user:password``; the session then authenticates with ZooKeeper's
    digest scheme and creates every node with an ACL that gives that identity all rights and
    nobody else any. ``tls_ca`` (PEM) turns on TLS to ZooKeeper's ``secureClientPort``, with
    ``tls_cert`` and ``tls_key`` for servers that require client certificates.

    Raises ConfigurationError for a malformed URL or option, MetadataStoreError when the store
    cannot be reached or opened.
    """
    scheme, location, query = _split(url)
    opts = _options(scheme, url, query, options)
    if scheme == "memory":
        from walkit.metadata._memory import MemoryMetadataStore

        await anyio.lowlevel.checkpoint()
        return MemoryMetadataStore(_memory_name(url, location), url)
    if scheme == "sqlite":
        from walkit.metadata._sqlite import SqliteMetadataStore

        return await SqliteMetadataStore.open(url, _sqlite_path(url, location), **opts)
    hosts, root = _zk_location(url, location)
    try:
        from walkit.metadata._zookeeper import ZooKeeperMetadataStore
    except ImportError as exc:  # pragma: no cover - kazoo is in the dev extra
        raise ConfigurationError(
            f"{url}: zk:// needs kazoo (pip install 'walkit[zookeeper]'): {exc}"
        ) from exc
    return await ZooKeeperMetadataStore.open(url, hosts, root, **opts)


def _split(url: object) -> tuple[str, str, str]:
    if not isinstance(url, str):
        raise ConfigurationError(f"metadata URL must be a string, not {type(url).__name__}")
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in SCHEMES:
        raise ConfigurationError(
            f"bad metadata URL {url!r}: expected zk://host:port/root, sqlite:///abs/path.db "
            f"or memory://name"
        )
    location, _, query = rest.partition("?")
    return scheme, location, query


def _options(scheme: str, url: str, query: str, given: dict[str, Any]) -> dict[str, Any]:
    allowed = {**_COMMON, **_OPTIONS[scheme]}
    merged: dict[str, Any] = {}
    try:
        pairs = urllib.parse.parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ConfigurationError(f"bad metadata URL {url!r}: malformed query {query!r}") from None
    for name, text in pairs:
        kind = allowed.get(name)
        if kind not in (float, int, str):
            raise ConfigurationError(f"bad metadata URL {url!r}: unknown option {name!r}")
        if kind is str:
            merged[name] = text
            continue
        try:
            merged[name] = kind(text)
        except ValueError:
            raise ConfigurationError(
                f"bad metadata URL {url!r}: {name}={text!r} is not a number"
            ) from None
    for name, value in given.items():
        if name not in allowed:
            raise ConfigurationError(
                f"unknown {scheme} metadata option {name!r} (known: {', '.join(sorted(allowed))})"
            )
        merged[name] = value
    for name, value in merged.items():
        kind = allowed[name]
        if kind is Callable:
            if not callable(value):
                raise ConfigurationError(f"metadata option {name} must be callable")
        elif kind is str:
            if not isinstance(value, str | os.PathLike) or not os.fspath(value):
                raise ConfigurationError(f"metadata option {name} must be a file path")
            merged[name] = os.fspath(value)
        elif isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
            raise ConfigurationError(
                f"metadata option {name} must be a positive number, not {value!r}"
            )
        elif kind is int and not isinstance(value, int):
            raise ConfigurationError(f"metadata option {name} must be an int, not {value!r}")
    if scheme == "memory":
        return {}
    if scheme == "sqlite":
        merged.pop("connect_timeout", None)
    return merged


def _memory_name(url: str, location: str) -> str:
    name = urllib.parse.unquote(location).strip("/")
    if not name:
        raise ConfigurationError(
            f"bad metadata URL {url!r}: memory:// needs a name (memory://NAME)"
        )
    return name


def _sqlite_path(url: str, location: str) -> str:
    host, slash, path = location.partition("/")
    if host or not slash:
        raise ConfigurationError(
            f"bad metadata URL {url!r}: sqlite needs an absolute path with three slashes "
            f"(sqlite:///abs/path.db)"
        )
    path = urllib.parse.unquote("/" + path)
    if path == "/" or path.endswith("/"):
        raise ConfigurationError(f"bad metadata URL {url!r}: the sqlite path names no file")
    return path


def _zk_location(url: str, location: str) -> tuple[str, str]:
    hosts_text, slash, root = location.partition("/")
    if not hosts_text:
        raise ConfigurationError(
            f"bad metadata URL {url!r}: zk:// needs host:port (zk://127.0.0.1:2181/walkit)"
        )
    hosts = [_zk_host(url, h) for h in hosts_text.split(",")]
    root = "/" + root
    if not slash or root == "/":
        raise ConfigurationError(
            f"bad metadata URL {url!r}: zk:// needs a root path (zk://{hosts_text}/walkit)"
        )
    try:
        check_path(root)
    except InvalidArgumentError as exc:
        raise ConfigurationError(f"bad metadata URL {url!r}: root {root!r}: {exc}") from None
    return ",".join(hosts), root


def _zk_host(url: str, text: str) -> str:
    if text.startswith("["):  # [v6]:port
        host, close, rest = text[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise ConfigurationError(f"bad metadata URL {url!r}: bad IPv6 host in {text!r}")
        port_text, shown = rest[1:], f"[{host}]"
        has_port = bool(rest)
    else:
        host, colon, port_text = text.partition(":")
        shown, has_port = host, bool(colon)
    if not host:
        raise ConfigurationError(f"bad metadata URL {url!r}: missing host in {text!r}")
    if not has_port:
        return f"{shown}:2181"
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigurationError(f"bad metadata URL {url!r}: bad port in {text!r}")
    return f"{shown}:{int(port_text)}"
