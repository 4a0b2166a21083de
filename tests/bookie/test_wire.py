"""The wire codec: round trips of every message, and total decoding under fuzzing."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.bookie._helpers import KEY, packet
from walkit._core.digest import packet_lac, read_header
from walkit._core.wire import (
    ADD_RESPONSE_FRAME,
    ADD_RESPONSE_HEAD,
    AddFlag,
    AddRequest,
    AddResponse,
    ErrorResponse,
    FrameDecoder,
    Message,
    ReadFlag,
    ReadLacFlag,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    StatusCode,
    WriteLacRequest,
    WriteLacResponse,
    decode_message,
    encode_add_response,
    encode_body,
    encode_frame,
    frame_length,
    peek_request_id,
    status_name,
)
from walkit.errors import FrameTooLargeError, LocalProtocolError, RemoteProtocolError

U64 = st.integers(0, 2**64 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)
U32 = st.integers(0, 2**32 - 1)
KEYS = st.binary(max_size=255)
DATA = st.binary(max_size=2048)
STATUS = st.sampled_from(list(StatusCode))

MESSAGES: st.SearchStrategy[Message] = st.one_of(
    st.builds(
        AddRequest, U64, U64, I64, KEYS, DATA, st.sampled_from([AddFlag.NONE, AddFlag.RECOVERY])
    ),
    st.builds(AddResponse, U64, STATUS, U64, I64),
    st.builds(ReadRequest, U64, U64, I64, st.sampled_from([ReadFlag.NONE, ReadFlag.FENCE]), KEYS),
    st.builds(ReadResponse, U64, STATUS, U64, I64, DATA),
    st.builds(ReadLacRequest, U64, U64, st.integers(0, 7).map(ReadLacFlag), I64, U32, KEYS),
    st.builds(ReadLacResponse, U64, STATUS, U64, I64, DATA),
    st.builds(WriteLacRequest, U64, U64, I64, KEYS),
    st.builds(WriteLacResponse, U64, STATUS, U64),
    st.builds(ErrorResponse, U64, STATUS, st.text(max_size=100)),
)

EXAMPLES: list[Message] = [
    AddRequest(1, 7, 0, KEY, packet(7, 0, b"payload")),
    AddRequest(2, 7, 1, KEY, packet(7, 1, b""), AddFlag.RECOVERY),
    AddResponse(3, StatusCode.LEDGER_FENCED, 7, 1),
    ReadRequest(4, 7, 1),
    ReadRequest(5, 7, 1, ReadFlag.FENCE, KEY),
    ReadResponse(6, StatusCode.OK, 7, 1, packet(7, 1, b"x")),
    ReadResponse(7, StatusCode.NO_SUCH_ENTRY, 7, 9),
    ReadLacRequest(8, 7),
    ReadLacRequest(
        9, 7, ReadLacFlag.LONG_POLL | ReadLacFlag.PIGGYBACK_ENTRY, previous_lac=4, timeout_ms=500
    ),
    ReadLacRequest(10, 7, ReadLacFlag.FENCE, master_key=KEY),
    ReadLacResponse(11, StatusCode.OK, 7, 4, packet(7, 5, b"piggy")),
    WriteLacRequest(12, 7, 4, KEY),
    WriteLacResponse(13, StatusCode.UNAUTHORIZED_ACCESS, 7),
    ErrorResponse(14, StatusCode.BAD_REQUEST, "bad frame: ünïcode"),
    AddRequest(2**64 - 1, 2**64 - 1, 2**63 - 1, b"k" * 255, b"p" * 10),
]


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(message: Message) -> None:
    frame = encode_frame(message)
    assert struct.unpack(">I", frame[:4])[0] == len(frame) - 4
    assert decode_message(frame[4:]) == message
    assert peek_request_id(frame[4:]) == message.request_id


@given(MESSAGES)
@settings(deadline=None)  # timing-free: a loaded machine must not fail it
def test_generated_messages_round_trip(message: Message) -> None:
    assert decode_message(encode_body(message)) == message


@given(st.binary(max_size=300))
@settings(max_examples=500, deadline=None)
def test_decode_message_is_total(data: bytes) -> None:
    try:
        message = decode_message(data)
    except RemoteProtocolError:
        return
    assert isinstance(message, Message)


@given(MESSAGES, st.data())
@settings(deadline=None)  # timing-free: a loaded machine must not fail it
def test_decode_of_damaged_messages_is_total(message: Message, data: st.DataObject) -> None:
    body = bytearray(encode_body(message))
    cut = data.draw(st.integers(0, len(body)))
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(body) - 1), st.integers(0, 255))))
    for at, value in flips:
        body[at] = value
    for candidate in (bytes(body[:cut]), bytes(body)):
        try:
            decode_message(candidate)
        except RemoteProtocolError:
            pass


@given(st.lists(MESSAGES, max_size=8), st.data())
@settings(deadline=None)  # timing-free: a loaded machine must not fail it
def test_frame_decoder_reassembles_any_chunking(
    messages: list[Message], data: st.DataObject
) -> None:
    stream = b"".join(encode_frame(m) for m in messages)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = FrameDecoder()
    got: list[Message] = []
    last = 0
    for cut in [*cuts, len(stream)]:
        decoder.feed(stream[last:cut])
        last = cut
        while (body := decoder.next_frame()) is not None:
            got.append(decode_message(body))
    assert got == messages
    assert decoder.buffered == 0


@given(st.lists(MESSAGES, max_size=8), st.data())
@settings(deadline=None)
def test_frame_decoder_holds_no_view_of_a_chunk_once_drained(
    messages: list[Message], data: st.DataObject
) -> None:
    """The bookie receives into one reused buffer: once ``next_frame`` returned None the
    decoder must not depend on the chunk's memory (frames are cut from it without a copy)."""
    stream = b"".join(encode_frame(m) for m in messages)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=10)))
    decoder = FrameDecoder()
    reused = bytearray(len(stream) + 1)
    got: list[Message] = []
    last = 0
    for cut in [*cuts, len(stream)]:
        reused[: cut - last] = stream[last:cut]
        decoder.feed(memoryview(reused)[: cut - last])
        last = cut
        while (body := decoder.next_frame()) is not None:
            got.append(decode_message(body))
        reused[:] = b"\xee" * len(reused)  # the next receive overwrites it
    assert got == messages
    assert decoder.buffered == 0


@given(st.lists(st.binary(max_size=64), max_size=10))
@settings(max_examples=500, deadline=None)
def test_frame_decoder_on_any_bytes_is_total(chunks: list[bytes]) -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    try:
        for chunk in chunks:
            decoder.feed(chunk)
            while (body := decoder.next_frame()) is not None:
                assert 0 < len(body) <= 1024
                try:
                    decode_message(body)
                except RemoteProtocolError:
                    pass
    except RemoteProtocolError:
        pass


def test_frame_decoder_refuses_large_frames_before_buffering() -> None:
    decoder = FrameDecoder(max_frame_size=100)
    decoder.feed(struct.pack(">I", 101) + b"x")
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()
    empty = FrameDecoder()
    empty.feed(b"\0\0\0\0")
    with pytest.raises(RemoteProtocolError):
        empty.next_frame()


def test_encoding_refuses_what_the_wire_cannot_carry() -> None:
    with pytest.raises(LocalProtocolError):
        encode_frame(AddRequest(1, 1, 0, b"k" * 256, b""))
    with pytest.raises(LocalProtocolError):
        encode_frame(AddResponse(-1, StatusCode.OK, 1, 0))


@given(U64, U64, I64)
@settings(deadline=None)  # timing-free: a loaded machine must not fail it
def test_bookie_fast_add_answer_is_the_codec_frame(
    request_id: int, ledger: int, entry: int
) -> None:
    fast = encode_add_response(request_id, 0, ledger, entry)
    assert fast == encode_frame(AddResponse(request_id, StatusCode.OK, ledger, entry))
    # The client's fast path reads it back in place, at any offset of a buffer.
    assert ADD_RESPONSE_FRAME.unpack_from(b"xy" + fast, 2) == (
        *ADD_RESPONSE_HEAD,
        request_id,
        0,
        ledger,
        entry,
    )


@given(st.sampled_from(list(StatusCode)), U64, U64, I64)
@settings(deadline=None)  # timing-free: a loaded machine must not fail it
def test_the_add_response_layout_is_the_codec_s(
    status: StatusCode, request_id: int, ledger: int, entry: int
) -> None:
    frame = encode_frame(AddResponse(request_id, status, ledger, entry))
    assert len(frame) == ADD_RESPONSE_FRAME.size
    fields = ADD_RESPONSE_FRAME.unpack(frame)
    assert fields == (*ADD_RESPONSE_HEAD, request_id, int(status), ledger, entry)


def test_frame_lengths_are_checked() -> None:
    other_version = bytearray(encode_frame(AddResponse(7, StatusCode.OK, 1, 2)))
    other_version[4] = 2
    assert ADD_RESPONSE_FRAME.unpack(other_version)[:3] != ADD_RESPONSE_HEAD
    assert frame_length(other_version, 0, 1 << 20) == len(other_version) - 4
    with pytest.raises(RemoteProtocolError, match="version 2"):
        decode_message(bytes(other_version[4:]))
    assert frame_length(b"\0\0\0", 0, 100) is None
    with pytest.raises(RemoteProtocolError, match="empty frame"):
        frame_length(b"\0\0\0\0", 0, 100)
    with pytest.raises(FrameTooLargeError):
        frame_length(b"\0\0\0\x65", 0, 100)


@given(st.integers(0, 2**63 - 1), st.integers(-1, 2**62), st.binary(max_size=64))
@settings(deadline=None)  # timing-free: a loaded machine must not fail it
def test_packet_lac_agrees_with_read_header(entry: int, lac: int, payload: bytes) -> None:
    p = packet(3, entry, payload, lac)
    assert packet_lac(p) == read_header(p).lac == lac


def test_status_names_known_and_unknown() -> None:
    assert status_name(int(StatusCode.OK)) == "OK"
    assert status_name(int(StatusCode.ENTRY_EXISTS)) == "ENTRY_EXISTS"
    assert status_name(9999) == "9999"  # a newer bookie's code: its number, not an error
