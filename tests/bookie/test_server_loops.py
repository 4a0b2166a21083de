"""A whole bookie in this process on every event loop it may run on: trio, asyncio, uvloop.

Real disk storage, the real server (walkit's raw sockets, the group commit's corked answers),
a client on the wire: pipelined adds all acknowledged and read back, a long poll answered when
the LAC moves, a slow first request cut off, a frame above the limit refused, and the bookie
serving on after each.
"""

from __future__ import annotations

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
