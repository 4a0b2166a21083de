"""The KV service's HTTP server (examples/kv_http.py) against peers that hold it without using
it: a connection cap answered 503, keep-alive connections closed after their idle timeout, and
slow requests cut off with 408. Found by an attack from outside: ~20k idle connections hit the
open-file limit, printed tracebacks and cost the leader its session."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from kv_http import Limits, Request, Response, Stats, default_max_connections, serve

#: An answer larger than loopback's socket buffers can hold: a peer that reads none of it
#: keeps the server sending.
_BIG = 32 << 20


class _Echo:
    """Echoes the body; ``/hold`` waits for ``release`` first (a busy handler), and ``/big``
    answers ``_BIG`` bytes."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.running = 0

    async def __call__(self, request: Request) -> Response:
        if request.path == "/big":
            return Response(200, b"x" * _BIG)
        if request.path == "/hold":
            self.running += 1
            try:
                await self.release.wait()
            finally:
                self.running -= 1
        return Response(200, request.body or b"ok")


@asynccontextmanager
async def _server(limits: Limits, handler: _Echo | None = None) -> AsyncIterator[tuple[int, Stats]]:
    stats = Stats()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            lambda task_status: serve(
                handler or _Echo(),
                "127.0.0.1",
                0,
                max_body=1024,
                limits=limits,
                stats=stats,
                task_status=task_status,
            )
        )
        try:
            yield port, stats
        finally:
            nursery.cancel_scope.cancel()


async def _read_all(stream: trio.SocketStream, timeout: float = 10) -> bytes:
    """Everything the server sends until it closes."""
    out = b""
    with trio.fail_after(timeout):
        while chunk := await stream.receive_some(65536):
            out += chunk
    return out


async def _ask(stream: trio.SocketStream) -> bytes:
    """Send a GET on ``stream`` and return its whole answer (the connection stays open)."""
    await stream.send_all(_get())
    got = b""
    with trio.fail_after(10):
        while not got.endswith(b"ok"):
            got += await stream.receive_some(65536)
    return got


async def _until(predicate: Callable[[], bool]) -> None:
    """Poll the server's counters (they change just after the events the test causes)."""
    with trio.fail_after(10):
        while not predicate():  # noqa: ASYNC110 (polls counters)
            await trio.sleep(0.01)


def _reading(stats: Stats) -> int:
    """Connections whose request is arriving."""
    return sum(slot.reading for slot in stats.slots)


def _get(body: bytes = b"") -> bytes:
    method = b"PUT" if body else b"GET"
    return method + b" /x HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n\r\n" % len(body) + body


async def test_an_idle_keep_alive_connection_is_closed() -> None:
    async with _server(Limits(idle_timeout=0.5)) as (port, stats):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(_get())
        answer = await _read_all(stream)  # the answer, then the close after 0.5 s idle
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")
        await _until(lambda: not stats.open)
        assert stats.idle_closed == 1
        await stream.aclose()


async def test_a_request_sent_too_slowly_is_answered_408() -> None:
    async with _server(Limits(request_timeout=0.5)) as (port, stats):
        slow = await trio.open_tcp_stream("127.0.0.1", port)
        await slow.send_all(b"GET /x HTTP/1.1\r\n")
        answer = b""
        with trio.fail_after(10):
            for _ in range(100):  # one header byte every 0.1 s: never done in time
                try:
                    await slow.send_all(b"x")
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    break
                await trio.sleep(0.1)
                if stats.timed_out:
                    break
        answer = await _read_all(slow)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b"request not received whole" in answer
        assert stats.timed_out == 1
        await slow.aclose()
        # A request sent in pieces within the timeout is served.
        steady = await trio.open_tcp_stream("127.0.0.1", port)
        request = _get(b"hello")
        for at in range(0, len(request), 20):
            await steady.send_all(request[at : at + 20])
            await trio.sleep(0.05)
        with trio.fail_after(10):
            got = b""
            while not got.endswith(b"hello"):
                got += await steady.receive_some(65536)
        assert got.startswith(b"HTTP/1.1 200")
        await steady.aclose()


async def test_connections_over_the_cap_get_503_when_all_are_busy() -> None:
    handler = _Echo()
    async with _server(Limits(max_connections=3, idle_timeout=30), handler) as (port, stats):
        held = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(3)]
        for stream in held:  # each with its handler running: busy, so never closed for room
            await stream.send_all(b"GET /hold HTTP/1.1\r\nhost: t\r\n\r\n")
        await _until(lambda: handler.running == 3)
        extra = await trio.open_tcp_stream("127.0.0.1", port)
        answer = await _read_all(extra)
        assert answer.startswith(b"HTTP/1.1 503"), answer
        assert b"retry-after: 1" in answer and b"too many connections (limit 3)" in answer
        assert stats.refused == 1 and stats.evicted == 0
        await extra.aclose()
        handler.release.set()
        for stream in held:  # each still gets its answer
            got = b""
            with trio.fail_after(10):
                while not got.endswith(b"ok"):
                    got += await stream.receive_some(65536)
            assert got.startswith(b"HTTP/1.1 200")
        again = await trio.open_tcp_stream("127.0.0.1", port)
        got = await _ask(again)  # closes one of the now idle ones
        assert got.startswith(b"HTTP/1.1 200") and stats.evicted == 1
        for s in [*held, again]:
            await s.aclose()


def test_the_default_cap_leaves_file_descriptors_for_the_rest() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = default_max_connections()
    assert 16 <= cap <= 1024
    if soft != resource.RLIM_INFINITY:
        assert cap <= max(16, soft // 2)


async def test_at_the_cap_a_newcomer_closes_the_connection_idle_longest() -> None:
    """The re-attack held all 1,024 slots with keep-alive connections sending a request every
    25 s (never idle 30 s), and clients got 503s. A newcomer now closes the one idle longest
    between requests, else the one whose request has been arriving longest (a slowloris),
    whatever its age: one that reconnects at once keeps its connections young."""
    async with _server(Limits(max_connections=2, idle_timeout=30)) as (port, stats):
        oldest = await trio.open_tcp_stream("127.0.0.1", port)
        await oldest.send_all(_get())
        await trio.sleep(0.2)
        slow = await trio.open_tcp_stream("127.0.0.1", port)
        await slow.send_all(b"GET /x HTTP/1.1\r\n")  # and no more
        await _until(lambda: _reading(stats) >= 1 and stats.open >= 2)
        newcomer = await trio.open_tcp_stream("127.0.0.1", port)
        got = await _ask(newcomer)
        assert got.startswith(b"HTTP/1.1 200")
        answer = await _read_all(oldest)  # its answer, then closed for the newcomer
        assert answer.startswith(b"HTTP/1.1 200") and stats.evicted == 1
        # With none idle, the request arriving longest goes, however young.
        await newcomer.aclose()
        await oldest.aclose()
        await _until(lambda: stats.open <= 1)
        recent = await trio.open_tcp_stream("127.0.0.1", port)
        await recent.send_all(b"GET /x HTTP/1.1\r\n")
        await _until(lambda: _reading(stats) >= 2)
        fresh = await trio.open_tcp_stream("127.0.0.1", port)
        got = await _ask(fresh)
        assert await _read_all(slow) == b"" and stats.evicted == 2 and stats.refused == 0
        await recent.send_all(b"host: t\r\n\r\n")  # still there: it finishes its request
        with trio.fail_after(10):
            assert (await recent.receive_some(65536)).startswith(b"HTTP/1.1 200")
        for s in (slow, recent, fresh):
            await s.aclose()


async def test_at_the_cap_a_peer_that_does_not_take_its_answer_is_closed() -> None:
    """After idle and arriving ones, a connection whose peer leaves its answer untaken is the
    next to go; one whose handler is running never is."""
    handler = _Echo()
    async with _server(Limits(max_connections=2, idle_timeout=30), handler) as (port, stats):
        busy = await trio.open_tcp_stream("127.0.0.1", port)
        await busy.send_all(b"GET /hold HTTP/1.1\r\nhost: t\r\n\r\n")
        await _until(lambda: handler.running == 1)
        stuck = await trio.open_tcp_stream("127.0.0.1", port)
        await stuck.send_all(b"GET /big HTTP/1.1\r\nhost: t\r\n\r\n")  # and reads nothing
        await _until(lambda: any(slot.state == "sending" for slot in stats.slots))
        newcomer = await trio.open_tcp_stream("127.0.0.1", port)
        assert (await _ask(newcomer)).startswith(b"HTTP/1.1 200")
        assert stats.evicted == 1 and stats.refused == 0 and stats.timed_out == 0
        taken = 0
        with trio.fail_after(10):
            try:
                while chunk := await stuck.receive_some(1 << 20):
                    taken += len(chunk)
            except trio.BrokenResourceError:  # closed with data unread: a reset
                pass
        assert taken < _BIG  # cut off, not served whole
        handler.release.set()
        with trio.fail_after(10):
            assert (await busy.receive_some(65536)).startswith(b"HTTP/1.1 200")
        for s in (busy, stuck, newcomer):
            await s.aclose()
