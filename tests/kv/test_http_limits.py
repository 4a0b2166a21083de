"""The KV service's HTTP server (examples/kv_http.py) against peers that hold it without using
it: a connection cap answered 503, keep-alive connections closed after their idle timeout, and
slow requests cut off with 408. Found by an attack from outside: ~20k idle connections hit the
open-file limit, printed tracebacks and cost the leader its session. Also the edges that h11
used to guard: heads and bodies over their limits, bytes that are not HTTP, pipelining.

The server runs on asyncio's own loop and on uvloop (each test runs on both)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import pytest

from tests._event_loops import ASYNCIO_LOOPS, run_on

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from kv_http import Limits, Request, Response, Stats, default_max_connections, serve

#: An answer larger than loopback's socket buffers can hold: a peer that reads none of it
#: keeps the server sending.
_BIG = 32 << 20

Stream = anyio.abc.SocketStream


class _Echo:
    """Echoes the body; ``/hold`` waits for ``release`` first (a busy handler), ``/big``
    answers ``_BIG`` bytes, ``/now`` answers at once (no coroutine), ``/boom`` raises."""

    def __init__(self) -> None:
        self.release = anyio.Event()
        self.running = 0

    def __call__(self, request: Request) -> Response | Awaitable[Response]:
        if request.path == "/now":
            return Response(200, b"now")
        if request.path == "/boom":
            raise RuntimeError("boom")
        return self._answer(request)

    async def _answer(self, request: Request) -> Response:
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
async def _server(
    limits: Limits, handler: _Echo | None = None, max_body: int = 1024
) -> AsyncIterator[tuple[int, Stats]]:
    stats = Stats()
    async with anyio.create_task_group() as tasks:

        async def run(*, task_status: anyio.abc.TaskStatus[int]) -> None:
            await serve(
                handler or _Echo(),
                "127.0.0.1",
                0,
                max_body=max_body,
                limits=limits,
                stats=stats,
                task_status=task_status,
            )

        port = await tasks.start(run)
        try:
            yield port, stats
        finally:
            tasks.cancel_scope.cancel()


async def _connect(port: int) -> Stream:
    return await anyio.connect_tcp("127.0.0.1", port)


async def _read_all(stream: Stream, timeout: float = 10) -> bytes:
    """Everything the server sends until it closes."""
    out = b""
    with anyio.fail_after(timeout):
        while True:
            try:
                out += await stream.receive(65536)
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return out


async def _read_until(stream: Stream, end: bytes, timeout: float = 10) -> bytes:
    got = b""
    with anyio.fail_after(timeout):
        while not got.endswith(end):
            got += await stream.receive(65536)
    return got


async def _ask(stream: Stream) -> bytes:
    """Send a GET on ``stream`` and return its whole answer (the connection stays open)."""
    await stream.send(_get())
    return await _read_until(stream, b"ok")


async def _until(predicate: Callable[[], bool]) -> None:
    """Poll the server's counters (they change just after the events the test causes)."""
    with anyio.fail_after(10):
        while not predicate():  # noqa: ASYNC110 (polls counters)
            await anyio.sleep(0.01)


def _reading(stats: Stats) -> int:
    """Connections whose request is arriving."""
    return sum(slot.reading for slot in stats.slots)


def _get(body: bytes = b"", path: bytes = b"/x") -> bytes:
    method = b"PUT" if body else b"GET"
    head = method + b" " + path + b" HTTP/1.1\r\nhost: t\r\ncontent-length: %d\r\n\r\n"
    return head % len(body) + body


async def idle_keep_alive_connection_is_closed() -> None:
    async with _server(Limits(idle_timeout=0.5)) as (port, stats):
        stream = await _connect(port)
        await stream.send(_get())
        answer = await _read_all(stream)  # the answer, then the close after 0.5 s idle
        assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"ok")
        await _until(lambda: not stats.open)
        assert stats.idle_closed == 1
        await stream.aclose()


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_an_idle_keep_alive_connection_is_closed(loop: str) -> None:
    run_on(loop, idle_keep_alive_connection_is_closed)


async def request_sent_too_slowly() -> None:
    async with _server(Limits(request_timeout=0.5)) as (port, stats):
        slow = await _connect(port)
        await slow.send(b"GET /x HTTP/1.1\r\n")
        with anyio.fail_after(10):
            for _ in range(100):  # one header byte every 0.1 s: never done in time
                try:
                    await slow.send(b"x")
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    break
                await anyio.sleep(0.1)
                if stats.timed_out:
                    break
        answer = await _read_all(slow)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert b"request not received whole" in answer
        assert stats.timed_out == 1
        await slow.aclose()
        # A request sent in pieces within the timeout is served.
        steady = await _connect(port)
        request = _get(b"hello")
        for at in range(0, len(request), 20):
            await steady.send(request[at : at + 20])
            await anyio.sleep(0.05)
        assert (await _read_until(steady, b"hello")).startswith(b"HTTP/1.1 200")
        await steady.aclose()


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_a_request_sent_too_slowly_is_answered_408(loop: str) -> None:
    run_on(loop, request_sent_too_slowly)


async def over_the_cap_when_all_are_busy() -> None:
    handler = _Echo()
    async with _server(Limits(max_connections=3, idle_timeout=30), handler) as (port, stats):
        held = [await _connect(port) for _ in range(3)]
        for stream in held:  # each with its handler running: busy, so never closed for room
            await stream.send(b"GET /hold HTTP/1.1\r\nhost: t\r\n\r\n")
        await _until(lambda: handler.running == 3)
        extra = await _connect(port)
        answer = await _read_all(extra)
        assert answer.startswith(b"HTTP/1.1 503"), answer
        assert b"retry-after: 1" in answer and b"too many connections (limit 3)" in answer
        assert stats.refused == 1 and stats.evicted == 0
        await extra.aclose()
        handler.release.set()
        for stream in held:  # each still gets its answer
            assert (await _read_until(stream, b"ok")).startswith(b"HTTP/1.1 200")
        again = await _connect(port)
        got = await _ask(again)  # closes one of the now idle ones
        assert got.startswith(b"HTTP/1.1 200") and stats.evicted == 1
        for s in [*held, again]:
            await s.aclose()


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_connections_over_the_cap_get_503_when_all_are_busy(loop: str) -> None:
    run_on(loop, over_the_cap_when_all_are_busy)


def test_the_default_cap_leaves_file_descriptors_for_the_rest() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    cap = default_max_connections()
    assert 16 <= cap <= 1024
    if soft != resource.RLIM_INFINITY:
        assert cap <= max(16, soft // 2)


async def newcomer_closes_the_idle_longest() -> None:
    async with _server(Limits(max_connections=2, idle_timeout=30)) as (port, stats):
        oldest = await _connect(port)
        await oldest.send(_get())
        await anyio.sleep(0.2)
        slow = await _connect(port)
        await slow.send(b"GET /x HTTP/1.1\r\n")  # and no more
        await _until(lambda: _reading(stats) >= 1 and stats.open >= 2)
        newcomer = await _connect(port)
        got = await _ask(newcomer)
        assert got.startswith(b"HTTP/1.1 200")
        answer = await _read_all(oldest)  # its answer, then closed for the newcomer
        assert answer.startswith(b"HTTP/1.1 200") and stats.evicted == 1
        # With none idle, the request arriving longest goes, however young.
        await newcomer.aclose()
        await oldest.aclose()
        await _until(lambda: stats.open <= 1)
        recent = await _connect(port)
        await recent.send(b"GET /x HTTP/1.1\r\n")
        await _until(lambda: _reading(stats) >= 2)
        fresh = await _connect(port)
        await _ask(fresh)
        assert await _read_all(slow) == b"" and stats.evicted == 2 and stats.refused == 0
        await recent.send(b"host: t\r\n\r\n")  # still there: it finishes its request
        assert (await _read_until(recent, b"ok")).startswith(b"HTTP/1.1 200")
        for s in (slow, recent, fresh):
            await s.aclose()


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_at_the_cap_a_newcomer_closes_the_connection_idle_longest(loop: str) -> None:
    """The re-attack held all 1,024 slots with keep-alive connections sending a request every
    25 s (never idle 30 s), and clients got 503s. A newcomer now closes the one idle longest
    between requests, else the one whose request has been arriving longest (a slowloris),
    whatever its age: one that reconnects at once keeps its connections young."""
    run_on(loop, newcomer_closes_the_idle_longest)


async def peer_that_does_not_take_its_answer() -> None:
    handler = _Echo()
    async with _server(Limits(max_connections=2, idle_timeout=30), handler) as (port, stats):
        busy = await _connect(port)
        await busy.send(b"GET /hold HTTP/1.1\r\nhost: t\r\n\r\n")
        await _until(lambda: handler.running == 1)
        stuck = await _connect(port)
        await stuck.send(b"GET /big HTTP/1.1\r\nhost: t\r\n\r\n")  # and reads nothing
        await _until(lambda: any(slot.state == "sending" for slot in stats.slots))
        newcomer = await _connect(port)
        assert (await _ask(newcomer)).startswith(b"HTTP/1.1 200")
        assert stats.evicted == 1 and stats.refused == 0 and stats.timed_out == 0
        taken = len(await _read_all(stuck))  # closed with data unread: a reset, or the end
        assert taken < _BIG  # cut off, not served whole
        handler.release.set()
        assert (await _read_until(busy, b"ok")).startswith(b"HTTP/1.1 200")
        for s in (busy, stuck, newcomer):
            await s.aclose()


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_at_the_cap_a_peer_that_does_not_take_its_answer_is_closed(loop: str) -> None:
    """After idle and arriving ones, a connection whose peer leaves its answer untaken is the
    next to go; one whose handler is running never is."""
    run_on(loop, peer_that_does_not_take_its_answer)


async def answer_not_taken_in_time() -> None:
    async with _server(Limits(request_timeout=0.5)) as (port, stats):
        stuck = await _connect(port)
        await stuck.send(b"GET /big HTTP/1.1\r\nhost: t\r\n\r\n")  # and reads nothing
        await _until(lambda: stats.timed_out == 1)
        assert len(await _read_all(stuck)) < _BIG
        await _until(lambda: not stats.open)
        await stuck.aclose()


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_an_answer_not_taken_within_the_request_timeout_is_cut_off(loop: str) -> None:
    run_on(loop, answer_not_taken_in_time)


async def bad_input_at_the_edges() -> None:
    async with _server(Limits(), max_body=1024) as (port, stats):

        async def answer(data: bytes) -> bytes:
            stream = await _connect(port)
            await stream.send(data)
            got = await _read_all(stream)
            await stream.aclose()
            return got

        # Not HTTP: 400 with what the parser found, and closed.
        got = await answer(b"NOT HTTP AT ALL\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 400") and b"bad request" in got, got
        # A head over 16 KiB: 431, from the head's size whatever its shape.
        got = await answer(b"GET /x HTTP/1.1\r\nhost: t\r\nx-big: " + b"a" * 17000 + b"\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 431") and b"16384" in got, got
        got = await answer(b"GET /" + b"p" * 17000 + b" HTTP/1.1\r\nhost: t\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 431"), got
        # A body over max_body: 413 from its Content-Length, before it is sent...
        got = await answer(b"PUT /x HTTP/1.1\r\nhost: t\r\ncontent-length: 1025\r\n\r\n")
        assert got.startswith(b"HTTP/1.1 413") and b"1024" in got, got
        # ... and from its size as it arrives, when chunked.
        chunk = b"%x\r\n%s\r\n" % (600, b"c" * 600)
        got = await answer(
            b"PUT /x HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n" + chunk * 2
        )
        assert got.startswith(b"HTTP/1.1 413"), got
        # A chunked body within the limit is served; so is a conflicting length: refused.
        stream = await _connect(port)
        await stream.send(
            b"PUT /x HTTP/1.1\r\nhost: t\r\ntransfer-encoding: chunked\r\n\r\n"
            + chunk
            + b"0\r\n\r\n"
        )
        assert (await _read_until(stream, b"c" * 600)).startswith(b"HTTP/1.1 200")
        await stream.aclose()
        got = await answer(
            b"PUT /x HTTP/1.1\r\nhost: t\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd"
        )
        assert got.startswith(b"HTTP/1.1 400"), got
        # An upgrade is not served.
        got = await answer(
            b"GET /x HTTP/1.1\r\nhost: t\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n"
        )
        assert got.startswith(b"HTTP/1.1 400"), got
        # A handler that raises: 500 with its error, and the connection serves on.
        stream = await _connect(port)
        await stream.send(_get(path=b"/boom") + _get())
        got = await _read_until(stream, b"ok")
        assert got.startswith(b"HTTP/1.1 500") and b"RuntimeError: boom" in got, got
        await stream.aclose()
        await _until(lambda: not stats.open)
        assert stats.timed_out == stats.refused == stats.evicted == 0


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_bad_input_at_the_edges_gets_a_clear_answer(loop: str) -> None:
    run_on(loop, bad_input_at_the_edges)


async def pipelined_and_closing() -> None:
    async with _server(Limits()) as (port, _stats):
        # Pipelined requests, answered at once or later, come back in order.
        stream = await _connect(port)
        await stream.send(
            _get(b"one")
            + _get(path=b"/now")
            + _get(b"two")
            + b"HEAD /now HTTP/1.1\r\nhost: t\r\n\r\n"
        )
        got = await _read_until(stream, b"content-length: 3\r\n\r\n")
        bodies = [part.rpartition(b"\r\n\r\n")[2] for part in got.split(b"HTTP/1.1 ")[1:]]
        assert bodies == [b"one", b"now", b"two", b""], got
        await stream.aclose()
        # Connection: close, and HTTP/1.0 without keep-alive: answered, then closed.
        for request in (
            b"GET /now HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n",
            b"GET /now HTTP/1.0\r\n\r\n",
        ):
            stream = await _connect(port)
            await stream.send(request)
            got = await _read_all(stream)
            assert got.startswith(b"HTTP/1.1 200") and got.endswith(b"now"), got
            await stream.aclose()
        # A peer that sends its request and shuts its side still gets the answer.
        stream = await _connect(port)
        await stream.send(b"GET /hold-not HTTP/1.1\r\nhost: t\r\n\r\n")
        await stream.send_eof()
        assert (await _read_all(stream)).startswith(b"HTTP/1.1 200")
        await stream.aclose()


@pytest.mark.parametrize("loop", ASYNCIO_LOOPS)
def test_pipelined_requests_are_answered_in_order(loop: str) -> None:
    run_on(loop, pipelined_and_closing)


def test_serving_needs_asyncio() -> None:
    async def main() -> None:
        await serve(_Echo(), "127.0.0.1", 0, max_body=10)

    with pytest.raises(RuntimeError, match="asyncio"):
        anyio.run(main, backend="trio")
