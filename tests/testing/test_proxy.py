"""``walkit.testing.FaultProxy`` over real TCP: bytes and EOF forwarded both ways, delay and
jitter (order kept), bandwidth caps, half-open stalls, resets, refused upstreams, bad input.

Durations are checked from below only (a fault cannot make things faster): a loaded machine
makes them longer, never shorter.
"""

from __future__ import annotations

import functools
import random
import socket
from collections.abc import Awaitable, Callable

import pytest
import trio

from walkit.errors import InvalidArgumentError
from walkit.testing import FaultProxy


async def _echo(stream: trio.SocketStream) -> None:
    """Echo until EOF, then half-close."""
    async with stream:
        try:
            async for data in stream:
                await stream.send_all(data)
            await stream.send_eof()
        except trio.BrokenResourceError:
            pass


async def _server(
    nursery: trio.Nursery, handler: Callable[[trio.SocketStream], Awaitable[None]] = _echo
) -> tuple[str, int]:
    listeners = await nursery.start(functools.partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    host, port = listeners[0].socket.getsockname()[:2]
    return str(host), int(port)


async def _receive_exactly(stream: trio.SocketStream, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = await stream.receive_some(size - len(data))
        if not chunk:
            break
        data += chunk
    return bytes(data)


async def test_bytes_and_eof_go_both_ways_with_delay_and_jitter_in_order() -> None:
    async with trio.open_nursery() as nursery:
        upstream = await _server(nursery)
        with FaultProxy(upstream, rng=random.Random(3)) as proxy:
            stream = await trio.open_tcp_stream(*proxy.address)
            async with stream:
                await stream.send_all(b"hello")
                assert await _receive_exactly(stream, 5) == b"hello"
                proxy.delay(0.05, jitter=0.2)  # jitter far above the gap between chunks
                sent = [b"%04d" % i for i in range(200)]
                started = trio.current_time()
                for piece in sent:
                    await stream.send_all(piece)
                    await trio.sleep(0.001)
                echoed = await _receive_exactly(stream, 800)
                assert echoed == b"".join(sent)  # nothing overtook anything
                assert trio.current_time() - started >= 0.1  # delayed on the way and back
                await stream.send_eof()
                assert await stream.receive_some(10) == b""  # the server's EOF came back
            assert proxy.accepted == 1
            assert proxy.delivered == {"upstream": 805, "downstream": 805}
        nursery.cancel_scope.cancel()


async def test_a_fault_set_while_bytes_wait_in_the_proxy_applies_to_them() -> None:
    async with trio.open_nursery() as nursery:
        upstream = await _server(nursery)
        with FaultProxy(upstream, rng=random.Random(5)) as proxy:
            stream = await trio.open_tcp_stream(*proxy.address)
            async with stream:
                proxy.delay(2.0, direction="downstream")
                started = trio.current_time()
                await stream.send_all(b"a")
                with trio.fail_after(10):
                    while proxy.delivered["upstream"] < 1:  # noqa: ASYNC110 (the proxy's thread)
                        await trio.sleep(0.01)
                proxy.delay(4.0, direction="downstream")  # the echo waits in the proxy
                assert await _receive_exactly(stream, 1) == b"a"
                assert trio.current_time() - started >= 3.5
                proxy.delay(2.0, direction="downstream")
                await stream.send_all(b"b")
                with trio.fail_after(10):
                    while proxy.delivered["upstream"] < 2:  # noqa: ASYNC110 (the proxy's thread)
                        await trio.sleep(0.01)
                proxy.stall(direction="downstream")  # the echo of b is never delivered
                with trio.fail_after(10):
                    while proxy.dropped["downstream"] < 1:  # noqa: ASYNC110 (the proxy's thread)
                        await trio.sleep(0.01)
                assert proxy.delivered["downstream"] == 1
        nursery.cancel_scope.cancel()


async def test_bandwidth_is_capped_per_direction() -> None:
    async with trio.open_nursery() as nursery:
        upstream = await _server(nursery)
        with FaultProxy(upstream, rng=random.Random(1)) as proxy:
            proxy.limit_bandwidth(100_000, direction="downstream")
            stream = await trio.open_tcp_stream(*proxy.address)
            async with stream:
                payload = bytes(range(256)) * 800  # 204,800 bytes: 2 s at 100 kB/s
                started = trio.current_time()
                async with trio.open_nursery() as inner:
                    inner.start_soon(stream.send_all, payload)
                    echoed = await _receive_exactly(stream, len(payload))
                assert echoed == payload
                assert trio.current_time() - started >= 1.5
                proxy.heal()
                started = trio.current_time()
                async with trio.open_nursery() as inner:
                    inner.start_soon(stream.send_all, payload)
                    assert await _receive_exactly(stream, len(payload)) == payload
        nursery.cancel_scope.cancel()


async def test_a_stall_accepts_bytes_and_delivers_none_and_heal_resets_its_connections() -> None:
    received: list[bytes] = []

    async def collect(stream: trio.SocketStream) -> None:
        async with stream:
            try:
                async for data in stream:
                    received.append(bytes(data))
            except trio.BrokenResourceError:
                received.append(b"<reset>")

    async with trio.open_nursery() as nursery:
        upstream = await _server(nursery, collect)
        with FaultProxy(upstream, rng=random.Random(1)) as proxy:
            stalled = await trio.open_tcp_stream(*proxy.address)
            await stalled.send_all(b"before")
            with trio.fail_after(10):
                while proxy.delivered["upstream"] < 6:  # noqa: ASYNC110 (the proxy's thread)
                    await trio.sleep(0.01)
            proxy.stall(direction="upstream")
            await stalled.send_all(b"lost in the stall")  # the sender sees it go
            with trio.fail_after(10):
                while proxy.dropped["upstream"] < 17:  # noqa: ASYNC110 (the proxy's thread)
                    await trio.sleep(0.01)
            assert b"".join(received) == b"before"  # taken by the proxy, never delivered
            proxy.heal()  # the stalled connection lost bytes: it is reset
            with pytest.raises(trio.BrokenResourceError):
                with trio.fail_after(10):
                    await stalled.receive_some(10)
            await stalled.aclose()
            fresh = await trio.open_tcp_stream(*proxy.address)
            async with fresh:
                await fresh.send_all(b"after")
                with trio.fail_after(10):
                    while b"after" not in b"".join(received):  # noqa: ASYNC110
                        await trio.sleep(0.01)
            assert proxy.open_connections <= 1
        nursery.cancel_scope.cancel()


async def test_reset_sends_a_rst_to_both_sides_and_new_connections_go_on() -> None:
    async with trio.open_nursery() as nursery:
        upstream = await _server(nursery)
        with FaultProxy(upstream, rng=random.Random(1)) as proxy:
            stream = await trio.open_tcp_stream(*proxy.address)
            await stream.send_all(b"x")
            assert await _receive_exactly(stream, 1) == b"x"
            proxy.reset()
            with pytest.raises(trio.BrokenResourceError):
                with trio.fail_after(10):
                    await stream.receive_some(10)
            await stream.aclose()
            again = await trio.open_tcp_stream(*proxy.address)
            async with again:
                await again.send_all(b"y")
                assert await _receive_exactly(again, 1) == b"y"
        nursery.cancel_scope.cancel()


async def test_an_upstream_that_refuses_is_a_reset_for_the_client() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]  # nothing listens there once closed
    with FaultProxy(("127.0.0.1", closed_port), rng=random.Random(1)) as proxy:
        try:
            stream = await trio.open_tcp_stream(*proxy.address)
        except OSError:
            return  # the reset came before connect() returned: a reset all the same
        async with stream:
            with trio.fail_after(10):
                try:
                    data = await stream.receive_some(10)
                except trio.BrokenResourceError:
                    data = b""
            assert data == b""
        assert proxy.accepted == 1 and proxy.delivered == {"upstream": 0, "downstream": 0}


def test_bad_faults_and_a_taken_port_are_refused_clearly() -> None:
    with FaultProxy(("127.0.0.1", 9), rng=random.Random(1)) as proxy:
        with pytest.raises(InvalidArgumentError, match="direction"):
            proxy.delay(0.1, direction="sideways")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="delay"):
            proxy.delay(-1)
        with pytest.raises(InvalidArgumentError, match="jitter"):
            proxy.delay(0.1, jitter=float("nan"))
        with pytest.raises(InvalidArgumentError, match="bandwidth"):
            proxy.limit_bandwidth(0)
        with pytest.raises(OSError):
            FaultProxy(("127.0.0.1", 9), listen=proxy.address, rng=random.Random(1)).start()
        with pytest.raises(InvalidArgumentError, match="started already"):
            proxy.start()
    with pytest.raises(InvalidArgumentError, match="not started"):
        _ = FaultProxy(("127.0.0.1", 9), rng=random.Random(1)).address
