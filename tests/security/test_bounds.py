"""Bounded resources against hostile clients (reads in flight, idle and partial connections,
floods), on real bookies: in-process bookies over TCP, and bookie processes where memory or
the log file is measured."""

from __future__ import annotations

import json
import resource
import socket
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from tests.bookie._helpers import (
    BookieProcess,
    config,
    connect,
    http_request,
    running_bookie,
)
from walkit._core.types import Entry
from walkit._core.wire import (
    PROTOCOL_VERSION,
    ErrorResponse,
    Message,
    MessageType,
    ReadLacFlag,
    ReadLacRequest,
    Response,
    StatusCode,
    decode_message,
    encode_frame,
)
from walkit_bookie.server._intake import FIRST_RECEIVE_SIZE

FOREVER_MS = 2**32 - 1


def _status(message: Message) -> StatusCode:
    """The status of a bookie's answer (requests have none: getting one back is a failure)."""
    assert isinstance(message, Response), message
    return message.status


@pytest.fixture
def many_files() -> None:
    """2,000 connections need ~4,100 file descriptors in one process: raise the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 5000:
        if hard != resource.RLIM_INFINITY and hard < 5000:
            pytest.skip(f"needs 5000 open files; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (5000, hard))


def long_poll(rid: int, ledger_id: int) -> ReadLacRequest:
    return ReadLacRequest(rid, ledger_id, ReadLacFlag.LONG_POLL, -1, FOREVER_MS, b"")


async def _wait_until(predicate: Callable[[], bool], timeout: float = 20) -> None:
    with trio.fail_after(timeout):
        while not predicate():  # noqa: ASYNC110 (polls a counter)
            await trio.sleep(0.01)


async def test_a_thousand_endless_long_polls_do_not_stop_adds(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (bookie, bid):
        attacker = await trio.open_tcp_stream(bid.host, bid.port)
        # 1,000 long polls on unknown ledgers, each asking to wait 2^32-1 ms (~49 days): the
        # probe's 33 KB message. Reads used to be capped at 1,000 in flight, long polls included.
        await attacker.send_all(
            b"".join(encode_frame(long_poll(i, 10**6 + i)) for i in range(1000))
        )
        await _wait_until(lambda: bookie.handler.stats.long_polls == 1000)
        assert bookie.handler.stats.reads_in_flight == 0 and not bookie.handler.saturated
        async with connect(bid) as writer:
            with trio.fail_after(20):
                for e in range(20):
                    assert (await writer.add(1, e, b"x")).status is StatusCode.OK
                assert (await writer.read(1, 19)).status is StatusCode.OK
        # Closing the connection releases its waits.
        await attacker.aclose()
        await _wait_until(
            lambda: bookie.handler.stats.long_polls == 0 and bookie.handler.stats.connections == 0
        )


async def test_long_polls_are_capped_in_time_and_number(tmp_path: Path) -> None:
    cfg = config(
        [tmp_path / "d"], max_long_poll=0.2, max_long_polls=5, max_requests_per_connection=3
    )
    async with running_bookie(cfg) as (_bookie, bid):
        async with connect(bid) as c:
            with trio.fail_after(20):  # the cap answers it, not the 49 days asked for
                answer = await c.call(long_poll(c.next_id(), 42))
            assert _status(answer) is StatusCode.NO_SUCH_LEDGER
        async with connect(bid) as a:
            frames = [long_poll(a.next_id(), 100 + i) for i in range(4)]
            # The 4th on one connection is over max_requests_per_connection (3).
            with trio.fail_after(20):
                answers = await a.call_many(frames)
            statuses = [_status(m) for m in answers]
            assert statuses.count(StatusCode.TOO_MANY_REQUESTS) == 1
            assert isinstance(answers[3], ErrorResponse) and "connection" in answers[3].message


async def test_the_long_poll_cap_over_all_connections_answers_too_many(tmp_path: Path) -> None:
    cfg = config([tmp_path / "d"], max_long_polls=5, http_port=0)
    async with running_bookie(cfg) as (bookie, bid):
        assert bookie.admin_address is not None
        attacker = await trio.open_tcp_stream(bid.host, bid.port)
        await attacker.send_all(b"".join(encode_frame(long_poll(i, 7)) for i in range(1, 6)))
        await _wait_until(lambda: bookie.handler.stats.long_polls == 5)
        status, body = await http_request(
            bookie.admin_address, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        health = json.loads(body)
        assert status == 200 and health["status"] == "degraded" and health["full"] == ["long_polls"]
        async with connect(bid) as c:
            with trio.fail_after(20):
                refused = await c.call(long_poll(c.next_id(), 8))
                assert _status(refused) is StatusCode.TOO_MANY_REQUESTS
                assert (await c.add(7, 0, b"x")).status is StatusCode.OK
        await attacker.aclose()
        await _wait_until(lambda: bookie.handler.stats.long_polls == 0)
        status, body = await http_request(
            bookie.admin_address, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        assert json.loads(body)["status"] == "ok"


@pytest.mark.usefixtures("many_files")
async def test_idle_connections_hold_no_receive_buffer(tmp_path: Path) -> None:
    cfg = config([tmp_path / "d"], max_connections=5000, first_request_timeout=300)
    async with running_bookie(cfg) as (bookie, bid):
        streams = []
        try:
            for _ in range(2000):
                streams.append(await trio.open_tcp_stream(bid.host, bid.port))
            await _wait_until(lambda: bookie.handler.stats.connections == 2000)
            assert bookie.handler.stats.receive_buffer_bytes == 0  # was 1 MiB each, zero-filled
            async with connect(bid) as c:
                assert (await c.add(1, 0, b"x" * 100)).status is StatusCode.OK
                assert bookie.handler.stats.receive_buffer_bytes == FIRST_RECEIVE_SIZE
                # A big frame grows that one buffer, up to 1 MiB.
                assert (await c.add(1, 1, b"y" * (3 << 20))).status is StatusCode.OK
                assert FIRST_RECEIVE_SIZE < bookie.handler.stats.receive_buffer_bytes <= 1 << 20
        finally:
            for s in streams:
                await s.aclose()
        await _wait_until(lambda: bookie.handler.stats.connections == 0)
        assert bookie.handler.stats.receive_buffer_bytes == 0


async def test_connections_over_the_cap_get_a_clear_answer(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"], max_connections=3)) as (bookie, bid):
        # Busy connections (a long poll each): an idle one would make room for the newcomer.
        streams = [await trio.open_tcp_stream(bid.host, bid.port) for _ in range(3)]
        for i, stream in enumerate(streams):
            await stream.send_all(encode_frame(long_poll(1, 10**6 + i)))
        await _wait_until(lambda: bookie.handler.stats.long_polls == 3)
        async with connect(bid) as extra:
            with trio.fail_after(20):
                answer = await extra.call(long_poll(extra.next_id(), 1))
        assert isinstance(answer, ErrorResponse)
        assert answer.status is StatusCode.TOO_MANY_REQUESTS and "connections" in answer.message
        assert bookie.handler.stats.connections_refused == 1
        for s in streams:
            await s.aclose()
        await _wait_until(lambda: bookie.handler.stats.connections == 0)
        async with connect(bid) as c:
            assert (await c.add(1, 0, b"x")).status is StatusCode.OK


async def test_one_address_cannot_hold_every_connection(tmp_path: Path) -> None:
    """With ``max_connections_per_address``, connections that look busy (a long poll each)
    from one address hold only that address's share: its next connection is refused with a
    clear answer, its idle ones make room for its own newcomers, and another address connects
    (ZooKeeper's maxClientCnxns; an attack held all 1,000 slots from one host)."""
    cfg = config(
        [tmp_path / "d"], max_connections=10, max_connections_per_address=3, evict_idle_after=0.5
    )
    async with running_bookie(cfg) as (bookie, bid):
        streams = [await trio.open_tcp_stream(bid.host, bid.port) for _ in range(3)]
        for i, stream in enumerate(streams):
            await stream.send_all(encode_frame(long_poll(1, 10**6 + i)))
        await _wait_until(lambda: bookie.handler.stats.long_polls == 3)
        async with connect(bid) as extra:  # the same address: refused
            with trio.fail_after(20):
                answer = await extra.call(long_poll(extra.next_id(), 1))
        assert isinstance(answer, ErrorResponse)
        assert answer.status is StatusCode.TOO_MANY_REQUESTS
        assert f"from {bid.host}" in answer.message and "limit 3" in answer.message
        async with connect(bid, local_address="127.0.0.2") as other:  # another address
            assert (await other.add(1, 0, b"x")).status is StatusCode.OK
        await _wait_until(lambda: "127.0.0.2" not in bookie.handler.connections_by_address)
        # An idle connection of the address makes room for that address's newcomer.
        await streams[0].aclose()
        await _wait_until(lambda: bookie.handler.connections_by_address[bid.host] == 2)
        async with connect(bid) as idle:
            assert (await idle.add(1, 1, b"y")).status is StatusCode.OK
            await trio.sleep(cfg.evict_idle_after + 0.1)
            async with connect(bid) as newcomer:
                assert (await newcomer.add(1, 2, b"z")).status is StatusCode.OK
            assert bookie.handler.stats.connections_evicted == 1
        for s in streams[1:]:
            await s.aclose()
        await _wait_until(lambda: bookie.handler.stats.connections == 0)
        assert bookie.handler.connections_by_address == {}


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.processes
@pytest.mark.usefixtures("many_files")
async def test_two_thousand_idle_connections_do_not_take_gigabytes(tmp_path: Path) -> None:
    bookie = BookieProcess(
        [tmp_path / "d"], "--max-connections", "5000", "--first-request-timeout", "300"
    )
    bid = await bookie.start()
    assert bookie.proc is not None
    socks: list[socket.socket] = []
    try:
        before = _rss_kib(bookie.proc.pid)
        for _ in range(2000):
            socks.append(socket.create_connection((bid.host, bid.port)))
        # Every connection is accepted and served (a request on a fresh one is answered).
        async with connect(bid) as c:
            with trio.fail_after(30):
                assert (await c.add(1, 0, b"x")).status is StatusCode.OK
        grown_mib = (_rss_kib(bookie.proc.pid) - before) / 1024
        # Was ~2 GiB (a zero-filled 1 MiB buffer each); now a few KiB of state each.
        assert grown_mib < 200, f"2,000 idle connections took {grown_mib:.0f} MiB"
    finally:
        for s in socks:
            s.close()
        bookie.terminate()


def _garbage_frames(total: int) -> bytes:
    """Frames with a good length and request id but a bad version byte: each is answered
    BAD_VERSION and the connection goes on (each used to log one warning line)."""
    out = []
    size = 0
    rid = 1
    while size < total:
        body = struct.pack(">BBQ", PROTOCOL_VERSION + 50, MessageType.ADD_REQUEST, rid) + b"?" * 20
        out.append(struct.pack(">I", len(body)) + body)
        size += 4 + len(body)
        rid += 1
    return b"".join(out)


@pytest.mark.processes
async def test_a_mebibyte_of_garbage_does_not_produce_megabytes_of_log(tmp_path: Path) -> None:
    log_file = tmp_path / "bookie.log"
    bookie = BookieProcess([tmp_path / "d"], "--http-port", "0", log=log_file)
    bid = await bookie.start()
    assert bookie.proc is not None and bookie.proc.stdout is not None
    admin_line = await trio.to_thread.run_sync(bookie.proc.stdout.readline)
    admin = admin_line.rsplit("//", 1)[1].split("/")[0]
    host, port = admin.rsplit(":", 1)
    try:
        garbage = _garbage_frames(1 << 20)
        frames = garbage.count(b"?" * 20)
        size_before = log_file.stat().st_size
        stream = await trio.open_tcp_stream(bid.host, bid.port)
        async with stream:

            async def drain() -> None:
                while await stream.receive_some(1 << 16):
                    pass

            async with trio.open_nursery() as nursery:
                nursery.start_soon(drain)
                await stream.send_all(garbage)
                # Every bad frame is counted, and the bookie still serves.
                with trio.fail_after(60):
                    while True:
                        _, body = await http_request(
                            (host, int(port)), b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                        )
                        if (
                            f'bad_input_total{{kind="bad_message"}} {float(frames)}'.encode()
                            in body
                        ):
                            break
                        await trio.sleep(0.05)
                nursery.cancel_scope.cancel()
        async with connect(bid) as c:
            assert (await c.add(1, 0, b"x")).status is StatusCode.OK
        logged = log_file.stat().st_size - size_before
        assert logged < 16 * 1024, f"{frames} bad frames wrote {logged} bytes of log"
        assert b"walkit_bookie_bad_input_log_suppressed_total" in body
    finally:
        bookie.terminate()


async def test_a_tailing_reader_goes_on_when_long_polls_are_refused(
    memory_url: str, tmp_path: Path
) -> None:
    """A bookie at its long-poll limit answers TOO_MANY_REQUESTS; a tailing reader then reads
    the LAC without waiting (and backs off) instead of failing."""
    import walkit
    from walkit.metadata import open_metadata_store
    from walkit_bookie import Bookie

    store = await open_metadata_store(memory_url)
    try:
        async with trio.open_nursery() as nursery:
            bookie = Bookie(config([tmp_path / "d"], max_long_polls=1), metadata=store)
            bid = await nursery.start(bookie.run)
            attacker = await trio.open_tcp_stream(bid.host, bid.port)
            await attacker.send_all(encode_frame(long_poll(1, 10**9)))  # holds the only slot
            await _wait_until(lambda: bookie.handler.stats.long_polls == 1)
            async with walkit.Client.connect(memory_url) as client:
                lw = await client.create_ledger(1, 1, 1)
                await lw.append(b"zero")
                reader = await client.open_ledger(lw.id)
                got: list[Entry | None] = []

                async def tail() -> None:
                    got.append(await reader.wait_for_entry(1, timeout=30))

                async with trio.open_nursery() as inner:
                    inner.start_soon(tail)
                    await _wait_until(lambda: bookie.handler.stats.requests_refused > 0)
                    await lw.append(b"one")
                assert got[0] is not None and got[0].payload == b"one"
                await lw.close()
            await attacker.aclose()
            nursery.cancel_scope.cancel()
    finally:
        await store.aclose()


async def test_partly_sent_big_frames_cannot_pin_memory(tmp_path: Path) -> None:
    """Big frames sent in part (and never finished) count against a budget; past it, the
    connection holding one more gets TOO_MANY_REQUESTS and is closed; others go on."""
    from walkit._core.wire import FrameDecoder

    cfg = config([tmp_path / "d"], max_partial_frame_bytes=1 << 20)
    async with running_bookie(cfg) as (bookie, bid):
        frames = []
        streams = []
        async with connect(bid) as helper:
            for i in range(3):
                frames.append(encode_frame(helper.add_request(1, i, b"p" * (600 << 10))))
        for frame in frames[:2]:
            stream = await trio.open_tcp_stream(bid.host, bid.port)
            streams.append(stream)
            await stream.send_all(frame[: 400 << 10])
        await _wait_until(lambda: bookie.handler.stats.partial_frame_bytes == 800 << 10)
        third = await trio.open_tcp_stream(bid.host, bid.port)
        await third.send_all(frames[2][: 400 << 10])
        decoder = FrameDecoder()
        with trio.fail_after(20):
            while (body := decoder.next_frame()) is None:
                decoder.feed(await third.receive_some(65536))
        answer = decode_message(body)
        assert isinstance(answer, ErrorResponse)
        assert answer.status is StatusCode.TOO_MANY_REQUESTS and "partly" in answer.message
        with trio.fail_after(20):
            assert await third.receive_some(65536) == b""  # then closed
        await third.aclose()
        assert bookie.handler.bad_input.counts["too_many_partial_frames"] == 1
        # The first two finish their frames and are answered.
        for stream, frame in zip(streams, frames, strict=False):
            await stream.send_all(frame[400 << 10 :])
            decoder = FrameDecoder()
            with trio.fail_after(20):
                while (body := decoder.next_frame()) is None:
                    decoder.feed(await stream.receive_some(65536))
            assert _status(decode_message(body)) is StatusCode.OK
            await stream.aclose()
        await _wait_until(lambda: bookie.handler.stats.connections == 0)
        assert bookie.handler.stats.partial_frame_bytes == 0
