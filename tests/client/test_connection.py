"""The connection layer against a scripted peer speaking the wire protocol over SimNetwork.

The peer is not a bookie: it answers exactly as each test needs (out of order, never, or by
hanging up), which is what the connection's dispatch, deadlines and reconnects are about.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import anyio
import anyio.abc
import pytest
import trio
import trio.testing

from walkit._core.types import BookieId
from walkit._core.wire import (
    AddFlag,
    AddRequest,
    AddResponse,
    FrameDecoder,
    Message,
    ReadFlag,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    StatusCode,
    decode_message,
    encode_adds_into,
    encode_frame,
    encode_read_request,
)
from walkit.errors import (
    BookieTimeoutError,
    BookieUnavailableError,
    ClientClosedError,
    LocalProtocolError,
    WalkitError,
)
from walkit.net._pool import ConnectionPool
from walkit.testing import SimNetwork

# A peer answers a batch with messages, or "hangup" to close the connection instead.
Peer = Callable[[list[Message]], list[Message] | Literal["hangup"]]


class Recorder:
    def __init__(self) -> None:
        self.results: dict[int, tuple[int, WalkitError | None]] = {}
        self.done = trio.Event()
        self.expected = 0

    def on_response(self, tag: int, status: int, msg: object) -> None:
        self.results[tag] = (status, None)
        self._check()

    def on_error(self, tag: int, error: WalkitError) -> None:
        self.results[tag] = (-1, error)
        self._check()

    def _check(self) -> None:
        if len(self.results) >= self.expected:
            self.done.set()


async def _receive(stream: anyio.abc.ByteStream) -> bytes:
    """The next bytes of ``stream`` (b"" at its end)."""
    try:
        return await stream.receive()
    except anyio.EndOfStream:
        return b""


async def serve_peer(
    net: SimNetwork, nursery: trio.Nursery, answer: Peer, chunks: list[int] | None = None
) -> BookieId:
    """A peer that decodes whatever arrived in one receive and answers ``answer(batch)``."""

    async def handler(stream: trio.abc.Stream) -> None:
        decoder = FrameDecoder()
        async with stream:
            while True:
                try:
                    data = await stream.receive_some(1 << 20)
                except trio.BrokenResourceError:
                    return
                if not data:
                    return
                if chunks is not None:
                    chunks.append(len(data))
                decoder.feed(data)
                batch = []
                while (frame := decoder.next_frame()) is not None:
                    batch.append(decode_message(frame))
                replies = answer(batch)
                if replies == "hangup":
                    return
                if replies:
                    await stream.send_all(b"".join(encode_frame(m) for m in replies))

    bookie: BookieId = await nursery.start(net.serve, "bookie1", 0, handler)
    return bookie


def ack_all_reversed(batch: list[Message]) -> list[Message]:
    return [
        AddResponse(m.request_id, StatusCode.OK, m.ledger_id, m.entry_id)
        for m in reversed(batch)
        if isinstance(m, AddRequest)
    ]


def add_frame(rid: int, entry_id: int) -> tuple[bytes, bytes, bytes]:
    key = b"k" * 32
    packet = b"packet-%d" % entry_id
    parts: list[bytes] = []
    assert encode_adds_into(parts, rid, 9, key, [(entry_id, packet)]) == rid + 1
    prefix, key_part, packet_part = parts
    return prefix, key_part, packet_part


def test_read_request_matches_the_codec() -> None:
    assert encode_read_request(3, 4, 5) == encode_frame(ReadRequest(3, 4, 5))
    assert encode_read_request(3, 4, 5, ReadFlag.FENCE, b"k" * 32) == encode_frame(
        ReadRequest(3, 4, 5, ReadFlag.FENCE, b"k" * 32)
    )


def test_adds_into_match_the_codec() -> None:
    key = b"x" * 32
    entries = [(12, b"p" * 100), (13, b""), (14, b"q" * 70000)]
    for flags in (AddFlag.NONE, AddFlag.RECOVERY):
        parts: list[bytes] = [b"before"]
        assert encode_adds_into(parts, 77, 5, key, entries, flags) == 80
        assert parts[0] == b"before" and len(parts) == 1 + 3 * len(entries)
        assert parts[2] is key and parts[3] is entries[0][1]  # nothing copied
        expected = [
            encode_frame(AddRequest(77 + i, 5, entry, key, packet, flags))
            for i, (entry, packet) in enumerate(entries)
        ]
        assert b"".join(parts[1:]) == b"".join(expected)
    with pytest.raises(LocalProtocolError):
        encode_adds_into([], 1, 5, b"k" * 256, entries)


async def test_many_in_flight_dispatched_by_request_id_and_coalesced() -> None:
    net = SimNetwork(1)
    chunks: list[int] = []
    async with trio.open_nursery() as nursery:
        bookie = await serve_peer(net, nursery, ack_all_reversed, chunks)
        pool = ConnectionPool(net)
        await nursery.start(pool.run)
        conn = pool.get(bookie)
        rec = Recorder()
        rec.expected = 200
        for entry_id in range(200):
            rid = conn.new_request_id()
            conn.send(add_frame(rid, entry_id), rid, rec, entry_id, timeout=10)
        await rec.done.wait()
        assert rec.results == {e: (0, None) for e in range(200)}
        # All 200 frames were queued before the sender ran: one write carried them.
        assert conn.sends == 1
        assert len(chunks) <= 2
        nursery.cancel_scope.cancel()


async def test_call_times_out_and_connection_survives(
    autojump_clock: trio.testing.MockClock,
) -> None:
    net = SimNetwork(2)
    silent = {"on": True}

    def answer(batch: list[Message]) -> list[Message]:
        if silent["on"]:
            return []
        return [ReadLacResponse(m.request_id, StatusCode.OK, 1, 41) for m in batch]

    async with trio.open_nursery() as nursery:
        bookie = await serve_peer(net, nursery, answer)
        pool = ConnectionPool(net)
        await nursery.start(pool.run)
        conn = pool.get(bookie)
        with pytest.raises(BookieTimeoutError):
            await conn.call(lambda rid: ReadLacRequest(rid, 1), timeout=2.0)
        assert bookie in pool.failure_history
        silent["on"] = False
        resp = await conn.call(lambda rid: ReadLacRequest(rid, 1), timeout=2.0)
        assert isinstance(resp, ReadLacResponse) and resp.lac == 41
        assert conn.connects == 1  # a timeout does not drop the connection
        nursery.cancel_scope.cancel()


async def test_refused_then_reconnect_on_next_use(autojump_clock: trio.testing.MockClock) -> None:
    net = SimNetwork(3)
    async with trio.open_nursery() as nursery:
        bookie = await serve_peer(net, nursery, ack_all_reversed)
        pool = ConnectionPool(net)
        await nursery.start(pool.run)
        conn = pool.get(bookie)
        net.refuse("client", "bookie1")
        rec = Recorder()
        rec.expected = 3
        for entry_id in range(3):
            rid = conn.new_request_id()
            conn.send(add_frame(rid, entry_id), rid, rec, entry_id, timeout=10)
        await rec.done.wait()
        assert all(isinstance(err, BookieUnavailableError) for _, err in rec.results.values())
        net.heal()
        rec2 = Recorder()
        rec2.expected = 1
        rid = conn.new_request_id()
        conn.send(add_frame(rid, 5), rid, rec2, 5, timeout=10)
        await rec2.done.wait()
        assert rec2.results == {5: (0, None)}
        nursery.cancel_scope.cancel()


async def test_hangup_fails_pending_and_next_use_reconnects() -> None:
    net = SimNetwork(4)
    hang = {"on": True}

    def answer(batch: list[Message]) -> list[Message] | Literal["hangup"]:
        if hang["on"]:
            hang["on"] = False
            return "hangup"
        return ack_all_reversed(batch)

    async with trio.open_nursery() as nursery:
        bookie = await serve_peer(net, nursery, answer)
        pool = ConnectionPool(net)
        await nursery.start(pool.run)
        conn = pool.get(bookie)
        rec = Recorder()
        rec.expected = 2
        for entry_id in range(2):
            rid = conn.new_request_id()
            conn.send(add_frame(rid, entry_id), rid, rec, entry_id, timeout=10)
        await rec.done.wait()
        assert all(isinstance(err, BookieUnavailableError) for _, err in rec.results.values())
        resp = await conn.call(lambda rid: AddRequest(rid, 9, 3, b"k" * 32, b"p"), timeout=10)
        assert isinstance(resp, AddResponse) and resp.entry_id == 3
        assert conn.connects == 2
        nursery.cancel_scope.cancel()


async def test_pending_requests_fail_with_client_closed_on_shutdown() -> None:
    net = SimNetwork(5)
    rec = Recorder()
    rec.expected = 1
    arrived = trio.Event()

    def silent(batch: list[Message]) -> list[Message]:
        arrived.set()  # the request reached the peer, which never answers it
        return []

    async with trio.open_nursery() as nursery:
        bookie = await serve_peer(net, nursery, silent)
        pool_scope = trio.CancelScope()

        async def run_pool(task_status: trio.TaskStatus[None]) -> None:
            with pool_scope:
                await pool.run(task_status=task_status)

        pool = ConnectionPool(net)
        await nursery.start(run_pool)
        conn = pool.get(bookie)
        rid = conn.new_request_id()
        conn.send(add_frame(rid, 0), rid, rec, 0, timeout=10)
        with trio.fail_after(10):
            await arrived.wait()
        pool_scope.cancel()
        await rec.done.wait()
        assert isinstance(rec.results[0][1], ClientClosedError)
        with pytest.raises(ClientClosedError):
            pool.get(BookieId("127.0.0.1", 1))
        nursery.cancel_scope.cancel()


async def test_big_entries_over_tcp_arrive_intact() -> None:
    """Big entries take the scatter-gather path on real sockets; partial writes must resume at
    the right byte."""
    from walkit.net import TcpNetwork

    received: dict[int, bytes] = {}

    def answer(batch: list[Message]) -> list[Message]:
        for m in batch:
            assert isinstance(m, AddRequest)
            received[m.entry_id] = m.packet
        return ack_all_reversed(batch)

    net = TcpNetwork()
    async with trio.open_nursery() as nursery:

        async def handler(stream: anyio.abc.ByteStream) -> None:
            decoder = FrameDecoder()
            async with stream:
                while data := await _receive(stream):
                    decoder.feed(data)
                    batch = []
                    while (frame := decoder.next_frame()) is not None:
                        batch.append(decode_message(frame))
                    if batch:
                        await stream.send(b"".join(encode_frame(m) for m in answer(batch)))

        bookie = await nursery.start(net.serve, "127.0.0.1", 0, handler)
        pool = ConnectionPool(net)
        await nursery.start(pool.run)
        conn = pool.get(bookie)
        rec = Recorder()
        rec.expected = 60
        packets = [bytes([i]) * (64 * 1024 + i) for i in range(60)]
        conn.send_adds(9, b"k" * 32, list(enumerate(packets)), rec, 30.0, trio.current_time())
        await rec.done.wait()
        assert rec.results == {e: (0, None) for e in range(60)}
        assert received == dict(enumerate(packets))
        nursery.cancel_scope.cancel()
