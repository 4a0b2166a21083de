"""The bookie wire protocol: length-prefixed binary frames, sans I/O.

Every frame is ``u32 length | body``; every body starts with ``u8 version | u8 type | u64
request_id``. The request id lets one connection carry many requests in flight, answered in any
order. Responses carry a ``status`` (:class:`StatusCode`, the same numbers as
``walkit.errors``' codes).

Decoding is total: :func:`decode_message` turns any byte string into a message or raises
:class:`~walkit.errors.RemoteProtocolError`; :class:`FrameDecoder` refuses a length above its
maximum *before* buffering it, so a hostile length cannot make us allocate.

This module owns every byte layout of a frame, the hot paths' included: the adds the client
sends (:func:`encode_adds_into`, parts for one scatter-gather send), the reads it sends
(:func:`encode_read_request`, :func:`encode_batch_read_request`), the answers to reads the
bookie sends in parts (:func:`encode_read_response_parts`,
:func:`encode_batch_read_response_parts`), the OK answers the bookie sends (:func:`encode_add_response`)
and the client's decoding of them (:data:`ADD_RESPONSE_FRAME`), each equal to the slow path
(``encode_frame``/``decode_message``) on the same message; the tests check it. I/O code does not
pack frames itself.
"""

from __future__ import annotations

import enum
import functools
import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Final, Protocol, final

import attrs

from walkit.errors import (
    FrameTooLargeError,
    LocalProtocolError,
    RemoteProtocolError,
    UnsupportedVersionError,
)

PROTOCOL_VERSION: Final = 1
DEFAULT_MAX_FRAME_SIZE: Final = 5 * 1024 * 1024
MAX_KEY_SIZE: Final = 255

_LEN = struct.Struct(">I")
_HEAD = struct.Struct(">BBQ")


class StatusCode(enum.IntEnum):
    """Answer codes, named after BookKeeper's; the numbers are walkit's own (not BookKeeper's
    wire values) and match the ``code`` of the ``walkit.errors`` class each one raises."""

    OK = 0
    NO_SUCH_ENTRY = 1
    NO_SUCH_LEDGER = 2
    LEDGER_FENCED = 3
    UNAUTHORIZED_ACCESS = 4
    TOO_MANY_REQUESTS = 5
    BOOKIE_READ_ONLY = 6
    BAD_REQUEST = 7
    IO_ERROR = 8
    BAD_VERSION = 9
    #: An add that would replace a stored entry with other bytes (BookKeeper's
    #: DuplicateEntryIdException); the same bytes are an idempotent success.
    ENTRY_EXISTS = 26
    #: Sent (with request id 0) to a plain TCP client by a bookie that serves only TLS.
    TLS_REQUIRED = 30
    #: The connection is not authenticated: an AUTH request's credentials were refused, or a
    #: bookie with authentication on got another request first.
    AUTH_REQUIRED = 31


class MessageType(enum.IntEnum):
    ADD_REQUEST = 1
    ADD_RESPONSE = 2
    READ_REQUEST = 3
    READ_RESPONSE = 4
    READ_LAC_REQUEST = 5
    READ_LAC_RESPONSE = 6
    WRITE_LAC_REQUEST = 7
    WRITE_LAC_RESPONSE = 8
    ERROR_RESPONSE = 9
    AUTH_REQUEST = 10
    AUTH_RESPONSE = 11
    BATCH_READ_REQUEST = 12
    BATCH_READ_RESPONSE = 13
    COPY_FRAGMENT_REQUEST = 14
    COPY_FRAGMENT_RESPONSE = 15


class AddFlag(enum.IntFlag):
    NONE = 0
    #: A recovery add: accepted on a fenced ledger, idempotent.
    RECOVERY = 1
    #: A rereplication copy (sent with RECOVERY): the bookie may store it straight in its
    #: entry log (durable before the answer) instead of its journal, so copies are written
    #: once and do not share the foreground's journal syncs. Bookies that do not know the
    #: flag journal the add as any other.
    COPY = 2


#: The members of every combination of known add flags, by value: ``AddFlag(int)`` is a
#: Python-level enum lookup costing a few percent of a bookie's CPU per small add.
_ADD_FLAGS: dict[int, AddFlag] = {int(f): f for f in map(AddFlag, range(4))}


class ReadFlag(enum.IntFlag):
    NONE = 0
    #: A recovery read: fences the ledger (durably) before answering; needs the master key.
    FENCE = 1


class ReadLacFlag(enum.IntFlag):
    NONE = 0
    #: Fence the ledger (durably) before answering; needs the master key.
    FENCE = 1
    #: Wait up to ``timeout_ms`` for the LAC to pass ``previous_lac``.
    LONG_POLL = 2
    #: Also return entry ``previous_lac + 1`` if the answered LAC covers it.
    PIGGYBACK_ENTRY = 4


# --- messages ------------------------------------------------------------------------------


@final
@attrs.frozen
class AddRequest:
    request_id: int
    ledger_id: int
    entry_id: int
    master_key: bytes
    packet: bytes
    flags: AddFlag = AddFlag.NONE


@final
@attrs.frozen
class AddResponse:
    request_id: int
    status: StatusCode
    ledger_id: int
    entry_id: int


@final
@attrs.frozen
class ReadRequest:
    request_id: int
    ledger_id: int
    entry_id: int
    flags: ReadFlag = ReadFlag.NONE
    master_key: bytes = b""


@final
@attrs.frozen
class ReadResponse:
    request_id: int
    status: StatusCode
    ledger_id: int
    entry_id: int
    packet: bytes = b""


@final
@attrs.frozen
class ReadLacRequest:
    request_id: int
    ledger_id: int
    flags: ReadLacFlag = ReadLacFlag.NONE
    previous_lac: int = -1
    timeout_ms: int = 0
    master_key: bytes = b""


@final
@attrs.frozen
class ReadLacResponse:
    request_id: int
    status: StatusCode
    ledger_id: int
    lac: int
    #: The piggybacked entry ``previous_lac + 1`` (empty when not asked for or not there).
    packet: bytes = b""


@final
@attrs.frozen
class WriteLacRequest:
    request_id: int
    ledger_id: int
    lac: int
    master_key: bytes


@final
@attrs.frozen
class WriteLacResponse:
    request_id: int
    status: StatusCode
    ledger_id: int


@final
@attrs.frozen
class ErrorResponse:
    """An answer to a request the bookie could not decode past its header."""

    request_id: int
    status: StatusCode
    message: str = ""


@final
@attrs.frozen
class AuthRequest:
    """Credentials for an authentication method; the first request of a client configured
    with an :class:`~walkit._core.auth.AuthProvider` on each new connection."""

    request_id: int
    method: str
    credentials: bytes


@final
@attrs.frozen
class AuthResponse:
    """OK with the principal the bookie serves this connection as, or AUTH_REQUIRED with
    why the credentials were refused."""

    request_id: int
    status: StatusCode
    text: str = ""


#: Most entries one batch read may ask for.
MAX_BATCH_READ_ENTRIES: Final = 1024


@final
@attrs.frozen
class BatchReadRequest:
    """Read up to ``count`` consecutive entries from ``first_entry_id`` in one answer
    (BookKeeper's batch read, BP-62): for ledgers whose bookies hold every entry (ensemble
    size = write quorum), such as a copier reading a whole fragment. The answer stops at
    ``count``, at the first entry this bookie does not have, or before its packets pass
    ``max_bytes`` (the first entry is always in it, whatever its size)."""

    request_id: int
    ledger_id: int
    first_entry_id: int
    count: int
    max_bytes: int


@final
@attrs.frozen
class BatchReadResponse:
    """The entries ``first_entry_id``, ``first_entry_id + 1``, ... (``packets``, maybe fewer
    than asked); a status other than OK carries none (NO_SUCH_ENTRY: not even the first)."""

    request_id: int
    status: StatusCode
    ledger_id: int
    first_entry_id: int
    packets: tuple[bytes, ...] = ()


#: Most bookies a COPY_FRAGMENT request may name as not to be read from.
MAX_COPY_SKIP: Final = 32


@final
@attrs.frozen
class CopyFragmentRequest:
    """Ask the bookie to copy to itself the entries ``first_entry .. last_entry`` that
    position ``index`` of the fragment starting at ``fragment_first_entry`` stores, reading
    them from the fragment's other bookies (not from those in ``skip``) and checking their
    digests: a rereplication whose bytes go from replica to replacement, not through the one
    asking. The ledger must be closed and the bookie must not be in the fragment's ensemble;
    it reads the ledger's metadata itself. ``master_key``: the ledger's, as its adds carry."""

    request_id: int
    ledger_id: int
    fragment_first_entry: int
    index: int
    first_entry: int
    last_entry: int
    master_key: bytes
    skip: tuple[str, ...] = ()


@final
@attrs.frozen
class CopyFragmentResponse:
    """OK: ``entries`` entries of ``bytes`` bytes are durable on the bookie. Otherwise
    ``text`` says why (BAD_REQUEST: this bookie does not copy fragments, or the request does
    not match the ledger's metadata)."""

    request_id: int
    status: StatusCode
    ledger_id: int
    entries: int = 0
    bytes: int = 0
    text: str = ""


#: The requests about ledgers (AUTH is about the connection).
Request = (
    AddRequest
    | ReadRequest
    | ReadLacRequest
    | WriteLacRequest
    | BatchReadRequest
    | CopyFragmentRequest
)
Response = (
    AddResponse
    | ReadResponse
    | ReadLacResponse
    | WriteLacResponse
    | ErrorResponse
    | AuthResponse
    | BatchReadResponse
    | CopyFragmentResponse
)
Message = Request | AuthRequest | Response

_ADD_REQ = struct.Struct(">QqBB")
_ADD_RESP = struct.Struct(">hQq")
_READ_REQ = struct.Struct(">QqBB")
_READ_RESP = struct.Struct(">hQq")
_LAC_REQ = struct.Struct(">QBqIB")
_LAC_RESP = struct.Struct(">hQq")
_WLAC_REQ = struct.Struct(">QqB")
_WLAC_RESP = struct.Struct(">hQ")
_ERR_RESP = struct.Struct(">h")
_AUTH_REQ = struct.Struct(">B")
_AUTH_RESP = struct.Struct(">h")
_BREAD_REQ = struct.Struct(">QqII")
_BREAD_RESP = struct.Struct(">hQqI")
_PACKET_LEN = struct.Struct(">I")
_COPY_REQ = struct.Struct(">QqHqqBB")
_COPY_RESP = struct.Struct(">hQIQ")
_NAME_LEN = struct.Struct(">B")
#: A packet of a batch answer this big is sent as a part of its own (not copied).
_OWN_PART: Final = 16 * 1024
#: Longest text of an ErrorResponse or AuthResponse, in bytes.
_MAX_TEXT: Final = 1024

_U64_MAX = 2**64 - 1


def _check_key(key: bytes) -> None:
    if len(key) > MAX_KEY_SIZE:
        raise LocalProtocolError(f"master key of {len(key)} bytes is longer than {MAX_KEY_SIZE}")


def encode_body(msg: Message) -> bytes:
    """Encode a message's body (without the length prefix)."""
    try:
        return _encode_body(msg)
    except struct.error as exc:
        raise LocalProtocolError(f"cannot encode {type(msg).__name__}: {exc}") from exc


def _encode_body(msg: Message) -> bytes:
    if isinstance(msg, AddRequest):
        _check_key(msg.master_key)
        head = _HEAD.pack(PROTOCOL_VERSION, MessageType.ADD_REQUEST, msg.request_id)
        fixed = _ADD_REQ.pack(msg.ledger_id, msg.entry_id, msg.flags, len(msg.master_key))
        return b"".join((head, fixed, msg.master_key, msg.packet))
    if isinstance(msg, AddResponse):
        head = _HEAD.pack(PROTOCOL_VERSION, MessageType.ADD_RESPONSE, msg.request_id)
        return head + _ADD_RESP.pack(msg.status, msg.ledger_id, msg.entry_id)
    if isinstance(msg, ReadRequest):
        _check_key(msg.master_key)
        head = _HEAD.pack(PROTOCOL_VERSION, MessageType.READ_REQUEST, msg.request_id)
        fixed = _READ_REQ.pack(msg.ledger_id, msg.entry_id, msg.flags, len(msg.master_key))
        return b"".join((head, fixed, msg.master_key))
    if isinstance(msg, ReadResponse):
        head = _HEAD.pack(PROTOCOL_VERSION, MessageType.READ_RESPONSE, msg.request_id)
        return b"".join(
            (head, _READ_RESP.pack(msg.status, msg.ledger_id, msg.entry_id), msg.packet)
        )
    if isinstance(msg, ReadLacRequest):
        _check_key(msg.master_key)
        head = _HEAD.pack(PROTOCOL_VERSION, MessageType.READ_LAC_REQUEST, msg.request_id)
        fixed = _LAC_REQ.pack(
            msg.ledger_id, msg.flags, msg.previous_lac, msg.timeout_ms, len(msg.master_key)
        )
        return b"".join((head, fixed, msg.master_key))
    if isinstance(msg, ReadLacResponse):
        head = _HEAD.pack(PROTOCOL_VERSION, MessageType.READ_LAC_RESPONSE, msg.request_id)
        return b"".join((head, _LAC_RESP.pack(msg.status, msg.ledger_id, msg.lac), msg.packet))
    if isinstance(msg, WriteLacRequest):
        _check_key(msg.master_key)
        head = _HEAD.pack(PROTOCOL_VERSION, MessageType.WRITE_LAC_REQUEST, msg.request_id)
        return b"".join(
            (head, _WLAC_REQ.pack(msg.ledger_id, msg.lac, len(msg.master_key)), msg.master_key)
        )
    if isinstance(msg, WriteLacResponse):
        head = _HEAD.pack(PROTOCOL_VERSION, MessageType.WRITE_LAC_RESPONSE, msg.request_id)
        return head + _WLAC_RESP.pack(msg.status, msg.ledger_id)
    if isinstance(msg, ErrorResponse):
        head = _HEAD.pack(PROTOCOL_VERSION, MessageType.ERROR_RESPONSE, msg.request_id)
        return b"".join((head, _ERR_RESP.pack(msg.status), msg.message.encode("utf-8")[:_MAX_TEXT]))
    if isinstance(msg, AuthRequest):
        method = msg.method.encode("utf-8")
        head = _HEAD.pack(PROTOCOL_VERSION, MessageType.AUTH_REQUEST, msg.request_id)
        return b"".join((head, _AUTH_REQ.pack(len(method)), method, msg.credentials))
    if isinstance(msg, AuthResponse):
        head = _HEAD.pack(PROTOCOL_VERSION, MessageType.AUTH_RESPONSE, msg.request_id)
        return b"".join((head, _AUTH_RESP.pack(msg.status), msg.text.encode("utf-8")[:_MAX_TEXT]))
    if isinstance(msg, BatchReadRequest):
        head = _HEAD.pack(PROTOCOL_VERSION, MessageType.BATCH_READ_REQUEST, msg.request_id)
        fixed = _BREAD_REQ.pack(msg.ledger_id, msg.first_entry_id, msg.count, msg.max_bytes)
        return head + fixed
    if isinstance(msg, BatchReadResponse):
        parts = encode_batch_read_response_parts(
            msg.request_id, msg.status, msg.ledger_id, msg.first_entry_id, msg.packets
        )
        return b"".join(parts)[_LEN.size :]
    if isinstance(msg, CopyFragmentRequest):
        _check_key(msg.master_key)
        if len(msg.skip) > MAX_COPY_SKIP:
            raise LocalProtocolError(f"{len(msg.skip)} bookies to skip (at most {MAX_COPY_SKIP})")
        head = _HEAD.pack(PROTOCOL_VERSION, MessageType.COPY_FRAGMENT_REQUEST, msg.request_id)
        fixed = _COPY_REQ.pack(
            msg.ledger_id,
            msg.fragment_first_entry,
            msg.index,
            msg.first_entry,
            msg.last_entry,
            len(msg.master_key),
            len(msg.skip),
        )
        names = []
        for name in msg.skip:
            raw = name.encode("utf-8")
            names += [_NAME_LEN.pack(len(raw)), raw]
        return b"".join((head, fixed, msg.master_key, *names))
    if isinstance(msg, CopyFragmentResponse):
        head = _HEAD.pack(PROTOCOL_VERSION, MessageType.COPY_FRAGMENT_RESPONSE, msg.request_id)
        fixed = _COPY_RESP.pack(msg.status, msg.ledger_id, msg.entries, msg.bytes)
        return b"".join((head, fixed, msg.text.encode("utf-8")[:_MAX_TEXT]))
    raise LocalProtocolError(f"not a wire message: {msg!r}")


def encode_frame(msg: Message) -> bytes:
    """Encode a message as one length-prefixed frame."""
    body = encode_body(msg)
    return _LEN.pack(len(body)) + body


def peek_request_id(body: bytes | memoryview) -> int | None:
    """The request id of a body whose header is intact, else None (to answer a bad request)."""
    if len(body) < _HEAD.size:
        return None
    return int(_HEAD.unpack_from(body, 0)[2])


def status_name(value: int) -> str:
    """A status code's name, or the number itself if this version does not know it (for
    messages about answers already checked no further)."""
    try:
        return StatusCode(value).name
    except ValueError:
        return str(value)


def _status(value: int) -> StatusCode:
    try:
        return StatusCode(value)
    except ValueError:
        raise RemoteProtocolError(f"unknown status code {value}") from None


def decode_message(body: bytes | memoryview) -> Message:
    """Decode one frame body; raise RemoteProtocolError for anything malformed."""
    try:
        return _decode(memoryview(body))
    except struct.error as exc:
        raise RemoteProtocolError(f"truncated or malformed message: {exc}") from exc
    except (ValueError, UnicodeDecodeError) as exc:
        raise RemoteProtocolError(f"malformed message: {exc}") from exc


def _take_key(view: memoryview, offset: int, key_len: int, *, exact_end: bool) -> tuple[bytes, int]:
    end = offset + key_len
    if end > len(view) or (exact_end and end != len(view)):
        raise RemoteProtocolError("master key length does not match the frame")
    return bytes(view[offset:end]), end


def _decode(view: memoryview) -> Message:
    if len(view) < _HEAD.size:
        raise RemoteProtocolError(f"message of {len(view)} bytes is shorter than its header")
    version, mtype, request_id = _HEAD.unpack_from(view, 0)
    decoder = _DECODERS.get(version)
    if decoder is None:
        known = ", ".join(str(v) for v in sorted(_DECODERS))
        raise UnsupportedVersionError(f"protocol version {version}, this side speaks {known}")
    return decoder(view, mtype, request_id)


def _decode_v1(view: memoryview, mtype: int, request_id: int) -> Message:
    at = _HEAD.size
    if mtype == MessageType.ADD_REQUEST:
        ledger_id, entry_id, flags, key_len = _ADD_REQ.unpack_from(view, at)
        key, end = _take_key(view, at + _ADD_REQ.size, key_len, exact_end=False)
        flag = _ADD_FLAGS.get(flags)
        if flag is None:
            flag = AddFlag(flags)
        return AddRequest(request_id, ledger_id, entry_id, key, bytes(view[end:]), flag)
    if mtype == MessageType.ADD_RESPONSE:
        _exact(view, at + _ADD_RESP.size)
        status, ledger_id, entry_id = _ADD_RESP.unpack_from(view, at)
        return AddResponse(request_id, _status(status), ledger_id, entry_id)
    if mtype == MessageType.READ_REQUEST:
        ledger_id, entry_id, flags, key_len = _READ_REQ.unpack_from(view, at)
        key, _ = _take_key(view, at + _READ_REQ.size, key_len, exact_end=True)
        return ReadRequest(request_id, ledger_id, entry_id, ReadFlag(flags), key)
    if mtype == MessageType.READ_RESPONSE:
        status, ledger_id, entry_id = _READ_RESP.unpack_from(view, at)
        packet = bytes(view[at + _READ_RESP.size :])
        return ReadResponse(request_id, _status(status), ledger_id, entry_id, packet)
    if mtype == MessageType.READ_LAC_REQUEST:
        ledger_id, flags, previous_lac, timeout_ms, key_len = _LAC_REQ.unpack_from(view, at)
        key, _ = _take_key(view, at + _LAC_REQ.size, key_len, exact_end=True)
        return ReadLacRequest(
            request_id, ledger_id, ReadLacFlag(flags), previous_lac, timeout_ms, key
        )
    if mtype == MessageType.READ_LAC_RESPONSE:
        status, ledger_id, lac = _LAC_RESP.unpack_from(view, at)
        packet = bytes(view[at + _LAC_RESP.size :])
        return ReadLacResponse(request_id, _status(status), ledger_id, lac, packet)
    if mtype == MessageType.WRITE_LAC_REQUEST:
        ledger_id, lac, key_len = _WLAC_REQ.unpack_from(view, at)
        key, _ = _take_key(view, at + _WLAC_REQ.size, key_len, exact_end=True)
        return WriteLacRequest(request_id, ledger_id, lac, key)
    if mtype == MessageType.WRITE_LAC_RESPONSE:
        _exact(view, at + _WLAC_RESP.size)
        status, ledger_id = _WLAC_RESP.unpack_from(view, at)
        return WriteLacResponse(request_id, _status(status), ledger_id)
    if mtype == MessageType.ERROR_RESPONSE:
        (status,) = _ERR_RESP.unpack_from(view, at)
        text = bytes(view[at + _ERR_RESP.size :]).decode("utf-8", errors="replace")
        return ErrorResponse(request_id, _status(status), text)
    if mtype == MessageType.AUTH_REQUEST:
        (method_len,) = _AUTH_REQ.unpack_from(view, at)
        start = at + _AUTH_REQ.size
        if start + method_len > len(view):
            raise RemoteProtocolError("auth method length does not match the frame")
        method = bytes(view[start : start + method_len]).decode("utf-8")
        return AuthRequest(request_id, method, bytes(view[start + method_len :]))
    if mtype == MessageType.AUTH_RESPONSE:
        (status,) = _AUTH_RESP.unpack_from(view, at)
        text = bytes(view[at + _AUTH_RESP.size :]).decode("utf-8", errors="replace")
        return AuthResponse(request_id, _status(status), text)
    if mtype == MessageType.BATCH_READ_REQUEST:
        _exact(view, at + _BREAD_REQ.size)
        ledger_id, first_entry_id, count, max_bytes = _BREAD_REQ.unpack_from(view, at)
        return BatchReadRequest(request_id, ledger_id, first_entry_id, count, max_bytes)
    if mtype == MessageType.BATCH_READ_RESPONSE:
        status, ledger_id, first_entry_id, count = _BREAD_RESP.unpack_from(view, at)
        return BatchReadResponse(
            request_id,
            _status(status),
            ledger_id,
            first_entry_id,
            _packets(view, at + _BREAD_RESP.size, count),
        )
    if mtype == MessageType.COPY_FRAGMENT_REQUEST:
        ledger_id, fragment_first, index, first, last, key_len, skips = _COPY_REQ.unpack_from(
            view, at
        )
        key, at = _take_key(view, at + _COPY_REQ.size, key_len, exact_end=False)
        if skips > MAX_COPY_SKIP:
            raise RemoteProtocolError(f"{skips} bookies to skip (at most {MAX_COPY_SKIP})")
        names = []
        for _ in range(skips):
            (size,) = _NAME_LEN.unpack_from(view, at)
            at += _NAME_LEN.size
            if at + size > len(view):
                raise RemoteProtocolError("a bookie name's length runs past the end of the frame")
            names.append(bytes(view[at : at + size]).decode("utf-8"))
            at += size
        _exact(view, at)
        return CopyFragmentRequest(
            request_id, ledger_id, fragment_first, index, first, last, key, tuple(names)
        )
    if mtype == MessageType.COPY_FRAGMENT_RESPONSE:
        status, ledger_id, entries, size = _COPY_RESP.unpack_from(view, at)
        text = bytes(view[at + _COPY_RESP.size :]).decode("utf-8", errors="replace")
        return CopyFragmentResponse(request_id, _status(status), ledger_id, entries, size, text)
    raise RemoteProtocolError(f"unknown message type {mtype}")


#: A decoder for every protocol version this side reads. A journal holds request bodies too
#: (walkit_bookie's journal), so a version stays readable for as long as journals or peers
#: may hold it; a new version adds its decoder here (docs/formats.md).
_DECODERS: Final[dict[int, Callable[[memoryview, int, int], Message]]] = {1: _decode_v1}
#: The protocol versions this side reads (it writes :data:`PROTOCOL_VERSION`).
SUPPORTED_PROTOCOL_VERSIONS: Final = frozenset(_DECODERS)


def _packets(view: memoryview, at: int, count: int) -> tuple[bytes, ...]:
    """``count`` length-prefixed packets filling ``view[at:]`` exactly."""
    if count > MAX_BATCH_READ_ENTRIES:
        raise RemoteProtocolError(f"batch of {count} entries (at most {MAX_BATCH_READ_ENTRIES})")
    packets = []
    unpack = _PACKET_LEN.unpack_from
    end = len(view)
    for _ in range(count):
        (size,) = unpack(view, at)
        at += _PACKET_LEN.size
        if at + size > end:
            raise RemoteProtocolError("a packet's length runs past the end of the batch")
        packets.append(bytes(view[at : at + size]))
        at += size
    if at != end:
        raise RemoteProtocolError(f"{end - at} bytes after the batch's last packet")
    return tuple(packets)


def _exact(view: memoryview, size: int) -> None:
    if len(view) != size:
        raise RemoteProtocolError(f"message has {len(view)} bytes, expected {size}")


# --- fast paths: whole frames without message objects ---------------------------------------

# An AddRequest frame up to its master key: length | version, type, request id | ledger id,
# entry id, flags, key length. The master key and the packet follow.
_ADD_PREFIX = struct.Struct(">IBBQQqBB")
_ADD_PREFIX_BODY: Final = _ADD_PREFIX.size - _LEN.size
# A ReadRequest frame up to its master key (the same fixed layout as an add's).
_READ_PREFIX = _ADD_PREFIX
#: A whole AddResponse frame, precompiled for the hot paths: length | version, type, request
#: id | status, ledger id, entry id. Every AddResponse frame has this size, and its first three
#: fields are ADD_RESPONSE_HEAD; the client's dispatcher unpacks it in place with
#: ``ADD_RESPONSE_FRAME.unpack_from`` (a call of a function of ours per answer would cost it
#: more than the unpack).
ADD_RESPONSE_FRAME: Final = struct.Struct(">IBBQhQq")
ADD_RESPONSE_HEAD: Final = (
    ADD_RESPONSE_FRAME.size - _LEN.size,
    PROTOCOL_VERSION,
    int(MessageType.ADD_RESPONSE),
)


class _Parts(Protocol):
    """Where frames' parts are appended (a list of bytes, or of bytes and views)."""

    def append(self, part: bytes, /) -> None: ...


def encode_adds_into(
    out: _Parts,
    first_request_id: int,
    ledger_id: int,
    master_key: bytes,
    entries: Iterable[tuple[int, bytes]],
    flags: AddFlag = AddFlag.NONE,
) -> int:
    """Append the AddRequest frames of ``(entry_id, packet)`` pairs to ``out`` as parts
    (prefix, master key, packet: nothing copied), request ids counting up from
    ``first_request_id``; return the next free request id. ``b"".join`` of the parts of one
    entry is ``encode_frame(AddRequest(...))``."""
    _check_key(master_key)
    pack = _ADD_PREFIX.pack
    append = out.append
    key_len = len(master_key)
    base = _ADD_PREFIX_BODY + key_len
    add = MessageType.ADD_REQUEST
    rid = first_request_id
    for entry_id, packet in entries:
        append(
            pack(
                base + len(packet), PROTOCOL_VERSION, add, rid, ledger_id, entry_id, flags, key_len
            )
        )
        append(master_key)
        append(packet)
        rid += 1
    return rid


def encode_read_request(
    request_id: int, ledger_id: int, entry_id: int, flags: int = 0, master_key: bytes = b""
) -> bytes:
    """``encode_frame(ReadRequest(...))`` without building the message."""
    return (
        _READ_PREFIX.pack(
            _ADD_PREFIX_BODY + len(master_key),
            PROTOCOL_VERSION,
            MessageType.READ_REQUEST,
            request_id,
            ledger_id,
            entry_id,
            flags,
            len(master_key),
        )
        + master_key
    )


def encode_batch_read_request(
    request_id: int, ledger_id: int, first_entry_id: int, count: int, max_bytes: int
) -> bytes:
    """``encode_frame(BatchReadRequest(...))`` without building the message."""
    body = _HEAD.pack(PROTOCOL_VERSION, MessageType.BATCH_READ_REQUEST, request_id) + (
        _BREAD_REQ.pack(ledger_id, first_entry_id, count, max_bytes)
    )
    return _LEN.pack(len(body)) + body


def encode_read_response_parts(
    request_id: int, status: int, ledger_id: int, entry_id: int, packet: bytes
) -> tuple[bytes, bytes]:
    """``encode_frame(ReadResponse(...))`` as (everything before the packet, the packet), so
    a large packet is written to the socket without being copied into a frame."""
    size = _HEAD.size + _READ_RESP.size + len(packet)
    head = _LEN.pack(size) + _HEAD.pack(PROTOCOL_VERSION, MessageType.READ_RESPONSE, request_id)
    return head + _READ_RESP.pack(status, ledger_id, entry_id), packet


def encode_batch_read_response_parts(
    request_id: int, status: int, ledger_id: int, first_entry_id: int, packets: Sequence[bytes]
) -> list[bytes]:
    """``encode_frame(BatchReadResponse(...))`` as parts for one scatter-gather send: large
    packets (16 KiB and more) are parts of their own, not copied; small ones are joined with
    the length prefixes around them (a thousand small entries are a few parts, not two
    thousand)."""
    size = _HEAD.size + _BREAD_RESP.size + sum(_PACKET_LEN.size + len(p) for p in packets)
    head = _LEN.pack(size) + _HEAD.pack(
        PROTOCOL_VERSION, MessageType.BATCH_READ_RESPONSE, request_id
    )
    parts: list[bytes] = []
    small = [head + _BREAD_RESP.pack(status, ledger_id, first_entry_id, len(packets))]
    pack = _PACKET_LEN.pack
    for packet in packets:
        small.append(pack(len(packet)))
        if len(packet) >= _OWN_PART:
            parts.append(b"".join(small))
            parts.append(packet)
            small = []
        else:
            small.append(packet)
    if small:
        parts.append(b"".join(small))
    return parts


#: ``encode_add_response(request_id, status, ledger_id, entry_id)``: the frame of that
#: AddResponse, in one pack (the bookie answers one per add).
encode_add_response = functools.partial(ADD_RESPONSE_FRAME.pack, *ADD_RESPONSE_HEAD)


def frame_length(
    buffer: bytes | bytearray | memoryview, pos: int, max_frame_size: int
) -> int | None:
    """The body length announced by the frame at ``buffer[pos:]`` (None until its prefix is
    there); RemoteProtocolError for an empty frame, FrameTooLargeError above the maximum."""
    if len(buffer) - pos < _LEN.size:
        return None
    (length,) = _LEN.unpack_from(buffer, pos)
    if length == 0:
        raise RemoteProtocolError("empty frame")
    if length > max_frame_size:
        raise FrameTooLargeError(
            f"frame of {length} bytes is larger than the maximum {max_frame_size}"
        )
    return int(length)


@final
class FrameDecoder:
    """Splits a byte stream into frame bodies.

    Feed it whatever the socket gave; take frames out with :meth:`next_frame` until it returns
    None. A frame length of 0 or above ``max_frame_size`` raises at once, before buffering it.

    A chunk fed while nothing is buffered is not copied: frames are cut out of it directly
    (one copy per frame body), and only a partial frame left at its end is copied, when
    :meth:`next_frame` returns None. So the caller may reuse the chunk's memory once
    ``next_frame`` has returned None, and not before.
    """

    __slots__ = ("_borrowed", "_buffer", "_start", "max_frame_size")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < _HEAD.size or max_frame_size > _U64_MAX:
            raise LocalProtocolError(f"bad max frame size {max_frame_size}")
        self.max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._start = 0  # consumed prefix; compacted lazily so many small frames stay O(n)
        #: The chunk being cut up, not copied (None: frames come from ``_buffer``).
        self._borrowed: memoryview | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        if self._borrowed is not None:
            self._keep_rest()
        if self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
            if len(data):
                self._borrowed = memoryview(data).cast("B")
            return
        if self._start and self._start * 2 >= len(self._buffer):
            del self._buffer[: self._start]
            self._start = 0
        self._buffer += data

    def _keep_rest(self) -> None:
        """Copy what is left of the borrowed chunk into the buffer (the buffer is empty)."""
        borrowed = self._borrowed
        assert borrowed is not None
        self._borrowed = None
        self._buffer = bytearray(borrowed[self._start :])
        self._start = 0
        borrowed.release()

    @property
    def buffered(self) -> int:
        if self._borrowed is not None:
            return len(self._borrowed) - self._start
        return len(self._buffer) - self._start

    def pending_frame_length(self) -> int | None:
        """The announced length of the next frame, if its prefix has arrived (checked)."""
        source = self._buffer if self._borrowed is None else self._borrowed
        return frame_length(source, self._start, self.max_frame_size)

    def next_frame(self) -> bytes | None:
        length = self.pending_frame_length()
        if length is None or self.buffered < _LEN.size + length:
            if self._borrowed is not None:
                self._keep_rest()
            return None
        begin = self._start + _LEN.size
        borrowed = self._borrowed
        if borrowed is not None:
            body = borrowed[begin : begin + length].tobytes()
            self._start = begin + length
            if self._start == len(borrowed):
                self._borrowed = None
                self._start = 0
                borrowed.release()
            return body
        with memoryview(self._buffer) as view:  # one copy (a bytearray slice would be two)
            body = view[begin : begin + length].tobytes()
        self._start = begin + length
        if self._start == len(self._buffer):
            self._buffer.clear()
            self._start = 0
        return body
