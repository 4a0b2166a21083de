"""A Network wrapper that drops chosen request frames on their way to a bookie.

For scenarios that need one message lost while others on the same connection get through
(a fence lost, a recovery read delivered), which link-level faults cannot express.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from walkit import BookieId
from walkit._core.wire import FrameDecoder, Message, decode_message
from walkit.net import Network, StreamHandler, TcpNetwork

DropRule = Callable[[BookieId, Message], bool]


class _FilteringStream(trio.abc.Stream):
    def __init__(
        self, inner: trio.abc.Stream, bookie: BookieId, drop: DropRule, dropped: list[Message]
    ) -> None:
        self._inner = inner
        self._bookie = bookie
        self._drop = drop
        self._dropped = dropped
        self._decoder = FrameDecoder()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self._decoder.feed(data)
        kept: list[bytes] = []
        while (body := self._decoder.next_frame()) is not None:
            message = decode_message(body)
            if self._drop(self._bookie, message):
                self._dropped.append(message)
            else:
                kept.append(len(body).to_bytes(4, "big") + body)
        if kept:
            await self._inner.send_all(b"".join(kept))

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self._inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self._inner.aclose()


class DroppingNetwork:
    """TCP, except that requests matching ``drop`` never leave this client."""

    def __init__(self, drop: DropRule, inner: Network | None = None) -> None:
        self._inner = inner or TcpNetwork()
        self.drop = drop
        self.dropped: list[Message] = []

    async def connect(self, address: BookieId) -> trio.abc.Stream:
        return _FilteringStream(
            await self._inner.connect(address), address, self.drop, self.dropped
        )

    async def serve(
        self,
        host: str,
        port: int,
        handler: StreamHandler,
        *,
        task_status: trio.TaskStatus[BookieId] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        await self._inner.serve(host, port, handler, task_status=task_status)
