"""walkit.net._receive: waiting first after a drained socket, trying first after a full
buffer or a wait; data arriving later, end of stream, a reset, and cancellation while
waiting."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Callable

import pytest
import trio
import trio.testing

from walkit.net._receive import Receiver


def pair() -> tuple[trio.socket.SocketType, socket.socket]:
    a, b = socket.socketpair()
    return trio.socket.from_stdlib_socket(a), b


async def test_a_receive_waits_for_data_that_comes_later() -> None:
    sock, peer = pair()
    with sock, peer:
        receiver = Receiver(sock)
        buffer = bytearray(64)
        got: list[int] = []

        async def receive() -> None:
            got.append(await receiver.receive_into(buffer))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            await trio.testing.wait_all_tasks_blocked()
            assert got == []  # parked on the socket, not spinning
            peer.send(b"hello")
        assert got == [5]
        assert bytes(buffer[:5]) == b"hello"


async def test_a_full_buffer_is_followed_by_the_rest_in_order() -> None:
    sock, peer = pair()
    with sock, peer:
        receiver = Receiver(sock)
        data = bytes(range(256)) * 40
        peer.sendall(data)
        out = bytearray()
        buffer = bytearray(1000)
        while len(out) < len(data):
            count = await receiver.receive_into(buffer)
            assert count > 0
            out += buffer[:count]
        assert out == data


async def test_the_end_of_the_stream_gives_zero() -> None:
    sock, peer = pair()
    with sock:
        receiver = Receiver(sock)
        peer.send(b"last")
        peer.close()
        buffer = bytearray(64)
        assert await receiver.receive_into(buffer) == 4
        assert await receiver.receive_into(buffer) == 0


async def test_a_reset_raises_oserror() -> None:
    listener = trio.socket.socket()
    with listener:
        await listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        peer = socket.create_connection(listener.getsockname())
        sock, _ = await listener.accept()
        with sock:
            # SO_LINGER 0: close sends a reset.
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            peer.close()
            with pytest.raises(OSError):
                receiver = Receiver(sock)
                while await receiver.receive_into(bytearray(64)):
                    pass


async def test_a_waiting_receive_can_be_cancelled() -> None:
    sock, peer = pair()
    with sock, peer:
        receiver = Receiver(sock)
        with trio.move_on_after(0.05) as scope:
            await receiver.receive_into(bytearray(64))
        assert scope.cancelled_caught
        peer.send(b"after")
        buffer = bytearray(64)
        assert await receiver.receive_into(buffer) == 5


async def test_after_waiting_for_the_socket_the_receive_reads_at_once() -> None:
    sock, peer = pair()
    with sock, peer:
        receiver = Receiver(sock)
        peer.send(b"ready")
        await receiver.wait_readable()
        buffer = bytearray(64)
        assert await receiver.receive_into(buffer) == 5
        assert bytes(buffer[:5]) == b"ready"


def _asyncio_loop_factories() -> list[object]:
    factories: list[object] = [asyncio.new_event_loop]
    try:
        import uvloop
    except ImportError:
        return factories
    return [*factories, uvloop.new_event_loop]


@pytest.mark.parametrize("factory", _asyncio_loop_factories())
def test_a_kept_registration_on_asyncio_receives_in_order_and_is_gone_after_close(
    factory: Callable[[], asyncio.AbstractEventLoop],
) -> None:
    """A server's reader keeps its socket watched between waits: each wait still sees new
    data, data arriving while nobody waits is not lost (nor polled in a loop: the watch is
    dropped), and close leaves nothing watched."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sock, peer = socket.socketpair()
        sock.setblocking(False)
        with sock, peer:
            receiver = Receiver(sock, keep_registered=True)
            buffer = bytearray(64)
            for word in (b"one", b"two", b"three"):
                task = asyncio.ensure_future(receiver.receive_into(buffer))
                await asyncio.sleep(0)
                assert not task.done()  # parked on the socket
                peer.send(word)
                assert bytes(buffer[: await task]) == word
            peer.send(b"unwaited")
            for _ in range(3):  # passes of the loop with the socket readable and no wait
                await asyncio.sleep(0)
            assert not loop.remove_reader(sock.fileno())  # the watch was dropped
            assert bytes(buffer[: await receiver.receive_into(buffer)]) == b"unwaited"
            receiver.close()
            assert not loop.remove_reader(sock.fileno())

    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())
