"""walkit.net._socket.SocketStream on each event loop: what TLS runs over. Data comes whole
and in order whether a receive waits or reads at once, a cancelled receive loses nothing,
closing wakes a waiting receive, the end of stream is told, and a socket handed over to
another reader keeps working after the stream read from it."""

from __future__ import annotations

import socket

import anyio
import pytest
from anyio.abc import SocketAttribute

from tests._event_loops import EVENT_LOOPS, run_on
from walkit._loop import current_loop
from walkit.net._receive import Receiver
from walkit.net._socket import SocketStream

pytestmark = pytest.mark.parametrize("loop", EVENT_LOOPS)


def _pair() -> tuple[SocketStream, socket.socket]:
    ours, peer = socket.socketpair()
    ours.setblocking(False)
    return SocketStream(ours), peer


async def _everything_in_order() -> None:
    stream, peer = _pair()
    with peer:
        data = bytes(range(256)) * 1000  # more than one receive's worth: reads at once too
        got = bytearray()
        async with anyio.create_task_group() as tasks:

            async def send() -> None:
                for at in range(0, len(data), 7000):
                    await anyio.to_thread.run_sync(peer.sendall, data[at : at + 7000])
                peer.shutdown(socket.SHUT_WR)

            tasks.start_soon(send)
            while True:
                try:
                    got += await stream.receive(4096)
                except anyio.EndOfStream:
                    break
        assert got == data
        await stream.aclose()


def test_data_comes_whole_and_in_order_then_the_end(loop: str) -> None:
    run_on(loop, _everything_in_order)


async def _cancelled_then_closed() -> None:
    stream, peer = _pair()
    with peer:
        with anyio.move_on_after(0.05) as scope:
            await stream.receive()
        assert scope.cancelled_caught
        peer.sendall(b"after the cancel")
        assert await stream.receive() == b"after the cancel"
        # Closing the stream wakes a receive that waits on it.
        failed: list[BaseException] = []

        async def receive() -> None:
            try:
                await stream.receive()
            except anyio.ClosedResourceError as exc:
                failed.append(exc)

        with anyio.fail_after(5):
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(receive)
                await anyio.wait_all_tasks_blocked()
                await stream.aclose()
        assert len(failed) == 1
        with pytest.raises(anyio.ClosedResourceError):
            await stream.receive()


def test_a_cancelled_receive_loses_nothing_and_closing_wakes_a_waiting_one(loop: str) -> None:
    run_on(loop, _cancelled_then_closed)


async def _handed_over() -> None:
    stream, peer = _pair()
    with peer:
        peer.sendall(b"auth answer")
        assert await stream.receive() == b"auth answer"  # (the stream now watches the socket)
        sock = stream.extra(SocketAttribute.raw_socket)
        receiver = Receiver(sock, current_loop(), keep_registered=True)
        buffer = bytearray(64)
        for word in (b"one", b"two", b"three"):
            peer.sendall(word)
            with anyio.fail_after(5):
                count = await receiver.receive_into(buffer)
            assert bytes(buffer[:count]) == word
        receiver.close()
        await stream.aclose()


def test_a_socket_handed_over_after_a_receive_serves_its_new_reader(loop: str) -> None:
    run_on(loop, _handed_over)
