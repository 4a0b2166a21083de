"""Bad input on the wire: the bookie answers an error or closes only that connection."""

from __future__ import annotations

import random
import struct
from pathlib import Path

import trio

from tests.bookie._helpers import Client, config, connect, running_bookie
from walkit._core.wire import (
    AddResponse,
    ErrorResponse,
    MessageType,
    StatusCode,
    encode_body,
    encode_frame,
)
from walkit_bookie import Bookie

_HEAD = struct.Struct(">BBQ")


def frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


async def _answer(c: Client, request_id: int) -> ErrorResponse:
    with trio.fail_after(10):
        while True:
            for msg in c.unmatched:
                if msg.request_id == request_id:
                    assert isinstance(msg, ErrorResponse), msg
                    return msg
            await trio.sleep(0.01)


async def _closed(c: Client) -> None:
    with trio.fail_after(10):
        await c.closed.wait()


async def _still_serving(bookie: Bookie, bid: object, ledger: int) -> None:
    async with connect(bid) as other:  # type: ignore[arg-type]
        assert (await other.add(ledger, 0, b"fine")).status is StatusCode.OK
        assert (await other.read(ledger, 0)).status is StatusCode.OK
    assert not bookie.read_only


async def test_malformed_bodies_with_intact_header_get_error_answers(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (bookie, bid), connect(bid) as c:
        truncated_add = _HEAD.pack(1, MessageType.ADD_REQUEST, 101) + b"\x00\x01"
        unknown_type = _HEAD.pack(1, 200, 102) + b"whatever"
        bad_version = _HEAD.pack(9, MessageType.ADD_REQUEST, 103) + b"\x00" * 30
        bad_key_length = _HEAD.pack(1, MessageType.READ_REQUEST, 104) + struct.pack(
            ">QqBB", 1, 0, 1, 200
        )
        a_response = encode_body(AddResponse(105, StatusCode.OK, 1, 0))
        await c.stream.send_all(
            b"".join(
                frame(b)
                for b in (truncated_add, unknown_type, bad_version, bad_key_length, a_response)
            )
        )
        for rid in (101, 102, 104, 105):
            assert (await _answer(c, rid)).status is StatusCode.BAD_REQUEST
        assert (await _answer(c, 103)).status is StatusCode.BAD_VERSION
        # The same connection goes on serving.
        assert (await c.add(1, 0, b"after the noise")).status is StatusCode.OK
        await _still_serving(bookie, bid, 2)


async def test_oversized_frame_is_answered_then_only_that_connection_closes(
    tmp_path: Path,
) -> None:
    cfg = config([tmp_path / "d"], max_frame_size=64 * 1024)
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as bystander:
        assert (await bystander.add(1, 0, b"before")).status is StatusCode.OK
        async with connect(bid) as c:
            header = struct.pack(">I", 10 * 1024 * 1024) + _HEAD.pack(
                1, MessageType.ADD_REQUEST, 77
            )
            await c.stream.send_all(header + b"\x00" * 1000)
            answer = await _answer(c, 77)
            assert answer.status is StatusCode.BAD_REQUEST
            assert "larger than the maximum" in answer.message
            await _closed(c)
        # A frame just under the limit is fine.
        big = bystander.add_request(1, 1, b"x" * (60 * 1024))
        assert len(encode_frame(big)) < 64 * 1024
        assert (await bystander.call(big)).status is StatusCode.OK  # type: ignore[union-attr]
        await _still_serving(bookie, bid, 3)


async def test_headerless_and_empty_frames_close_only_that_connection(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (bookie, bid), connect(bid) as keep:
        for garbage in (frame(b"\x01\x02"), b"\x00\x00\x00\x00"):
            async with connect(bid) as c:
                await c.stream.send_all(garbage)
                await _closed(c)
        assert (await keep.add(1, 0, b"still here")).status is StatusCode.OK
        await _still_serving(bookie, bid, 2)


async def test_truncated_frame_then_disconnect(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (bookie, bid):
        async with connect(bid) as c:
            whole = encode_frame(c.add_request(1, 0, b"x" * 5000))
            await c.stream.send_all(whole[: len(whole) // 2])
        async with connect(bid) as c:
            assert (await c.read(1, 0)).status is StatusCode.NO_SUCH_LEDGER
        await _still_serving(bookie, bid, 2)


async def test_random_garbage_never_stops_the_bookie(tmp_path: Path) -> None:
    rng = random.Random(20240601)
    async with running_bookie(config([tmp_path / "d"], max_frame_size=4096)) as (bookie, bid):
        for _ in range(30):
            async with connect(bid) as c:
                blob = rng.randbytes(rng.randrange(1, 3000))
                if rng.random() < 0.5:  # a plausible length prefix makes it reach the decoder
                    blob = frame(blob[: rng.randrange(1, 200)])
                await c.stream.send_all(blob)
                await trio.sleep(0.01)
        await _still_serving(bookie, bid, 9)
