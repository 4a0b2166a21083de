"""TLS between clients and bookies: :class:`TLSConfig` and :class:`TlsNetwork`.

:class:`TlsNetwork` wraps another :class:`~walkit.net.Network` (TCP, or a simulated one): the
client side does the handshake inside ``connect`` (so the connect timeout covers it), the
server side does it before the bookie sees the connection. Failures become
:class:`~walkit.errors.TLSError` with a hint at the likely cause:

- a TLS client reaching a plain bookie gets the bookie's plain answer where a TLS record was
  expected ("wrong version number"), or a closed connection;
- a plain client reaching a TLS bookie gets, in plain walkit framing, an error frame with
  status ``TLS_REQUIRED`` (the bookie looks at the first byte: every TLS connection starts
  with a handshake record, 0x16), which the client turns into a ``TLSError``.

The verified client certificate's subject is the connection's *principal*
(:func:`principal_of`).
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, Literal, final, get_args

import anyio
import anyio.abc
import attrs
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSAttribute, TLSStream

from walkit._core.types import BookieId
from walkit._core.wire import ErrorResponse, StatusCode, encode_frame
from walkit._logging import get_logger
from walkit.errors import ConfigurationError, TLSError
from walkit.net._network import ClientStream, Network, StreamHandler

log = get_logger(__name__)

__all__ = [
    "ClientAuth",
    "TLSConfig",
    "TlsNetwork",
    "peer_name",
    "principal_of",
    "tls_failure",
]

ClientAuth = Literal["none", "optional", "require"]
CLIENT_AUTH_MODES: Final = get_args(ClientAuth)
_VERIFY: Final = {
    "none": ssl.CERT_NONE,
    "optional": ssl.CERT_OPTIONAL,
    "require": ssl.CERT_REQUIRED,
}
#: The first byte of every TLS connection: a handshake record.
_TLS_HANDSHAKE_RECORD: Final = 0x16
#: Longest a bookie waits for a new connection's first bytes and TLS handshake.
HANDSHAKE_TIMEOUT: Final = 10.0


def _path(value: str | os.PathLike[str] | None) -> str | None:
    return None if value is None else os.fspath(value)


@final
@attrs.frozen
class TLSConfig:
    """Certificates for TLS between clients and bookies (PEM files).

    - ``cert`` / ``key``: this side's certificate chain and private key. A bookie needs them; a
      client gives them to authenticate to bookies that ask (``--tls-client-auth``).
    - ``ca``: the CA bundle that signs the other side's certificates. A client without one
      trusts the system's CAs; a bookie needs one to check client certificates.
    - ``check_hostname``: the client checks that the bookie's certificate names the host it
      dialed (the host of its ``BookieId``, often an IP address).

    Used as ``walkit.Client.connect(url, tls=walkit.TLSConfig(cert=..., key=..., ca=...))``.
    Files are read when a connection context is built, so a wrong path fails at connect time
    with a :class:`~walkit.errors.ConfigurationError`.
    """

    cert: str | None = attrs.field(default=None, converter=_path)
    key: str | None = attrs.field(default=None, converter=_path)
    ca: str | None = attrs.field(default=None, converter=_path)
    check_hostname: bool = True

    def __attrs_post_init__(self) -> None:
        if (self.cert is None) != (self.key is None):
            raise ConfigurationError("TLS: give both cert and key, or neither")

    def client_context(self) -> ssl.SSLContext:
        """The context a client connects with (verifies the bookie against ``ca``)."""
        context = _context(ssl.Purpose.SERVER_AUTH, self.ca)
        context.check_hostname = self.check_hostname
        self._load_chain(context)
        return context

    def server_context(self, client_auth: ClientAuth = "none") -> ssl.SSLContext:
        """The context a bookie serves with; ``client_auth`` says whether it asks clients for
        a certificate (checked against ``ca``) and whether one is required."""
        if client_auth not in _VERIFY:
            raise ConfigurationError(
                f"TLS client auth must be one of {', '.join(CLIENT_AUTH_MODES)}, "
                f"not {client_auth!r}"
            )
        if self.cert is None:
            raise ConfigurationError("TLS: a bookie needs a certificate and its key")
        if client_auth != "none" and self.ca is None:
            raise ConfigurationError(
                f"TLS client auth {client_auth!r} needs a CA to check client certificates"
            )
        context = _context(ssl.Purpose.CLIENT_AUTH, self.ca)
        context.verify_mode = _VERIFY[client_auth]
        self._load_chain(context)
        return context

    def _load_chain(self, context: ssl.SSLContext) -> None:
        if self.cert is None or self.key is None:
            return
        try:
            context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(
                f"TLS: cannot load certificate {self.cert!r} with key {self.key!r}: {exc}"
            ) from None


def _context(purpose: ssl.Purpose, ca: str | None) -> ssl.SSLContext:
    try:
        context = ssl.create_default_context(purpose, cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(f"TLS: cannot load CA file {ca!r}: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _reason(exc: BaseException) -> str:
    """The ssl error under a stream's wrapping (AnyIO's), else the exception."""
    cause = exc.__cause__ if isinstance(exc.__cause__, ssl.SSLError) else exc
    if isinstance(cause, ssl.SSLError) and cause.reason:
        return f"{cause.reason} ({cause.strerror or cause})"
    return str(cause) or type(cause).__name__


def _hint(reason: str, handshaken: bool) -> str:
    text = reason.upper()
    if "EOF" in text and handshaken:
        # TLS 1.3: the client's side of the handshake ends before the bookie has checked the
        # client's certificate; a refusal then shows as the connection closing.
        return (
            "; the bookie closed the connection after the handshake: it requires a client "
            "certificate (TLSConfig cert and key) signed by a CA it trusts (its --tls-ca)"
        )
    if "WRONG_VERSION_NUMBER" in text or "RECORD_LAYER_FAILURE" in text or "EOF" in text:
        return "; is the bookie serving TLS (walkit-bookie --tls-cert ...)?"
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return "; the bookie's certificate is not signed by TLSConfig.ca, or names another host"
    if "CERTIFICATE_REQUIRED" in text or "HANDSHAKE_FAILURE" in text:
        return "; the bookie requires a client certificate (TLSConfig.cert and key)"
    if "UNKNOWN_CA" in text or "BAD_CERTIFICATE" in text:
        return "; the bookie does not trust this client's certificate (its --tls-ca)"
    return ""


def tls_failure(bookie: BookieId, exc: BaseException, *, handshaken: bool) -> TLSError | None:
    """A TLSError when ``exc`` (a broken stream) came from TLS, else None. ``handshaken``:
    whether the client had finished its side of the handshake."""
    if isinstance(exc, ssl.SSLError) or isinstance(exc.__cause__, ssl.SSLError):
        reason = _reason(exc)
        return TLSError(f"TLS with bookie {bookie} failed: {reason}{_hint(reason, handshaken)}")
    return None


def principal_of(stream: anyio.abc.ByteStream) -> str | None:
    """The subject of the verified client certificate of a TLS stream, as an RFC 4514-like
    string (``"CN=client-1,O=walkit"``), or None (no TLS, or no certificate)."""
    if not isinstance(stream, TLSStream):
        return None
    try:
        cert = stream.extra(TLSAttribute.peer_certificate, None)
    except (ValueError, anyio.BrokenResourceError, anyio.ClosedResourceError):
        return None
    if not cert:
        return None
    subject: Iterable[Iterable[tuple[str, str]]] = cert.get("subject", ())  # type: ignore[assignment]
    parts = [f"{_SHORT.get(k, k)}={v}" for rdn in reversed(tuple(subject)) for k, v in rdn]
    return ",".join(parts) or None


_SHORT: Final = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "domainComponent": "DC",
}


@final
class _Prepended(anyio.abc.ByteStream):
    """A stream whose first bytes were already read: gives them back first."""

    def __init__(self, stream: anyio.abc.ByteStream, head: bytes) -> None:
        self.transport_stream = stream
        self._head = head

    @property
    def extra_attributes(self) -> Mapping[Any, Callable[[], Any]]:
        return self.transport_stream.extra_attributes

    async def send(self, item: bytes) -> None:
        await self.transport_stream.send(item)

    async def send_eof(self) -> None:
        await self.transport_stream.send_eof()

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if self._head:
            head = self._head
            if max_bytes < len(head):
                self._head = head[max_bytes:]
                return head[:max_bytes]
            self._head = b""
            return head
        return await self.transport_stream.receive(max_bytes)

    async def aclose(self) -> None:
        await self.transport_stream.aclose()


@final
class TlsNetwork:
    """A :class:`~walkit.net.Network` whose connections are TLS over ``inner``'s.

    ``client_context`` for ``connect`` (a client), ``server_context`` for ``serve`` (a
    bookie); build them with :class:`TLSConfig`.
    """

    def __init__(
        self,
        inner: Network,
        *,
        client_context: ssl.SSLContext | None = None,
        server_context: ssl.SSLContext | None = None,
        handshake_timeout: float = HANDSHAKE_TIMEOUT,
    ) -> None:
        self.inner = inner
        self.client_context = client_context
        self.server_context = server_context
        self.handshake_timeout = handshake_timeout

    async def connect(self, address: BookieId) -> ClientStream:
        if self.client_context is None:
            raise ConfigurationError("this TlsNetwork has no client context")
        raw = await self.inner.connect(address)
        try:
            return await TLSStream.wrap(
                raw,
                hostname=address.host,
                ssl_context=self.client_context,
                # A bookie that closes without close_notify has said all it had to say.
                standard_compatible=False,
            )
        except (anyio.BrokenResourceError, anyio.EndOfStream, ssl.SSLError, OSError) as exc:
            with anyio.CancelScope(shield=True):
                await anyio.aclose_forcefully(raw)
            error = tls_failure(address, exc, handshaken=False)
            if error is None:  # the bookie closed the connection during the handshake
                error = TLSError(
                    f"TLS with bookie {address} failed: the connection closed during the "
                    f"handshake ({_reason(exc)}); is the bookie serving TLS, and does it "
                    "accept this client's certificate?"
                )
            raise error from None
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.aclose_forcefully(raw)
            raise

    async def serve(
        self,
        host: str,
        port: int,
        handler: StreamHandler,
        *,
        task_status: anyio.abc.TaskStatus[BookieId] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        if self.server_context is None:
            raise ConfigurationError("this TlsNetwork has no server context")
        context = self.server_context

        async def handle(raw: anyio.abc.ByteStream) -> None:
            try:
                stream = await self._accept(raw, context)
            except Exception:  # one bad connection must not stop the server
                log.exception("tls_accept_failed", peer=peer_name(raw))
                stream = None
            if stream is None:
                await anyio.aclose_forcefully(raw)
                return
            await handler(stream)

        await self.inner.serve(host, port, handle, task_status=task_status)

    async def _accept(
        self, raw: anyio.abc.ByteStream, context: ssl.SSLContext
    ) -> anyio.abc.ByteStream | None:
        """The TLS stream of a new connection, or None (refused; the reason is logged)."""
        peer = peer_name(raw)
        with anyio.move_on_after(self.handshake_timeout) as scope:
            try:
                try:
                    head = await raw.receive(4096)
                except anyio.EndOfStream:
                    return None
                if head[0] != _TLS_HANDSHAKE_RECORD:
                    log.warning("plain_client_refused", peer=peer)
                    message = "this bookie serves TLS only: connect with walkit.TLSConfig"
                    frame = encode_frame(ErrorResponse(0, StatusCode.TLS_REQUIRED, message))
                    await raw.send(frame)
                    await _close_gently(raw)
                    return None
                stream = await TLSStream.wrap(
                    _Prepended(raw, bytes(head)),
                    server_side=True,
                    ssl_context=context,
                    # A client that closes without close_notify has said all it had to say.
                    standard_compatible=False,
                )
            except (*_BROKEN, ssl.SSLError) as exc:
                log.warning("tls_handshake_failed", peer=peer, error=_reason(exc))
                # With TLS 1.3 the client may already be sending requests: a close with
                # them unread would reset the connection, and the client would see a reset
                # instead of the end of a TLS session that it can explain.
                await _close_gently(raw)
                return None
            return stream
        if scope.cancelled_caught:
            log.warning("tls_handshake_timeout", peer=peer, timeout=self.handshake_timeout)
        return None


_BROKEN: Final = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


async def _close_gently(raw: anyio.abc.ByteStream) -> None:
    """Half-close and read what the peer still sends (up to a second), so that the final close
    does not reset the connection and drop what was sent last."""
    try:
        await raw.send_eof()
        with anyio.move_on_after(1.0):
            while await raw.receive(65536):
                pass
    except (*_BROKEN, NotImplementedError):
        pass


def peer_name(stream: anyio.abc.ByteStream) -> str:
    """host:port of the other end of ``stream`` (or of the socket under it)."""
    try:
        address = stream.extra(SocketAttribute.remote_address, None)
    except OSError:
        return "?"
    if address is None:
        return type(stream).__name__
    if isinstance(address, tuple):
        return f"{address[0]}:{address[1]}"
    return str(address)
