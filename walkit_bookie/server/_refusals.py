"""Refusing a client connection's bad input: what is reported, what is answered, how it ends.

Bad input is reported to the bookie's :class:`~._badinput.BadInputLog` (counted, logged at a
bounded rate) and, when its request id can be read, answered with an error the client raises.
A connection closed for it lingers first (:func:`._linger.linger`): closing with unread input
would reset it, and the reset can destroy the answer that says why before the peer reads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from walkit._core.wire import ErrorResponse, StatusCode, encode_frame, peek_request_id
from walkit.errors import RemoteProtocolError, UnsupportedVersionError

if TYPE_CHECKING:
    from walkit_bookie.server._badinput import BadInputLog

__all__ = ["HEADER_END", "REFUSE_DRAIN", "refuse_frame", "refuse_message"]

#: Most bytes drained from a peer after refusing its input, before closing (``._linger``).
REFUSE_DRAIN = 256 * 1024
HEADER_END = 4 + 10  # length prefix + version, type, request id


class Answered(Protocol):
    """The connection whose input is refused (a :class:`~._connection.Connection`)."""

    peer: str

    def send(self, frame: bytes) -> None: ...


def refuse_frame(
    conn: Answered,
    bad_input: BadInputLog,
    data: bytes | bytearray | memoryview,
    fed: int,
    consumed: int,
    reason: str,
    status: StatusCode = StatusCode.BAD_REQUEST,
    kind: str = "frame_too_large",
) -> None:
    """Report and answer a frame refused whole (``data``: the chunk at hand, ending at stream
    offset ``fed``; the frame starts at offset ``consumed``)."""
    # Answer with the frame's request id if its header is in the chunk at hand.
    chunk_start = fed - len(data)
    request_id = 0
    if consumed >= chunk_start and consumed + HEADER_END <= fed:
        at = consumed - chunk_start + 4
        request_id = peek_request_id(bytes(data[at : at + 10])) or 0
    bad_input.report(kind, peer=conn.peer, request_id=request_id, error=reason)
    conn.send(encode_frame(ErrorResponse(request_id, status, reason)))


def refuse_message(
    conn: Answered, bad_input: BadInputLog, body: bytes, exc: RemoteProtocolError
) -> bool:
    """Report and answer a whole frame that is no valid message. False: not even its request
    id can be read, so nothing can be answered (close the connection)."""
    request_id = peek_request_id(body)
    if request_id is None:
        bad_input.report("bad_message_closing", peer=conn.peer, error=str(exc))
        return False
    status = (
        StatusCode.BAD_VERSION
        if isinstance(exc, UnsupportedVersionError)
        else StatusCode.BAD_REQUEST
    )
    bad_input.report("bad_message", peer=conn.peer, request_id=request_id, error=str(exc))
    conn.send(encode_frame(ErrorResponse(request_id, status, str(exc))))
    return True
