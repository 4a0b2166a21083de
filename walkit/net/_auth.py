"""Client authentication on each new connection: :class:`AuthNetwork`.

It wraps another :class:`~walkit.net.Network` (TCP, or TLS over it): ``connect`` opens the
stream, sends an AUTH request with the :class:`~walkit._core.auth.AuthProvider`'s credentials
and waits for the answer before handing the stream on, so the connect timeout covers it and
nothing else is sent on a connection the bookie has not accepted. A refusal becomes an
:class:`~walkit.errors.AuthenticationError`.
"""

from __future__ import annotations

from typing import Final, final

import anyio
import anyio.abc
from anyio.streams.tls import TLSStream

from walkit._core.auth import MAX_CREDENTIALS_SIZE, MAX_METHOD_SIZE, AuthProvider, TokenAuth
from walkit._core.types import BookieId
from walkit._core.wire import (
    AuthRequest,
    AuthResponse,
    ErrorResponse,
    StatusCode,
    decode_message,
    encode_frame,
    frame_length,
)
from walkit._logging import get_logger
from walkit._private_file import read_private_text
from walkit.errors import (
    AuthenticationError,
    BookieUnavailableError,
    ConfigurationError,
    RemoteProtocolError,
    TLSError,
    WalkitError,
)
from walkit.net._network import STREAM_ERRORS, ClientStream, Network, StreamHandler
from walkit.net._tls import tls_failure

log = get_logger(__name__)

__all__ = ["AuthNetwork", "check_provider", "read_token_file"]

#: Largest answer to an AUTH request we take.
_MAX_ANSWER: Final = 64 * 1024
_AUTH_REQUEST_ID: Final = 0


def check_provider(auth: object) -> AuthProvider:
    """``auth`` as an AuthProvider, or InvalidArgument/ConfigurationError saying why not."""
    method = getattr(auth, "method", None)
    credentials = getattr(auth, "credentials", None)
    if not isinstance(method, str) or not callable(credentials):
        raise ConfigurationError(
            f"auth must be an AuthProvider such as walkit.TokenAuth(token=...), "
            f"not {type(auth).__name__}"
        )
    if not method or len(method.encode("utf-8")) > MAX_METHOD_SIZE:
        raise ConfigurationError(f"auth method {method!r} must be 1 to {MAX_METHOD_SIZE} bytes")
    return auth  # type: ignore[return-value]


@final
class AuthNetwork:
    """A Network whose client connections authenticate first (see the module docstring)."""

    def __init__(self, inner: Network, provider: AuthProvider) -> None:
        self._inner = inner
        self._provider = check_provider(provider)

    async def connect(self, address: BookieId) -> ClientStream:
        stream = await self._inner.connect(address)
        try:
            principal = await self._handshake(address, stream)
        except BaseException:
            with anyio.CancelScope(shield=True):
                await anyio.aclose_forcefully(stream)
            raise
        log.debug("bookie_authenticated", bookie=str(address), principal=principal)
        return stream

    async def serve(
        self,
        host: str,
        port: int,
        handler: StreamHandler,
        *,
        task_status: anyio.abc.TaskStatus[BookieId] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        await self._inner.serve(host, port, handler, task_status=task_status)

    async def _handshake(self, address: BookieId, stream: ClientStream) -> str:
        provider = self._provider
        credentials = bytes(provider.credentials())
        if len(credentials) > MAX_CREDENTIALS_SIZE:
            raise ConfigurationError(
                f"auth credentials of {len(credentials)} bytes (at most {MAX_CREDENTIALS_SIZE})"
            )
        request = AuthRequest(_AUTH_REQUEST_ID, provider.method, credentials)
        try:
            await stream.send(encode_frame(request))
            answer = await _receive_frame(stream)
        except STREAM_ERRORS as exc:
            failure = tls_failure(address, exc, handshaken=True)
            if failure is None and isinstance(stream, TLSStream):
                failure = TLSError(
                    f"bookie {address} closed the TLS connection before answering ({exc!r}): "
                    "it may require a client certificate (TLSConfig.cert and key) or not "
                    "trust this one (its --tls-ca)"
                )
            raise failure or BookieUnavailableError(
                f"lost connection to bookie {address} while authenticating: {exc!r}"
            ) from exc
        except WalkitError as exc:
            raise BookieUnavailableError(
                f"bookie {address} broke the protocol while authenticating: {exc}"
            ) from exc
        if answer is None:
            if isinstance(stream, TLSStream):  # (TLS 1.3: a refused certificate shows so)
                raise TLSError(
                    f"bookie {address} closed the TLS connection before answering: it may "
                    "require a client certificate (TLSConfig.cert and key) or not trust this "
                    "one (its --tls-ca)"
                )
            raise BookieUnavailableError(
                f"bookie {address} closed the connection while authenticating"
            )
        message = decode_message(answer)
        if isinstance(message, AuthResponse):
            if message.status == StatusCode.OK:
                return message.text
            raise AuthenticationError(
                f"bookie {address} refused the {provider.method!r} credentials: {message.text}"
            )
        if isinstance(message, ErrorResponse):
            if message.status == StatusCode.TLS_REQUIRED:
                raise TLSError(
                    f"bookie {address} serves TLS only ({message.message}); connect with "
                    "walkit.Client.connect(url, tls=walkit.TLSConfig(...))"
                )
            if message.status == StatusCode.BAD_REQUEST:
                raise AuthenticationError(
                    f"bookie {address} does not know authentication ({message.message}); "
                    "it predates it"
                )
            raise BookieUnavailableError(
                f"bookie {address} answered the authentication with "
                f"{message.status.name}: {message.message}"
            )
        raise RemoteProtocolError(
            f"bookie {address} answered the authentication with a {type(message).__name__}"
        )


async def _receive_frame(stream: ClientStream) -> bytes | None:
    """One frame's body (None at EOF before it is whole). The bookie sends nothing else
    before the answer, and the client nothing before it has it: no bytes of a later frame
    can arrive here."""
    buffer = bytearray()
    while True:
        length = frame_length(buffer, 0, _MAX_ANSWER)
        if length is not None and len(buffer) >= 4 + length:
            if len(buffer) > 4 + length:
                raise RemoteProtocolError("the bookie sent more than the authentication answer")
            return bytes(buffer[4:])
        try:
            buffer += await stream.receive(_MAX_ANSWER)
        except anyio.EndOfStream:
            return None


def read_token_file(path: str) -> TokenAuth:
    """The token in ``path``: its first line that is not blank or a ``#`` comment. The file
    must not be readable by group or others. ConfigurationError says what is wrong."""
    text = read_private_text(path, "auth token file", limit=64 * 1024)
    for line in text.splitlines():
        token = line.strip()
        if token and not token.startswith("#"):
            return TokenAuth(token=token)
    raise ConfigurationError(f"the auth token file {path} holds no token")
