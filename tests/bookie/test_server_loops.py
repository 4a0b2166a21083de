"""A whole bookie in this process on every event loop it may run on: trio, asyncio, uvloop.

Real disk storage, the real server (walkit's raw sockets, the group commit's corked answers),
a client on the wire: pipelined adds all acknowledged and read back, a long poll answered when
the LAC moves, a slow first request cut off, a frame above the limit refused, and the bookie
serving on after each.

On asyncio a connection that has spoken is read from the loop's reader callback, and handed
back to its reader task when a deadline starts or room runs out: the second scenario drives
each of those hand-backs on a connection that has spoken.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

import anyio
import anyio.abc
import pytest

from tests._event_loops import EVENT_LOOPS, run_on
from tests.bookie._helpers import KEY, config, packet, payload_for
from walkit._core.types import BookieId
from walkit._core.wire import (
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
    Request,
    StatusCode,
    decode_message,
    encode_frame,
)
from walkit.net import TcpNetwork
from walkit_bookie import Bookie

#: Long enough for a loaded machine; a hang would blow it.
NO_HANG = 60.0
LEDGER = 7


class _Peer:
    """One wire connection: send requests, take answers by request id."""

    def __init__(self, stream: anyio.abc.ByteStream) -> None:
        self.stream = stream
        self._decoder = FrameDecoder(64 << 20)
        self._ready: dict[int, Message] = {}

    async def send(self, *requests: Request) -> None:
        await self.stream.send(b"".join(encode_frame(r) for r in requests))

    async def answer(self, request_id: int) -> Message:
        while request_id not in self._ready:
            self._decoder.feed(await self.stream.receive())
            while (body := self._decoder.next_frame()) is not None:
                message = decode_message(body)
                self._ready[message.request_id] = message
        return self._ready.pop(request_id)

    async def closed(self) -> bool:
        """Whether the bookie ends the connection (what it sent before is kept)."""
        try:
            while True:
                self._decoder.feed(await self.stream.receive())
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            return True


def _add(request_id: int, entry_id: int) -> AddRequest:
    data = packet(LEDGER, entry_id, payload_for(LEDGER, entry_id), lac=entry_id - 1)
    return AddRequest(request_id, LEDGER, entry_id, KEY, data, AddFlag.NONE)


async def _scenario(data: Path) -> dict[str, object]:
    seen: dict[str, object] = {}
    cfg = config([data], first_request_timeout=0.5, max_frame_size=1 << 20)
    bookie = Bookie(cfg)
    network = TcpNetwork()
    with anyio.fail_after(NO_HANG):
        async with anyio.create_task_group() as tasks:
            bid: BookieId = await tasks.start(bookie.run)
            async with await network.connect(bid) as stream:
                peer = _Peer(stream)
                # Pipelined adds, one send: every one acknowledged.
                await peer.send(*(_add(e + 1, e) for e in range(500)))
                seen["adds"] = [await peer.answer(e + 1) for e in range(500)]
                # A long poll waits until the LAC passes the one it has.
                await peer.send(ReadLacRequest(1000, LEDGER, ReadLacFlag.LONG_POLL, 498, 30_000))
                with anyio.move_on_after(0.2):
                    await peer.answer(1000)
                    seen["poll_early"] = True
                await peer.send(_add(1001, 500))
                add = await peer.answer(1001)
                poll = await peer.answer(1000)
                seen["late_add"] = add
                seen["poll"] = poll
                # Reads back.
                await peer.send(ReadRequest(1002, LEDGER, 250, ReadFlag.NONE, b""))
                seen["read"] = await peer.answer(1002)
            # A peer that never sends a request is cut off.
            async with await network.connect(bid) as silent:
                seen["silent_closed"] = await _Peer(silent).closed()
            # A frame above the limit is refused, and the connection closed.
            async with await network.connect(bid) as big:
                peer = _Peer(big)
                await big.send((2 << 20).to_bytes(4, "big") + b"\x00" * 1024)
                refusal = await peer.answer(0)
                seen["refusal"] = refusal
            # The bookie serves on.
            async with await network.connect(bid) as stream:
                peer = _Peer(stream)
                await peer.send(ReadRequest(1, LEDGER, 500, ReadFlag.NONE, b""))
                seen["after"] = await peer.answer(1)
            tasks.cancel_scope.cancel()
    return seen


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_a_bookie_serves_on_each_event_loop(loop: str, tmp_path: Path) -> None:
    seen = run_on(loop, _scenario, tmp_path / "bookie")
    adds = seen["adds"]
    assert isinstance(adds, list) and len(adds) == 500
    assert all(isinstance(a, AddResponse) and a.status is StatusCode.OK for a in adds)
    assert "poll_early" not in seen  # the long poll waited
    late, poll = seen["late_add"], seen["poll"]
    assert isinstance(late, AddResponse) and late.status is StatusCode.OK
    assert isinstance(poll, ReadLacResponse) and poll.status is StatusCode.OK and poll.lac == 499
    read = seen["read"]
    assert isinstance(read, ReadResponse) and read.status is StatusCode.OK
    assert read.packet == packet(LEDGER, 250, payload_for(LEDGER, 250), lac=249)
    assert seen["silent_closed"] is True
    refusal = seen["refusal"]
    assert isinstance(refusal, ErrorResponse) and "frame" in refusal.message
    after = seen["after"]
    assert isinstance(after, ReadResponse) and after.entry_id == 500


async def _until(predicate: Callable[[], bool]) -> None:
    while not predicate():  # noqa: ASYNC110 (polls a counter of the bookie's)
        await anyio.sleep(0.01)


async def _spoken(network: TcpNetwork, bid: BookieId, entry_id: int) -> _Peer:
    """A connection that has had an add answered (so the reader callback serves it)."""
    peer = _Peer(await network.connect(bid))
    await peer.send(_add(1, entry_id))
    answer = await peer.answer(1)
    assert isinstance(answer, AddResponse) and answer.status is StatusCode.OK
    return peer


async def _hand_backs(data: Path) -> dict[str, object]:
    seen: dict[str, object] = {}
    cfg = config(
        [data],
        frame_timeout=0.5,
        max_frame_size=1 << 20,
        max_unsent_bytes=1 << 20,
        max_partial_frame_bytes=300 << 10,
    )
    bookie = Bookie(cfg)
    network = TcpNetwork()
    big = b"b" * (200 << 10)
    with anyio.fail_after(NO_HANG):
        async with anyio.create_task_group() as tasks:
            bid: BookieId = await tasks.start(bookie.run)
            # A frame begun and never finished: cut off after frame_timeout.
            peer = await _spoken(network, bid, 0)
            await peer.stream.send(encode_frame(_add(2, 1))[:40])
            seen["unfinished_closed"] = await peer.closed()
            # A frame trickled in a byte at a time: each byte comes in time, the frame does
            # not; cut off once it has taken frame_timeout (not 0.05 s after its last byte).
            peer = await _spoken(network, bid, 11)
            trickled = 0
            try:
                for byte in encode_frame(_add(2, 12)):
                    await peer.stream.send(bytes([byte]))
                    trickled += 1
                    await anyio.sleep(0.05)
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            seen["trickled_seconds"] = trickled * 0.05
            # A frame above the limit: refused, and closed.
            peer = await _spoken(network, bid, 1)
            await peer.stream.send((2 << 20).to_bytes(4, "big") + b"\x00" * 1024)
            seen["too_big"] = await peer.answer(0)
            seen["too_big_closed"] = await peer.closed()
            # Two big frames held in part, over the bookie's budget for them: the second
            # is refused.
            first = await _spoken(network, bid, 2)
            second = await _spoken(network, bid, 3)
            frame = encode_frame(AddRequest(2, LEDGER, 9, KEY, big + big, AddFlag.NONE))
            await first.stream.send(frame[: 200 << 10])
            await _until(lambda: bookie.handler.stats.partial_frame_bytes >= 200 << 10)
            await second.stream.send(frame[: 200 << 10])
            seen["over_budget"] = await second.answer(0)
            await first.stream.aclose()
            await _until(lambda: bookie.handler.stats.partial_frame_bytes == 0)
            # Reads of a big entry asked in one chunk by a peer that reads nothing: the
            # bookie stops taking them at max_unsent_bytes, and answers every one as the peer
            # reads.
            writer = await _spoken(network, bid, 4)
            entry = packet(LEDGER, 5, big, lac=4)
            await writer.send(AddRequest(2, LEDGER, 5, KEY, entry, AddFlag.NONE))
            added = await writer.answer(2)
            assert isinstance(added, AddResponse) and added.status is StatusCode.OK
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect((bid.host, bid.port))
            async with await anyio.abc.SocketStream.from_socket(sock) as reader_stream:
                reader = _Peer(reader_stream)
                await reader.send(_add(1, 6))
                spoke = await reader.answer(1)
                assert isinstance(spoke, AddResponse) and spoke.status is StatusCode.OK
                await reader.send(
                    *(ReadRequest(10 + i, LEDGER, 5, ReadFlag.NONE, b"") for i in range(200))
                )
                await _until(lambda: bookie.handler.stats.stalled_connections > 0)
                seen["reads"] = [await reader.answer(10 + i) for i in range(200)]
                seen["entry"] = entry
            # A peer that half-closes after its requests still gets their answers.
            peer = await _spoken(network, bid, 7)
            await peer.send(*(_add(2 + i, 8 + i) for i in range(50)))
            await peer.stream.send_eof()
            seen["after_eof"] = [await peer.answer(2 + i) for i in range(50)]
            for left_open in (second, writer, peer):
                await left_open.stream.aclose()
            tasks.cancel_scope.cancel()
    return seen


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_a_spoken_connection_keeps_every_bound_on_each_event_loop(
    loop: str, tmp_path: Path
) -> None:
    seen = run_on(loop, _hand_backs, tmp_path / "bookie")
    assert seen["unfinished_closed"] is True
    trickled = seen["trickled_seconds"]
    assert isinstance(trickled, float) and trickled < 3, trickled  # (the frame takes ~11 s)
    too_big = seen["too_big"]
    assert isinstance(too_big, ErrorResponse) and "frame" in too_big.message
    assert seen["too_big_closed"] is True
    over = seen["over_budget"]
    assert isinstance(over, ErrorResponse) and over.status is StatusCode.TOO_MANY_REQUESTS
    reads = seen["reads"]
    assert isinstance(reads, list) and len(reads) == 200
    assert all(isinstance(r, ReadResponse) and r.packet == seen["entry"] for r in reads)
    after_eof = seen["after_eof"]
    assert isinstance(after_eof, list) and len(after_eof) == 50
    assert all(isinstance(a, AddResponse) and a.status is StatusCode.OK for a in after_eof)
