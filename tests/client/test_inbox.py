"""The client's receive buffer: frames cut at any byte, frames larger than the buffer, a
frame above the limit; and the same over a real socket to a peer that dribbles its answers."""

from __future__ import annotations

import random

import anyio
import anyio.abc
import pytest
import trio

from walkit._core.types import BookieId
from walkit._core.wire import (
    AddResponse,
    FrameDecoder,
    ReadRequest,
    ReadResponse,
    StatusCode,
    decode_message,
    encode_frame,
    encode_read_request,
)
from walkit.errors import BookieUnavailableError, FrameTooLargeError, WalkitError
from walkit.net import TcpNetwork
from walkit.net._inbox import _KEEP, Inbox
from walkit.net._pool import ConnectionPool

SIZE = 64 * 1024


async def _receive(stream: anyio.abc.ByteStream) -> bytes:
    """The next bytes of ``stream`` (b"" at its end)."""
    try:
        return await stream.receive()
    except anyio.EndOfStream:
        return b""


def frames_of(inbox: Inbox) -> list[bytes]:
    """Take the whole frames out of ``inbox`` (as the connection's dispatch does)."""
    out = []
    with inbox.data() as data:
        pos = 0
        while len(data) - pos >= 4:
            length = int.from_bytes(data[pos : pos + 4], "big")
            if len(data) - pos < 4 + length:
                break
            out.append(bytes(data[pos + 4 : pos + 4 + length]))
            pos += 4 + length
    inbox.consume(pos)
    return out


@pytest.mark.parametrize("seed", range(5))
def test_frames_cut_anywhere_come_out_whole_and_in_order(seed: int) -> None:
    rng = random.Random(seed)
    bodies = [
        rng.randbytes(rng.choice([1, 20, 4000, SIZE - 3, SIZE * 3 + 7, 300_000])) for _ in range(60)
    ]
    stream = b"".join(len(b).to_bytes(4, "big") + b for b in bodies)
    inbox = Inbox(SIZE, 1 << 20)
    got: list[bytes] = []
    at = 0
    while at < len(stream):
        space = inbox.space()
        # The room always fits the rest of the frame being received.
        count = min(len(space), rng.randint(1, 100_000), len(stream) - at)
        space[:count] = stream[at : at + count]
        del space
        at += count
        inbox.received(count)
        got += frames_of(inbox)
    assert got == bodies
    assert len(inbox) == 0
    # Grown for the big frames, and kept (they come one after another), within _KEEP; but a
    # receive is offered no more than the first size unless a frame needs it.
    assert len(inbox.space()) == SIZE
    assert SIZE < len(inbox._buffer) <= _KEEP


def test_a_buffer_grown_past_the_kept_size_goes_back_to_the_first() -> None:
    inbox = Inbox(SIZE, 8 << 20)
    for length in (_KEEP - 100, _KEEP + 100):
        body = bytes([length % 251]) * length
        stream = length.to_bytes(4, "big") + body
        at = 0
        got: list[bytes] = []
        while at < len(stream):
            space = inbox.space()
            count = min(len(space), len(stream) - at)
            space[:count] = stream[at : at + count]
            del space
            at += count
            inbox.received(count)
            got += frames_of(inbox)
        assert got == [body]
        assert len(inbox.space()) == SIZE
        kept = len(inbox._buffer)
        assert (kept <= _KEEP) and (kept > SIZE if length < _KEEP else kept == SIZE)


def test_a_frame_above_the_limit_is_refused_before_it_is_buffered() -> None:
    inbox = Inbox(SIZE, 1000)
    space = inbox.space()
    space[:4] = (1001).to_bytes(4, "big")
    del space
    inbox.received(4)
    with pytest.raises(FrameTooLargeError):
        inbox.space()


async def test_answers_dribbled_over_tcp_arrive_intact() -> None:
    """A peer answering reads of every size (up to 3 MiB, more than the receive buffer)
    in odd-sized writes; every packet arrives whole, each to its request."""
    rng = random.Random(7)
    sizes = [rng.choice([10, 1500, SIZE, SIZE + 1, 300_000, 3 << 20]) for _ in range(40)]
    packets = {e: rng.randbytes(size) for e, size in enumerate(sizes)}

    async def handler(stream: anyio.abc.ByteStream) -> None:
        decoder = FrameDecoder()
        async with stream:
            while data := await _receive(stream):
                decoder.feed(data)
                out = b""
                while (frame := decoder.next_frame()) is not None:
                    m = decode_message(frame)
                    assert isinstance(m, ReadRequest)
                    out += encode_frame(
                        ReadResponse(
                            m.request_id,
                            StatusCode.OK,
                            m.ledger_id,
                            m.entry_id,
                            packets[m.entry_id],
                        )
                    )
                    out += encode_frame(AddResponse(10**6, StatusCode.OK, 1, 1))  # unknown id
                at = 0
                while at < len(out):
                    step = rng.choice([1, 3, 4, 5, 999, 70_000, 1 << 20])
                    await stream.send(out[at : at + step])
                    at += step

    got: dict[int, bytes] = {}
    done = trio.Event()

    class Reads:
        def on_response(self, tag: int, status: int, msg: object) -> None:
            assert status == 0 and isinstance(msg, ReadResponse)
            got[tag] = msg.packet
            if len(got) == len(packets):
                done.set()

        def on_error(self, tag: int, error: WalkitError) -> None:
            raise AssertionError(f"entry {tag}: {error}")

    net = TcpNetwork()
    async with trio.open_nursery() as nursery:
        bookie = await nursery.start(net.serve, "127.0.0.1", 0, handler)
        pool = ConnectionPool(net)
        await nursery.start(pool.run)
        conn = pool.get(bookie)
        reads = Reads()
        for entry_id in packets:
            rid = conn.new_request_id()
            conn.send((encode_read_request(rid, 1, entry_id),), rid, reads, entry_id, 30.0)
        with trio.fail_after(30):
            await done.wait()
        assert got == packets
        nursery.cancel_scope.cancel()


async def test_a_frame_above_the_limit_breaks_the_connection_with_a_clear_error() -> None:
    async def handler(stream: anyio.abc.ByteStream) -> None:
        async with stream:
            await stream.receive()
            await stream.send((5000).to_bytes(4, "big") + b"x" * 100)
            await trio.sleep_forever()

    errors: list[WalkitError] = []
    done = trio.Event()

    class Read:
        def on_response(self, tag: int, status: int, msg: object) -> None:
            raise AssertionError("no answer expected")

        def on_error(self, tag: int, error: WalkitError) -> None:
            errors.append(error)
            done.set()

    net = TcpNetwork()
    async with trio.open_nursery() as nursery:
        bookie: BookieId = await nursery.start(net.serve, "127.0.0.1", 0, handler)
        pool = ConnectionPool(net, max_frame_size=1000)
        await nursery.start(pool.run)
        conn = pool.get(bookie)
        rid = conn.new_request_id()
        conn.send((encode_read_request(rid, 1, 0),), rid, Read(), 0, 30.0)
        with trio.fail_after(30):
            await done.wait()
        assert isinstance(errors[0], BookieUnavailableError)
        assert "larger than the maximum 1000" in str(errors[0])
        nursery.cancel_scope.cancel()
