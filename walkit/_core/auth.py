"""Authentication plug-ins, sans I/O: what a client sends, how a bookie checks it.

A connection is authenticated once, when it opens; requests on it are then served as its
*principal* (a string naming who the client is). Two sides:

- :class:`AuthProvider` (client): a ``method`` name and the ``credentials`` bytes the client
  sends in an AUTH request before anything else on a new connection. :class:`TokenAuth` is
  the shared-token one.
- :class:`Authenticator` (bookie): checks an AUTH request and returns the principal, or raises
  :class:`~walkit.errors.AuthenticationError`; it may also authenticate a connection as it
  opens, from its verified TLS client certificate (:class:`TlsAuthenticator`).
  :class:`TokenAuthenticator` checks shared tokens.

Nothing here reads files or sockets: the bookie reads its token file and passes the text to
:func:`parse_token_file`.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Final, Protocol, final

import attrs

from walkit.errors import AuthenticationError, ConfigurationError

__all__ = [
    "AUTHORIZE_OPS",
    "AUTH_MODES",
    "AuthProvider",
    "Authenticator",
    "Authorization",
    "TlsAuthenticator",
    "TokenAuth",
    "TokenAuthenticator",
    "parse_token_file",
]

#: The bookie's ``--auth`` choices.
AUTH_MODES: Final = ("none", "token", "tls")
#: Longest method name and credentials a client may send.
MAX_METHOD_SIZE: Final = 64
MAX_CREDENTIALS_SIZE: Final = 4096
TOKEN_METHOD: Final = "token"


class AuthProvider(Protocol):
    """Client side: the credentials sent on each new connection to a bookie."""

    @property
    def method(self) -> str:
        """The authentication method (the bookie's plug-in must speak it), e.g. ``"token"``."""
        ...

    def credentials(self) -> bytes:
        """The bytes to send (at most 4096)."""
        ...


def _check_token(_inst: object, _attr: object, value: str) -> None:
    if not isinstance(value, str) or not value or not value.isprintable() or value != value.strip():
        raise ConfigurationError(
            "an auth token must be a non-empty string of printable characters without "
            "surrounding spaces"
        )
    if len(value.encode("utf-8")) > MAX_CREDENTIALS_SIZE:
        raise ConfigurationError(f"an auth token must be at most {MAX_CREDENTIALS_SIZE} bytes")


@final
@attrs.frozen
class TokenAuth:
    """A shared token, checked by bookies started with ``--auth token --auth-token-file``.

    ``walkit.Client.connect(url, auth=walkit.TokenAuth(token="..."))``. The token is not shown
    in the repr. Without TLS it crosses the network in clear text: use both.
    """

    token: str = attrs.field(validator=_check_token, repr=False)

    @property
    def method(self) -> str:
        return TOKEN_METHOD

    def credentials(self) -> bytes:
        return self.token.encode("utf-8")


class Authenticator(Protocol):
    """Bookie side: who a connection's client is."""

    def on_connect(self, tls_principal: str | None) -> str | None:
        """The principal of a connection as it opens (``tls_principal``: the subject of its
        verified TLS client certificate), or None if it must send an AUTH request first."""
        ...

    def authenticate(self, method: str, credentials: bytes, tls_principal: str | None) -> str:
        """The principal these credentials prove; AuthenticationError if they prove none."""
        ...


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


@final
class TokenAuthenticator:
    """Shared tokens, each with the principal it stands for.

    Every stored token is compared (in constant time, as SHA-256 digests so lengths do not
    show) with what the client sent, so the time taken does not tell which one, or how much
    of one, matched.
    """

    __slots__ = ("_tokens",)

    def __init__(self, tokens: dict[str, str]) -> None:
        """``tokens``: token -> principal."""
        if not tokens:
            raise ConfigurationError("token authentication needs at least one token")
        self._tokens = [(_digest(t.encode("utf-8")), p) for t, p in tokens.items()]

    def on_connect(self, tls_principal: str | None) -> str | None:
        return None

    def authenticate(self, method: str, credentials: bytes, tls_principal: str | None) -> str:
        if method != TOKEN_METHOD:
            raise AuthenticationError(
                f"this bookie authenticates with a token, not {method!r} "
                "(walkit.TokenAuth(token=...))"
            )
        sent = _digest(credentials)
        found: str | None = None
        for digest, principal in self._tokens:
            if hmac.compare_digest(digest, sent) and found is None:
                found = principal
        if found is None:
            raise AuthenticationError("the bookie does not know this token")
        return found


@final
class TlsAuthenticator:
    """The subject of the client's verified TLS certificate is its principal (the bookie
    must require client certificates: ``--tls-client-auth require``)."""

    __slots__ = ()

    def on_connect(self, tls_principal: str | None) -> str | None:
        return tls_principal

    def authenticate(self, method: str, credentials: bytes, tls_principal: str | None) -> str:
        if tls_principal is None:
            raise AuthenticationError(
                "this bookie authenticates clients by their TLS certificate, and this "
                "connection has none"
            )
        return tls_principal


def parse_token_file(text: str, source: str = "the token file") -> dict[str, str]:
    """Parse a token file: one ``PRINCIPAL:TOKEN`` per line; blank lines and lines starting
    with ``#`` are skipped. Returns token -> principal; ConfigurationError (naming the line)
    for a malformed line, an empty principal or token, or a token given twice."""
    tokens: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        principal, sep, token = line.partition(":")
        principal, token = principal.strip(), token.strip()
        where = f"{source}, line {number}"
        if not sep or not principal or not token:
            raise ConfigurationError(f"{where}: expected PRINCIPAL:TOKEN")
        if not principal.isprintable() or not token.isprintable():
            raise ConfigurationError(f"{where}: unprintable characters")
        if len(token.encode("utf-8")) > MAX_CREDENTIALS_SIZE:
            raise ConfigurationError(f"{where}: token longer than {MAX_CREDENTIALS_SIZE} bytes")
        if token in tokens:
            raise ConfigurationError(f"{where}: this token is already given")
        tokens[token] = principal
    if not tokens:
        raise ConfigurationError(f"{source} has no PRINCIPAL:TOKEN line")
    return tokens


#: The operations ``--authorize`` restricts: adds (and explicit LACs), fencing (recovery reads
#: and fencing LAC reads, and recovery adds), reads (entries and LACs), admin POSTs.
AUTHORIZE_OPS: Final = ("add", "fence", "read", "admin")


@final
class Authorization:
    """Which principals may do each operation; an operation without a rule is allowed to
    every authenticated principal. ``allows`` is one dict and one set lookup."""

    __slots__ = ("rules",)

    def __init__(self, rules: dict[str, frozenset[str]]) -> None:
        for op in rules:
            if op not in AUTHORIZE_OPS:
                raise ConfigurationError(
                    f"cannot authorize {op!r}: the operations are {', '.join(AUTHORIZE_OPS)}"
                )
        self.rules = rules

    @classmethod
    def parse(cls, specs: list[str] | tuple[str, ...]) -> Authorization:
        """Rules from ``OP=PRINCIPAL[,PRINCIPAL...]`` strings; one OP given twice adds up.
        A value containing ``=`` is one principal (a certificate subject such as
        ``CN=orders,O=example`` has commas of its own): give each in its own spec."""
        rules: dict[str, set[str]] = {}
        for spec in specs:
            op, sep, value = spec.partition("=")
            op, value = op.strip(), value.strip()
            if not sep or not op or not value:
                raise ConfigurationError(
                    f"--authorize {spec!r}: expected OP=PRINCIPAL[,PRINCIPAL...] with OP one "
                    f"of {', '.join(AUTHORIZE_OPS)}"
                )
            principals = [value] if "=" in value else [p.strip() for p in value.split(",")]
            if not all(principals):
                raise ConfigurationError(f"--authorize {spec!r}: an empty principal")
            rules.setdefault(op, set()).update(principals)
        return cls({op: frozenset(names) for op, names in rules.items()})

    def allows(self, op: str, principal: str | None) -> bool:
        allowed = self.rules.get(op)
        return allowed is None or principal in allowed

    def describe(self) -> str:
        return "; ".join(f"{op}={','.join(sorted(p))}" for op, p in sorted(self.rules.items()))
