"""ZooKeeper session security: digest credentials from a file, the ACL walkit's nodes get, and
TLS to ZooKeeper's secure client port.

A credentials file holds one ``user:password`` line (blank lines and ``#`` comments are
skipped); like the token files, it must not be readable by group or others. With it, the
session authenticates with ZooKeeper's ``digest`` scheme and every node the store creates gets
one ACL entry: that identity may do everything, nobody else anything (ZooKeeper's
``CREATOR_ALL_ACL``; ledger metadata holds password hashes, so others do not even read).
"""

from __future__ import annotations

import ssl
from typing import Any, final

import attrs
from kazoo.security import ACL, make_digest_acl

from walkit._private_file import read_private_text
from walkit.errors import ConfigurationError

__all__ = ["DigestCredentials", "ZkTls", "read_credentials_file", "zk_tls"]


@final
@attrs.frozen
class DigestCredentials:
    """A ZooKeeper digest identity (the password never shows in a repr)."""

    user: str
    password: str = attrs.field(repr=False)
    source: str = ""

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """kazoo's ``auth_data``: sent again on every (re)connection."""
        return [("digest", f"{self.user}:{self.password}")]

    @property
    def acl(self) -> list[ACL]:
        """The ACL of every node this identity creates: all rights to it, none to others."""
        return [make_digest_acl(self.user, self.password, all=True)]


def read_credentials_file(path: str) -> DigestCredentials:
    """The ``user:password`` in ``path``. ConfigurationError says what is wrong (never the
    password)."""
    text = read_private_text(path, "ZooKeeper credentials file", limit=64 * 1024)
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    if not lines:
        raise ConfigurationError(f"the ZooKeeper credentials file {path} holds no user:password")
    user, colon, password = lines[0].partition(":")
    if not colon or not user or not password:
        raise ConfigurationError(
            f"the ZooKeeper credentials file {path} must hold one user:password line "
            "(a non-empty user and password)"
        )
    if len(lines) > 1:
        raise ConfigurationError(
            f"the ZooKeeper credentials file {path} holds more than one line; "
            "it must hold one user:password"
        )
    return DigestCredentials(user=user, password=password, source=path)


@final
@attrs.frozen
class ZkTls:
    """TLS to ZooKeeper's ``secureClientPort``: the CA that signs the servers' certificates,
    and a client certificate and key for servers started with ``ssl.clientAuth=need``. The
    server's certificate must name the host of the URL (checked like HTTPS does)."""

    ca: str
    cert: str | None = None
    key: str | None = None

    @property
    def kazoo_options(self) -> dict[str, Any]:
        return {
            "use_ssl": True,
            "ca": self.ca,
            "certfile": self.cert,
            "keyfile": self.key,
            "verify_certs": True,
            "check_hostname": True,
        }


def zk_tls(ca: str | None, cert: str | None, key: str | None) -> ZkTls | None:
    """The TLS settings of the URL options (None: plain TCP); files are checked now, so a
    missing or broken one is a ConfigurationError at open, not endless reconnecting."""
    if ca is None:
        if cert is not None or key is not None:
            raise ConfigurationError(
                "ZooKeeper TLS needs tls_ca (the CA that signs the servers' certificates); "
                "tls_cert and tls_key alone do not turn TLS on"
            )
        return None
    if (cert is None) != (key is None):
        raise ConfigurationError("ZooKeeper TLS: give both tls_cert and tls_key, or neither")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(f"cannot load the ZooKeeper TLS CA {ca}: {exc}") from exc
    if cert is not None and key is not None:
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(
                f"cannot load the ZooKeeper TLS certificate {cert} and key {key}: {exc}"
            ) from exc
    return ZkTls(ca=ca, cert=cert, key=key)
