"""A client connection's authentication, on a bookie with authentication on (docs/security.md).

As the connection opens, the authenticator may accept it at once (by the subject of its
verified TLS client certificate). Otherwise its first request must be AUTH: the credentials
are checked and answered OK with the principal they prove, or AUTH_REQUIRED, which closes the
connection; any other first request is refused the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from walkit._core.wire import AuthRequest, AuthResponse, ErrorResponse, StatusCode, encode_frame
from walkit.errors import AuthenticationError
from walkit.shared import get_logger

if TYPE_CHECKING:
    from walkit._core.auth import Authenticator
    from walkit._core.wire import Message
    from walkit_bookie.server._badinput import BadInputLog
    from walkit_bookie.server._stats import BookieStats

#: The connection's events keep the connection module's logger name, which operators filter on.
log = get_logger("walkit_bookie.server._connection")

__all__ = ["authenticate", "on_connect"]


class Unauthenticated(Protocol):
    """The connection being authenticated (a :class:`~._connection.Connection`)."""

    peer: str
    principal: str | None
    authenticated: bool

    def send(self, frame: bytes) -> None: ...


def on_connect(
    authenticator: Authenticator | None, stats: BookieStats, tls_principal: str | None
) -> tuple[str | None, bool]:
    """The principal of a connection as it opens, and whether its requests are served before
    an AUTH request (always, with authentication off)."""
    if authenticator is None:
        return tls_principal, True
    principal = authenticator.on_connect(tls_principal)
    if principal is None:
        return tls_principal, False
    stats.auth_ok += 1
    return principal, True


def authenticate(
    conn: Unauthenticated,
    authenticator: Authenticator,
    stats: BookieStats,
    bad_input: BadInputLog,
    message: Message,
) -> bool:
    """The first request of a connection not authenticated yet: an AUTH request, checked, or
    anything else, refused. False: refused and answered AUTH_REQUIRED (close the connection)."""
    rid = message.request_id
    if isinstance(message, AuthRequest):
        try:
            principal = authenticator.authenticate(
                message.method, message.credentials, conn.principal
            )
        except AuthenticationError as exc:
            stats.auth_refused += 1
            bad_input.report(
                "auth_refused", peer=conn.peer, method=message.method[:64], error=str(exc)
            )
            conn.send(encode_frame(AuthResponse(rid, StatusCode.AUTH_REQUIRED, str(exc))))
            return False
        conn.principal = principal
        conn.authenticated = True
        stats.auth_ok += 1
        log.debug("client_authenticated", peer=conn.peer, principal=principal)
        conn.send(encode_frame(AuthResponse(rid, StatusCode.OK, principal)))
        return True
    stats.auth_refused += 1
    bad_input.report(
        "auth_required", peer=conn.peer, request=type(message).__name__, request_id=rid
    )
    why = (
        "this bookie requires authentication: connect with "
        "walkit.Client.connect(url, auth=...) (see docs/security.md)"
    )
    conn.send(encode_frame(ErrorResponse(rid, StatusCode.AUTH_REQUIRED, why)))
    return False
