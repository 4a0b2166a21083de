"""Test helpers: a small pipelined bookie client on the wire codec, and bookie subprocesses."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import trio
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from walkit._core.digest import DigestManager, master_key
from walkit._core.types import BookieId
from walkit._core.wire import (
    AddFlag,
    AddRequest,
    AddResponse,
    FrameDecoder,
    Message,
    ReadFlag,
    ReadLacFlag,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
    WriteLacRequest,
    WriteLacResponse,
    decode_message,
    encode_frame,
)
from walkit.net import ClientStream, Network
from walkit_bookie import Bookie, BookieConfig

PASSWORD = b"secret"
KEY = master_key(PASSWORD)


def packet(ledger_id: int, entry_id: int, payload: bytes, lac: int = -1) -> bytes:
    return DigestManager(ledger_id, "crc32c", PASSWORD).encode(entry_id, lac, 0, payload)


def payload_for(ledger_id: int, entry_id: int, size: int = 100) -> bytes:
    seed = f"{ledger_id}:{entry_id}:".encode()
    return (seed * (size // len(seed) + 1))[:size]


class _TrioView(trio.abc.Stream):
    """A client stream of a Network (an AnyIO byte stream) seen through trio's stream API,
    which this helper speaks."""

    def __init__(self, stream: ClientStream) -> None:
        self._stream = stream

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        try:
            await self._stream.send(bytes(data))
        except anyio.ClosedResourceError:
            raise trio.ClosedResourceError from None
        except (anyio.BrokenResourceError, OSError) as exc:
            raise trio.BrokenResourceError(str(exc)) from exc

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        try:
            return await self._stream.receive(max_bytes or 65536)
        except anyio.EndOfStream:
            return b""
        except anyio.ClosedResourceError:
            raise trio.ClosedResourceError from None
        except (anyio.BrokenResourceError, OSError) as exc:
            raise trio.BrokenResourceError(str(exc)) from exc

    async def aclose(self) -> None:
        await self._stream.aclose()


class Client:
    """One connection; requests pipelined, answers matched by request id."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self._ids = itertools.count(1)
        self._waiting: dict[int, trio.MemorySendChannel[Message]] = {}
        self.unmatched: list[Message] = []
        self.closed = trio.Event()
        self._send_lock = trio.Lock()  # tasks may share a client; one send_all at a time

    async def _reader(self) -> None:
        decoder = FrameDecoder(64 * 1024 * 1024)
        try:
            while True:
                data = await self.stream.receive_some(1 << 20)
                if not data:
                    return
                decoder.feed(data)
                while (body := decoder.next_frame()) is not None:
                    msg = decode_message(body)
                    chan = self._waiting.pop(msg.request_id, None)
                    if chan is None:
                        self.unmatched.append(msg)
                    else:
                        chan.send_nowait(msg)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return
        finally:
            self.closed.set()
            for chan in self._waiting.values():
                chan.close()

    def next_id(self) -> int:
        return next(self._ids)

    def _check_open(self) -> None:
        if self.closed.is_set():  # the reader is gone: nobody would ever answer
            raise ConnectionError("bookie closed the connection")

    async def call(self, request: Request) -> Message:
        self._check_open()
        send, receive = trio.open_memory_channel[Message](1)
        self._waiting[request.request_id] = send
        async with self._send_lock:
            await self.stream.send_all(encode_frame(request))
        try:
            return await receive.receive()
        except trio.EndOfChannel:
            raise ConnectionError("bookie closed the connection") from None

    async def call_many(self, requests: Sequence[Request]) -> list[Message]:
        """Send all requests in one write and wait for all answers."""
        self._check_open()
        channels = []
        for req in requests:
            send, receive = trio.open_memory_channel[Message](1)
            self._waiting[req.request_id] = send
            channels.append(receive)
        async with self._send_lock:
            await self.stream.send_all(b"".join(encode_frame(r) for r in requests))
        out = []
        for receive in channels:
            try:
                out.append(await receive.receive())
            except trio.EndOfChannel:
                raise ConnectionError("bookie closed the connection") from None
        return out

    def add_request(
        self,
        ledger_id: int,
        entry_id: int,
        payload: bytes,
        *,
        lac: int = -1,
        key: bytes = KEY,
        flags: AddFlag = AddFlag.NONE,
    ) -> AddRequest:
        return AddRequest(
            self.next_id(),
            ledger_id,
            entry_id,
            key,
            packet(ledger_id, entry_id, payload, lac),
            flags,
        )

    async def add(self, ledger_id: int, entry_id: int, payload: bytes, **kw: Any) -> AddResponse:
        resp = await self.call(self.add_request(ledger_id, entry_id, payload, **kw))
        assert isinstance(resp, AddResponse), resp
        return resp

    async def read(
        self, ledger_id: int, entry_id: int, *, fence: bool = False, key: bytes = KEY
    ) -> ReadResponse:
        flags = ReadFlag.FENCE if fence else ReadFlag.NONE
        resp = await self.call(
            ReadRequest(self.next_id(), ledger_id, entry_id, flags, key if fence else b"")
        )
        assert isinstance(resp, ReadResponse), resp
        return resp

    async def read_lac(
        self,
        ledger_id: int,
        *,
        flags: ReadLacFlag = ReadLacFlag.NONE,
        previous_lac: int = -1,
        timeout_ms: int = 0,
        key: bytes = KEY,
    ) -> ReadLacResponse:
        resp = await self.call(
            ReadLacRequest(self.next_id(), ledger_id, flags, previous_lac, timeout_ms, key)
        )
        assert isinstance(resp, ReadLacResponse), resp
        return resp

    async def write_lac(self, ledger_id: int, lac: int, *, key: bytes = KEY) -> WriteLacResponse:
        resp = await self.call(WriteLacRequest(self.next_id(), ledger_id, lac, key))
        assert isinstance(resp, WriteLacResponse), resp
        return resp


@asynccontextmanager
async def connect(
    bookie_id: BookieId, network: Network | None = None, *, local_address: str | None = None
) -> AsyncIterator[Client]:
    """A connection to the bookie (from ``local_address``, e.g. another loopback address)."""
    if network is None:
        stream: trio.abc.Stream = await trio.open_tcp_stream(
            bookie_id.host, bookie_id.port, local_address=local_address
        )
    else:
        stream = _TrioView(await network.connect(bookie_id))
    peer = Client(stream)  # (a raw wire client of these tests, not walkit's)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(peer._reader)
            try:
                yield peer
            finally:
                # No await here: a checkpoint in this cancelled scope would raise Cancelled,
                # which the nursery absorbs, swallowing the body's own exception.
                nursery.cancel_scope.cancel()
    finally:
        await trio.aclose_forcefully(stream)


def config(dirs: Sequence[Path], **kw: Any) -> BookieConfig:
    return BookieConfig(data_dirs=[str(d) for d in dirs], **kw)


@asynccontextmanager
async def running_bookie(cfg: BookieConfig, **kw: Any) -> AsyncIterator[tuple[Bookie, BookieId]]:
    """A Bookie in this process (cancelled, i.e. shut down cleanly, on exit).

    A failure to start raises the bookie's own error (not a nursery's ExceptionGroup).
    """
    bookie = Bookie(cfg, **kw)
    try:
        async with trio.open_nursery() as nursery:
            bookie_id: BookieId = await nursery.start(bookie.run)
            try:
                yield bookie, bookie_id
            finally:
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1 and not isinstance(group.exceptions[0], BaseExceptionGroup):
            raise group.exceptions[0] from None
        raise


class BookieProcess:
    """``python -m walkit_bookie.cli`` as a subprocess (stdout gives the address)."""

    def __init__(
        self, dirs: Sequence[Path], *extra: str, port: int = 0, log: Path | None = None
    ) -> None:
        self.args = [sys.executable, "-m", "walkit_bookie.cli"]
        self.log = log or Path(dirs[0]).parent / f"bookie-{Path(dirs[0]).name}.log"
        for d in dirs:
            self.args += ["--data-dir", str(d)]
        self.args += ["--port", str(port), *extra]
        self.proc: subprocess.Popen[str] | None = None
        self.bookie_id: BookieId | None = None

    def _popen(self) -> subprocess.Popen[str]:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with self.log.open("a") as err:  # a file, not a pipe: nobody has to drain it
            return subprocess.Popen(
                self.args, stdout=subprocess.PIPE, stderr=err, text=True, env=env
            )

    async def start(self, timeout: float = 30) -> BookieId:
        self.proc = self._popen()
        assert self.proc.stdout is not None
        with trio.fail_after(timeout):
            line = await trio.to_thread.run_sync(self.proc.stdout.readline, abandon_on_cancel=True)
        if "listening on" not in line:
            self.proc.wait(timeout=10)
            err = self.log.read_text()
            raise RuntimeError(f"bookie did not start (rc={self.proc.returncode}): {line}{err}")
        self.bookie_id = BookieId.parse(line.rsplit(" ", 1)[1].strip())
        return self.bookie_id

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 20) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def stderr(self) -> str:
        return self.log.read_text()

    def run_to_exit(self, timeout: float = 30) -> tuple[int, str, str]:
        """Run and wait for it to exit (for refusals); returns (code, stdout, stderr)."""
        done = subprocess.run(self.args, capture_output=True, text=True, timeout=timeout)
        return done.returncode, done.stdout, done.stderr


async def http_raw(address: tuple[str, int], raw: bytes, *, half_close: bool = True) -> bytes:
    """Send ``raw`` (then EOF), return everything the server answers before it closes."""
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        data = b""
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:

                async def send() -> None:
                    # The server may answer before it read everything (431, 413): keep going.
                    with contextlib.suppress(trio.BrokenResourceError):
                        await stream.send_all(raw)
                        if half_close:
                            await stream.send_eof()

                nursery.start_soon(send)
                while chunk := await stream.receive_some(65536):
                    data += chunk
    return data


async def http_request(
    address: tuple[str, int], raw: bytes, *, half_close: bool = False
) -> tuple[int, bytes]:
    data = await http_raw(address, raw, half_close=half_close)
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


class SlowCollector(Collector):
    """A prometheus collector whose ``collect`` waits until ``release`` is set (the admin
    endpoint runs it in a worker thread): scrapes through it hold admin slots at will."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self._lock = threading.Lock()
        self.entered = 0

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            self.entered += 1
        self.release.wait(30)
        return iter(())


@asynccontextmanager
async def admin_slots_held(
    address: tuple[str, int], slow: SlowCollector, count: int = 32
) -> AsyncIterator[list[int]]:
    """``count`` scrapes of ``/metrics`` whose answers are being made (waiting in ``slow``):
    every admin slot busy. On exit they are released; the list holds their statuses."""
    statuses: list[int] = []

    async def scrape() -> None:
        statuses.append(
            (await http_request(address, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"))[0]
        )

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(scrape)
        try:  # released whatever happens, or the nursery would wait on the scrapes
            with trio.fail_after(10):
                while slow.entered < count:  # noqa: ASYNC110 (waits for worker threads)
                    await trio.sleep(0.01)
            yield statuses
        finally:
            slow.release.set()
