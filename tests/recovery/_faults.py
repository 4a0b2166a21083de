"""A Network wrapper that drops chosen request frames on their way to a bookie.

For scenarios that need one message lost while others on the same connection get through
(a fence lost, a recovery read delivered), which link-level faults cannot express.
"""

from __future__ import annotations

from collections.abc import Callable

import anyio.abc

from walkit import BookieId
from walkit._core.wire import FrameDecoder, Message, decode_message
from walkit.net import ClientStream, Network, StreamHandler, TcpNetwork

DropRule = Callable[[BookieId, Message], bool]


class _FilteringStream(anyio.abc.ByteStream):
    def __init__(
        self, inner: ClientStream, bookie: BookieId, drop: DropRule, dropped: list[Message]
    ) -> None:
        self._inner = inner
        self._bookie = bookie
        self._drop = drop
        self._dropped = dropped
        self._decoder = FrameDecoder()

    async def send(self, item: bytes | bytearray | memoryview) -> None:
        self._decoder.feed(item)
        kept: list[bytes] = []
        while (body := self._decoder.next_frame()) is not None:
            message = decode_message(body)
            if self._drop(self._bookie, message):
                self._dropped.append(message)
            else:
                kept.append(len(body).to_bytes(4, "big") + body)
        if kept:
            await self._inner.send(b"".join(kept))

    async def receive(self, max_bytes: int = 65536) -> bytes:
        return await self._inner.receive(max_bytes)

    async def send_eof(self) -> None:
        await self._inner.send_eof()

    async def aclose(self) -> None:
        await self._inner.aclose()


class DroppingNetwork:
    """TCP, except that requests matching ``drop`` never leave this client."""

    def __init__(self, drop: DropRule, inner: Network | None = None) -> None:
        self._inner = inner or TcpNetwork()
        self.drop = drop
        self.dropped: list[Message] = []

    async def connect(self, address: BookieId) -> ClientStream:
        return _FilteringStream(
            await self._inner.connect(address), address, self.drop, self.dropped
        )

    async def serve(
        self,
        host: str,
        port: int,
        handler: StreamHandler,
        *,
        task_status: anyio.abc.TaskStatus[BookieId] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        await self._inner.serve(host, port, handler, task_status=task_status)
