"""Writing straight to an idle socket (walkit.net._direct): partial writes leave the rest, in
order, for the send task; nothing is lost or reordered when the socket fills up."""

from __future__ import annotations

import socket

import anyio
import anyio.abc
import trio.testing

from walkit.net._direct import direct_fd, unwritten, write_now
from walkit.net._socket import open_tcp_socket


def test_unwritten_keeps_the_rest_in_order() -> None:
    parts = [b"abc", b"defg", b"h"]
    assert unwritten(parts, 0) == parts
    assert unwritten(parts, 2) == [b"c", b"defg", b"h"]
    assert unwritten(parts, 3) == [b"defg", b"h"]
    assert unwritten(parts, 7) == [b"h"]
    assert unwritten(parts, 8) == []


def test_a_full_socket_takes_part_then_nothing() -> None:
    a, b = socket.socketpair()
    try:
        a.setblocking(False)
        a.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        big = bytes(range(256)) * 4096  # 1 MiB: more than the socket buffers hold
        parts = [big[:100], big[100:]]
        written = write_now(a.fileno(), parts)
        assert 0 < written < len(big)
        assert write_now(a.fileno(), unwritten(parts, written)) == 0  # full: would block
        received = bytearray()
        b.setblocking(False)
        while True:
            try:
                chunk = b.recv(1 << 20)
            except BlockingIOError:
                break
            received += chunk
        assert bytes(received) == big[:written]
    finally:
        a.close()
        b.close()
    assert write_now(a.fileno(), [b"x"]) == 0  # a closed descriptor: 0, never an exception


async def test_only_plain_tcp_streams_are_written_directly() -> None:
    """walkit's own socket streams (a client's, and each connection a bookie accepts) are
    written to directly; TLS, in-memory and other libraries' streams never are."""
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1")
    port = listener.extra(anyio.abc.SocketAttribute.local_port)
    async with listener:
        stream = await open_tcp_socket("127.0.0.1", port)
        async with stream:
            assert direct_fd(stream) == stream.socket.fileno()
        other = await anyio.connect_tcp("127.0.0.1", port)
        async with other:
            assert direct_fd(other) == -1
    left, _right = trio.testing.memory_stream_pair()
    assert direct_fd(left) == -1
