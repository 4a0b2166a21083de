"""Peers that hold a bookie's connections, memory or slots without using them, on real bookies
over TCP: silent and slow connections time out, idle ones make room for newcomers at
``max_connections``, queued answers are bounded over all connections, and adds in flight are
bounded in bytes. Found by an attack from outside (see docs/security.md, Bounds)."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest
import trio

from tests.bookie._helpers import Client, config, connect, running_bookie
from tests.client.conftest import cluster
from tests.client.conftest import connect as client_connect
from walkit._core.types import BookieId
from walkit._core.wire import (
    BatchReadRequest,
    ErrorResponse,
    FrameDecoder,
    Message,
    ReadFlag,
    ReadLacFlag,
    ReadLacRequest,
    ReadRequest,
    ReadResponse,
    StatusCode,
    decode_message,
    encode_frame,
)
from walkit_bookie import Bookie
from walkit_bookie._config import BookieConfig
from walkit_bookie.cli import build_parser, config_from_args
from walkit_bookie.server._admission import idle_victim
from walkit_bookie.server._connection import Connection, send_pieces
from walkit_bookie.server._disk_reads import BATCH_READ_MAX_BYTES

MiB = 1 << 20


async def _wait_until(predicate: Callable[[], bool], timeout: float = 20) -> None:
    with trio.fail_after(timeout):
        while not predicate():  # noqa: ASYNC110 (polls a counter)
            await trio.sleep(0.01)


async def _closed_by_bookie(stream: trio.abc.Stream, timeout: float = 10) -> bool:
    """Whether the bookie closes ``stream`` within ``timeout`` (reading what it sends)."""
    with trio.move_on_after(timeout):
        try:
            while await stream.receive_some(65536):
                pass
        except trio.BrokenResourceError:
            pass
        return True
    return False


def _lac_request(rid: int) -> bytes:
    return encode_frame(ReadLacRequest(rid, 1, ReadLacFlag.NONE, -1, 0, b""))


def _unread_stream_socket(bid: object, source: str | None = None) -> trio.SocketStream:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    if source is not None:
        sock.bind((source, 0))  # (another host on loopback: any 127/8 address)
    sock.connect((bid.host, bid.port))  # type: ignore[attr-defined]
    return trio.SocketStream(trio.socket.from_stdlib_socket(sock))


async def _peak(read: Callable[[], int], seconds: float) -> int:
    peak = 0
    with trio.move_on_after(seconds):
        while True:
            peak = max(peak, read())
            await trio.sleep(0.002)
    return peak


async def _big_entries_on_disk(bookie: Bookie, bid: BookieId, fill: bytes, count: int = 3) -> bytes:
    """Store ``count`` entries of ~4 MiB in ledger 1 and checkpoint them out of the write cache
    (reads of them go to disk); returns the entry."""
    entry = fill * (4 * MiB - 1024)
    async with connect(bid) as c:
        for e in range(count):
            assert (await c.add(1, e, entry)).status is StatusCode.OK
    await bookie.storage.checkpoint()
    return entry


async def test_a_connection_that_sends_no_request_is_closed(tmp_path: Path) -> None:
    cfg = config([tmp_path / "d"], first_request_timeout=0.5)
    async with running_bookie(cfg) as (bookie, bid):
        silent = await trio.open_tcp_stream(bid.host, bid.port)
        # A connection that sent a request may then stay idle: only its first is timed.
        talker = await trio.open_tcp_stream(bid.host, bid.port)
        await talker.send_all(_lac_request(1))
        assert await _closed_by_bookie(silent)
        assert bookie.handler.bad_input.counts["first_request_timeout"] == 1
        await trio.sleep(1.0)
        await talker.send_all(_lac_request(2))
        decoder = FrameDecoder()
        answers = 0
        with trio.fail_after(10):
            while answers < 2:
                decoder.feed(await talker.receive_some(65536))
                while decoder.next_frame() is not None:
                    answers += 1
        assert bookie.handler.stats.connections_timed_out == 1
        await talker.aclose()
        await silent.aclose()


async def test_a_frame_sent_too_slowly_is_cut_off(tmp_path: Path) -> None:
    """A slowloris: one byte of a frame at a time. Its connection is closed once the frame
    has taken ``frame_timeout``; a frame sent in pieces within it is served."""
    cfg = config([tmp_path / "d"], frame_timeout=1.0)
    async with running_bookie(cfg) as (bookie, bid):
        async with connect(bid) as helper:
            frame = encode_frame(helper.add_request(1, 0, b"x" * 1000))
        slow = await trio.open_tcp_stream(bid.host, bid.port)
        await slow.send_all(_lac_request(1))  # it spoke: the first-request timeout is over
        cut_off = False
        with trio.fail_after(15):
            for i in range(len(frame)):
                try:
                    await slow.send_all(frame[i : i + 1])
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    cut_off = True
                    break
                await trio.sleep(0.1)
                if bookie.handler.bad_input.counts.get("frame_timeout"):
                    cut_off = True
                    break
        assert cut_off
        assert await _closed_by_bookie(slow)
        assert bookie.handler.bad_input.counts["frame_timeout"] == 1
        await slow.aclose()
        # Sent in 4 pieces over 0.6 s: fine.
        steady = await trio.open_tcp_stream(bid.host, bid.port)
        quarter = len(frame) // 4
        for at in range(0, len(frame), quarter):
            await steady.send_all(frame[at : at + quarter])
            await trio.sleep(0.2)
        decoder = FrameDecoder()
        with trio.fail_after(10):
            while (body := decoder.next_frame()) is None:
                decoder.feed(await steady.receive_some(65536))
        answer = decode_message(body)
        assert getattr(answer, "status", None) is StatusCode.OK, answer
        assert bookie.handler.bad_input.counts["frame_timeout"] == 1
        await steady.aclose()


async def test_silent_connections_cannot_hold_the_slots(tmp_path: Path) -> None:
    """At ``max_connections``, a newcomer closes a connection that never sent a request (the
    probe's attack: 1,000 silent connections locked clients out until it left)."""
    cfg = config([tmp_path / "d"], max_connections=5, first_request_timeout=60)
    async with running_bookie(cfg) as (bookie, bid):
        silent = [await trio.open_tcp_stream(bid.host, bid.port) for _ in range(5)]
        await _wait_until(lambda: bookie.handler.stats.connections == 5)
        async with connect(bid) as c:
            with trio.fail_after(10):
                assert (await c.add(1, 0, b"x")).status is StatusCode.OK
            assert bookie.handler.stats.connections_evicted == 1
            assert bookie.handler.stats.connections == 5
        closed = 0
        for s in silent:
            with trio.move_on_after(0.5):
                if await s.receive_some(1) == b"":
                    closed += 1
            await s.aclose()
        assert closed == 1


async def test_busy_connections_are_never_evicted(tmp_path: Path) -> None:
    """Connections with a request in flight (here a long poll) are not idle: a newcomer over
    the cap is refused with TOO_MANY_REQUESTS, as before."""
    cfg = config([tmp_path / "d"], max_connections=3, evict_idle_after=0.1)
    async with running_bookie(cfg) as (bookie, bid):
        streams = []
        for i in range(3):
            stream = await trio.open_tcp_stream(bid.host, bid.port)
            poll = ReadLacRequest(1, 10**6 + i, ReadLacFlag.LONG_POLL, -1, 20_000, b"")
            await stream.send_all(encode_frame(poll))
            streams.append(stream)
        await _wait_until(lambda: bookie.handler.stats.long_polls == 3)
        await trio.sleep(0.3)
        async with connect(bid) as extra:
            with trio.fail_after(10):
                answer = await extra.call(
                    ReadLacRequest(extra.next_id(), 1, ReadLacFlag.NONE, -1, 0, b"")
                )
        assert isinstance(answer, ErrorResponse)
        assert answer.status is StatusCode.TOO_MANY_REQUESTS
        assert bookie.handler.stats.connections_evicted == 0
        for s in streams:
            await s.aclose()


def test_the_idle_victim_is_silent_first_then_idle_longest_then_slowest_frame() -> None:
    def conn(
        opened: float,
        last: float,
        spoke: bool,
        *,
        busy: bool = False,
        frame_since: float | None = None,
    ) -> Connection:
        return cast(
            "Connection",
            SimpleNamespace(
                opened=opened,
                last_active=last,
                spoke=spoke,
                closed=False,
                outstanding=int(busy),
                unsent=0,
                partial=0 if frame_since is None else 100,
                frame_since=frame_since or 0.0,
            ),
        )

    talked_long_ago = conn(0, 1, True)
    talked_lately = conn(0, 95, True)
    silent_old = conn(50, 50, False)
    silent_new = conn(99.9, 99.9, False)
    busy_silent = conn(10, 10, False, busy=True)
    slow_frame = conn(0, 99, True, frame_since=90)
    fresh_frame = conn(0, 99.9, True, frame_since=99.5)
    everyone = [talked_long_ago, talked_lately, silent_old, silent_new, busy_silent, slow_frame]
    assert idle_victim(everyone, 100, 10) is silent_old
    assert idle_victim([talked_lately, silent_new, busy_silent], 100, 10) is silent_new
    assert idle_victim([talked_long_ago, talked_lately, slow_frame], 100, 10) is talked_long_ago
    assert idle_victim([talked_lately, slow_frame, fresh_frame], 100, 10) is slow_frame
    assert idle_victim([talked_lately, fresh_frame, busy_silent], 100, 10) is None
    assert idle_victim([talked_lately], 100, 4) is talked_lately


async def test_a_client_whose_idle_connections_were_evicted_goes_on(
    memory_url: str, tmp_path: Path
) -> None:
    """The client reconnects on its next request: no failed add, no ensemble change."""
    options = {"max_connections": 2, "evict_idle_after": 0.3}
    async with (
        cluster(memory_url, tmp_path, 3, options=options) as bookies,
        client_connect(memory_url) as client,
    ):
        writer = await client.create_ledger(3, 3, 2)
        for i in range(5):
            await writer.append(b"before %d" % i)
        ensemble = writer.metadata.current_ensemble
        await trio.sleep(0.5)
        # Two newcomers on each bookie: the second takes the writer's idle slot.
        newcomers = []
        for bid in bookies.ids.values():
            for _ in range(2):
                stream = await trio.open_tcp_stream(bid.host, bid.port)
                await stream.send_all(_lac_request(1))
                newcomers.append(stream)
        await _wait_until(
            lambda: all(b.handler.stats.connections_evicted >= 1 for b in bookies.objects.values())
        )
        # The writer's connections are gone; once the newcomers have been idle a while, its
        # next add reconnects in their place.
        await trio.sleep(0.5)
        for i in range(5):
            await writer.append(b"after %d" % i)
        assert len(writer.metadata.ensembles) == 1 and writer.metadata.current_ensemble == ensemble
        await writer.close()
        reader = await client.open_ledger(writer.id)
        entries = [e.payload for e in await reader.read(0, 9)]
        assert entries == [b"before %d" % i for i in range(5)] + [b"after %d" % i for i in range(5)]
        for s in newcomers:
            await s.aclose()


async def test_a_peer_that_reads_no_answers_is_cut_off(tmp_path: Path) -> None:
    cfg = config([tmp_path / "d"], send_timeout=1.0, max_unsent_bytes=4 * MiB)
    async with running_bookie(cfg) as (bookie, bid):
        async with connect(bid) as c:
            assert (await c.add(1, 0, b"e" * (4 * MiB - 1024))).status is StatusCode.OK
        stream = _unread_stream_socket(bid)
        reads = b"".join(
            encode_frame(ReadRequest(i, 1, 0, ReadFlag.NONE, b"")) for i in range(1, 9)
        )
        await stream.send_all(reads)
        await _wait_until(lambda: bookie.handler.stats.unsent_bytes > 0)
        await _wait_until(lambda: bookie.handler.stats.connections == 0, timeout=15)
        assert bookie.handler.bad_input.counts["send_timeout"] == 1
        assert (
            bookie.handler.stats.unsent_bytes == 0
            and bookie.handler.stats.connections_timed_out == 1
        )
        await stream.aclose()


async def test_queued_answers_are_bounded_over_all_connections(tmp_path: Path) -> None:
    """Six peers each ask eight reads of a 4 MiB entry and read nothing: without a bound over
    all connections each one's queue grew to ``max_unsent_bytes`` (the probe grew a bookie to
    ~11 GB with 300 such peers). With it, reads wait while the total is over the bound (and a
    peer whose answers are queued is not read); a peer that reads goes on meanwhile."""
    total = 8 * MiB
    cfg = config([tmp_path / "d"], max_unsent_bytes_total=total, send_timeout=60)
    async with running_bookie(cfg) as (bookie, bid):
        entry = b"e" * (4 * MiB - 1024)
        async with connect(bid) as c:
            assert (await c.add(1, 0, entry)).status is StatusCode.OK
        peers = []
        for _ in range(6):
            stream = _unread_stream_socket(bid)
            reads = b"".join(
                encode_frame(ReadRequest(i, 1, 0, ReadFlag.NONE, b"")) for i in range(1, 9)
            )
            await stream.send_all(reads)
            peers.append(stream)
        peak = await _peak(lambda: bookie.handler.stats.unsent_bytes, 3)
        assert bookie.handler.stats.unsent_bytes >= total  # the attack did fill the bound
        # The bound, passed by one entry at most (each answer is queued only with room).
        assert peak < total + len(entry), peak / MiB
        held_back = bookie.handler.stats.reads_in_flight + bookie.handler.stats.stalled_connections
        assert held_back >= 1
        async with connect(bid) as reader:
            with trio.fail_after(10):
                for _ in range(3):
                    assert (await reader.read(1, 0)).status is StatusCode.OK
        for s in peers:
            await s.aclose()
        await _wait_until(lambda: bookie.handler.stats.unsent_bytes == 0)


async def test_adds_in_flight_are_bounded_in_bytes(tmp_path: Path) -> None:
    """64 adds of 1 MiB sent at once: the bookie stops reading at ``max_inflight_add_bytes``
    (not at 10,000 adds: the probe took a bookie to 8 GB with 4 MiB adds) and stores all."""
    cfg = config([tmp_path / "d"], max_inflight_add_bytes=2 * MiB)
    async with running_bookie(cfg) as (bookie, bid):
        async with connect(bid) as c:
            requests = [c.add_request(1, e, b"a" * (MiB - 1024)) for e in range(64)]
            peak = 0

            async def watch() -> None:
                nonlocal peak
                while True:
                    peak = max(peak, bookie.handler.stats.add_bytes_in_flight)
                    await trio.lowlevel.checkpoint()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                with trio.fail_after(60):
                    answers = await c.call_many(requests)
                nursery.cancel_scope.cancel()
        assert [getattr(a, "status", None) for a in answers] == [StatusCode.OK] * 64
        assert MiB <= peak <= 3 * MiB, peak / MiB
        assert bookie.handler.stats.add_bytes_in_flight == 0


def test_queued_answers_are_sent_in_pieces_without_copying_big_ones() -> None:
    big = b"b" * (3 * MiB + 5)
    pieces = list(send_pieces([b"a" * 10, b"c" * 20, big, b"d" * 7]))
    assert b"".join(pieces) == b"a" * 10 + b"c" * 20 + big + b"d" * 7
    assert [len(p) for p in pieces] == [30, MiB, MiB, MiB, 5, 7]
    assert all(isinstance(p, memoryview) for p in pieces[1:5])  # slices, not copies
    many = [b"x" * 1000] * 3000
    assert [len(p) for p in send_pieces(many)][:2] == [1_049_000, 1_049_000]
    (only,) = send_pieces([big[:100]])
    assert only == big[:100]


async def test_reads_answered_from_disk_cannot_queue_gigabytes(tmp_path: Path) -> None:
    """Reads taken at once are answered later, from disk: the connection's reader cannot hold
    them back. A re-attack found one connection's 1,000 reads of a 4 MiB entry, sent at once
    and never read, queued 9.5 GB. Now a disk read is served only while its connection has
    room (``max_unsent_bytes``) and all connections have (``max_unsent_bytes_total``); the
    rest wait. A peer that reads nothing while others wait for the total is closed."""
    # (each peer's answers stop at ~20 MiB, max_unsent_bytes and one entry: two pass 36 MiB)
    cfg = config(
        [tmp_path / "d"], send_timeout=60, max_unsent_bytes_total=36 * MiB, evict_unread_after=1
    )
    async with running_bookie(cfg) as (bookie, bid):
        entry = await _big_entries_on_disk(bookie, bid, b"e")
        assert bookie.storage.cached_entry(1, 0) is None  # the reads go to disk
        reads = b"".join(
            encode_frame(ReadRequest(i, 1, i % 3, ReadFlag.NONE, b"")) for i in range(60)
        )
        first = _unread_stream_socket(bid)
        await first.send_all(reads)
        peak = await _peak(lambda: bookie.handler.stats.unsent_bytes, 2)
        # max_unsent_bytes, passed by one entry at most.
        assert peak < cfg.max_unsent_bytes + len(entry), peak / MiB
        assert bookie.handler.stats.reads_in_flight > 0  # the rest wait
        assert bookie.handler.reads_refused_unsent == 0
        assert bookie.handler.stats.connections_evicted_unread == 0  # under the total: no eviction
        # A second such peer takes the total to its bound: the peer stuck longest is closed.
        second = _unread_stream_socket(bid)
        await second.send_all(reads)
        peak = await _peak(lambda: bookie.handler.stats.unsent_bytes, 3)
        assert peak < cfg.max_unsent_bytes_total + len(entry), peak / MiB
        await _wait_until(lambda: bookie.handler.stats.connections_evicted_unread > 0)
        assert await _closed_by_bookie(first)
        async with connect(bid) as reader:  # another client reads on
            with trio.fail_after(10):
                assert (await reader.read(1, 2)).status is StatusCode.OK
        await second.aclose()
        await _wait_until(lambda: bookie.handler.stats.reads_in_flight == 0)


async def test_batch_reads_answered_from_disk_are_bounded_as_reads_are(tmp_path: Path) -> None:
    """A batch read's answer is up to 1 MiB of entries (or one entry): 400 of them sent at once
    and never read queue no more than ``max_unsent_bytes`` and one answer, as single reads."""
    cfg = config([tmp_path / "d"], send_timeout=60)
    async with running_bookie(cfg) as (bookie, bid):
        async with connect(bid) as c:
            for e in range(64):
                assert (await c.add(1, e, b"b" * 200_000)).status is StatusCode.OK
        await bookie.storage.checkpoint()
        assert bookie.storage.cached_entry(1, 0) is None  # the reads go to disk
        reads = b"".join(
            encode_frame(BatchReadRequest(i, 1, (i * 16) % 64, 16, 64 * MiB)) for i in range(400)
        )
        peer = _unread_stream_socket(bid, "127.0.0.2")  # (reads take turns per address)
        await peer.send_all(reads)
        peak = await _peak(lambda: bookie.handler.stats.unsent_bytes, 2)
        # (an answer's frame: 1 MiB of packets, its header and a length per packet)
        assert 0 < peak < cfg.max_unsent_bytes + BATCH_READ_MAX_BYTES + 4096, peak / MiB
        assert bookie.handler.stats.reads_in_flight > 0  # the rest wait
        async with connect(bid) as reader:  # another client reads on
            with trio.fail_after(10):
                assert (await reader.read(1, 2)).status is StatusCode.OK
        await peer.aclose()
        await _wait_until(lambda: bookie.handler.stats.reads_in_flight == 0)


async def test_a_client_takes_turns_with_a_stranger_whose_reads_came_first(
    tmp_path: Path,
) -> None:
    """Re-attack (2026-11-26): 400 connections of one host each asked a 4 MiB entry from disk
    and read nothing; a client's reads, sent after theirs, waited for all of them (two 5 s read
    timeouts in a row): the evictions made room for the stranger's next reads first. Waiting
    reads now take turns per client (address): the client is served at the first room made."""
    cfg = config(
        [tmp_path / "d"], send_timeout=60, max_unsent_bytes_total=16 * MiB, evict_unread_after=1
    )
    async with running_bookie(cfg) as (bookie, bid):
        await _big_entries_on_disk(bookie, bid, b"t")
        handler = bookie.handler
        hogs = []
        for i in range(40):
            hogs.append(_unread_stream_socket(bid, source="127.0.0.2"))
            await hogs[-1].send_all(encode_frame(ReadRequest(i, 1, i % 3, ReadFlag.NONE, b"")))
        await _wait_until(lambda: handler.stats.unsent_bytes >= cfg.max_unsent_bytes_total)
        await _wait_until(lambda: handler.stats.reads_in_flight >= 30)  # the stranger's reads wait
        async with connect(bid) as reader:
            with trio.fail_after(30):
                answer = await reader.read(1, 1)
            evicted = handler.stats.connections_evicted_unread
        assert answer.status is StatusCode.OK
        # Served once the first stuck connections were closed, not after the stranger's
        # other waiting reads (about nine more rounds of evictions).
        assert 1 <= evicted <= 8, evicted
        for hog in hogs:
            await hog.aclose()
        await _wait_until(lambda: handler.stats.unsent_bytes == 0)


@pytest.mark.parametrize("where", ["disk", "cache"])
async def test_many_peers_that_read_nothing_cannot_hold_the_memory(
    tmp_path: Path, where: str
) -> None:
    """Re-attacks: 400 connections each asked for one 4 MiB entry from disk and read nothing;
    each could queue one answer whatever the total (1.67 GB); then 990 did the same with an
    entry still in the write cache, answered at once (4.1 GB). Now the total holds (one entry
    over at most), the others' reads wait, the peers stuck longest are closed after
    ``evict_unread_after``, and a client that reads is served."""
    cfg = config(
        [tmp_path / "d"], send_timeout=60, max_unsent_bytes_total=16 * MiB, evict_unread_after=1
    )
    async with running_bookie(cfg) as (bookie, bid):
        if where == "disk":
            entry = await _big_entries_on_disk(bookie, bid, b"m")
        else:
            entry = b"c" * (4 * MiB - 1024)
            async with connect(bid) as c:
                for e in range(3):
                    assert (await c.add(1, e, entry)).status is StatusCode.OK
            assert bookie.storage.cached_entry(1, 2) is not None
        hogs = []
        for i in range(40):  # 160 MiB of answers asked for
            hogs.append(_unread_stream_socket(bid))
            await hogs[-1].send_all(encode_frame(ReadRequest(i, 1, i % 3, ReadFlag.NONE, b"")))
        peak = await _peak(lambda: bookie.handler.stats.unsent_bytes, 2)
        # The total, passed by one entry at most.
        assert peak < cfg.max_unsent_bytes_total + len(entry), peak / MiB
        await _wait_until(lambda: bookie.handler.stats.connections_evicted_unread > 0)
        async with connect(bid) as reader:
            with trio.fail_after(15):
                assert (await reader.read(1, 1)).status is StatusCode.OK
        assert bookie.handler.reads_refused_unsent == 0  # waited, not refused
        for hog in hogs:
            await hog.aclose()
        await _wait_until(lambda: bookie.handler.stats.unsent_bytes == 0)


async def test_a_client_whose_read_waited_for_room_is_not_closed_as_unread(
    tmp_path: Path,
) -> None:
    """A re-attack: honest clients whose reads waited over ``evict_unread_after`` for room
    were closed mid-answer as "answers not read": their connection's clock was the last time
    its writer ran, and eviction ran right after their answer was queued, before the writer.
    The clock now starts when answers are queued on an empty queue."""
    cfg = config(
        [tmp_path / "d"], send_timeout=60, max_unsent_bytes_total=16 * MiB, evict_unread_after=1
    )
    async with running_bookie(cfg) as (bookie, bid):
        entry = await _big_entries_on_disk(bookie, bid, b"h")
        # A client that reads all the time, through small socket buffers (so an answer of
        # 4 MiB stays queued a while, as over a real network).
        reader = Client(_unread_stream_socket(bid))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader._reader)
            assert (await reader.read(1, 0)).status is StatusCode.OK  # then idle, 1.5 s
            await trio.sleep(1.5)
            hogs = []
            for i in range(12):  # 48 MiB asked for, 16 MiB allowed: reads keep waiting
                hogs.append(_unread_stream_socket(bid))
                await hogs[-1].send_all(encode_frame(ReadRequest(i, 1, i % 3, ReadFlag.NONE, b"")))
            await _wait_until(
                lambda: bookie.handler.stats.unsent_bytes >= cfg.max_unsent_bytes_total
            )
            # Three reads at once: they wait for room, then are answered while more peers'
            # reads (sent after them) wait (12 MiB: more than the socket takes at once, so
            # some stays queued while the bookie looks for peers to close).
            reads = [ReadRequest(reader.next_id(), 1, e, ReadFlag.NONE, b"") for e in range(3)]
            answers: list[Message] = []

            async def read_all() -> None:
                with trio.fail_after(20):
                    answers.extend(await reader.call_many(reads))

            async with trio.open_nursery() as readers:
                readers.start_soon(read_all)
                await trio.sleep(0.2)
                for i in range(12, 24):
                    hogs.append(_unread_stream_socket(bid))
                    await hogs[-1].send_all(
                        encode_frame(ReadRequest(i, 1, i % 3, ReadFlag.NONE, b""))
                    )
            for answer in answers:
                assert isinstance(answer, ReadResponse), answer
                assert answer.status is StatusCode.OK and answer.packet.endswith(entry)
            assert bookie.handler.stats.connections_evicted_unread > 0  # the hogs were
            nursery.cancel_scope.cancel()
        for hog in hogs:
            await hog.aclose()


async def test_long_polls_carry_entries_only_while_there_is_room(tmp_path: Path) -> None:
    """Long polls are not reads in flight, so their piggybacked entries skipped every read
    bound (1,500 of them queued 6.3 GB in the re-attack). An entry now rides along only while
    the connection has room; otherwise the poll answers the LAC alone."""
    cfg = config([tmp_path / "d"], send_timeout=60)
    async with running_bookie(cfg) as (bookie, bid):
        entry = b"p" * (4 * MiB - 1024)
        async with connect(bid) as c:
            for e in range(6):
                assert (await c.add(1, e, entry, lac=e - 1)).status is StatusCode.OK
        await bookie.storage.checkpoint()
        stream = _unread_stream_socket(bid)
        flags = ReadLacFlag.LONG_POLL | ReadLacFlag.PIGGYBACK_ENTRY
        await stream.send_all(
            b"".join(
                encode_frame(ReadLacRequest(i, 1, flags, i % 4, 10_000, b"")) for i in range(50)
            )
        )
        peak = await _peak(lambda: bookie.handler.stats.unsent_bytes, 3)
        assert peak <= cfg.max_unsent_bytes + 2 * len(entry), peak / MiB
        await _wait_until(lambda: bookie.handler.stats.long_polls == 0)
        await stream.aclose()


async def test_reads_waiting_for_a_peer_that_does_not_read_do_not_hold_the_read_slots(
    tmp_path: Path,
) -> None:
    """Peers that read nothing, with more reads in flight than the bookie has read slots,
    would stop every socket (at ``max_inflight_reads`` none is read) if their reads waited
    for room; at the limit they are refused instead, and another client reads on."""
    cfg = config([tmp_path / "d"], send_timeout=60, max_inflight_reads=50)
    async with running_bookie(cfg) as (bookie, bid):
        await _big_entries_on_disk(bookie, bid, b"w")
        reads = b"".join(
            encode_frame(ReadRequest(i, 1, i % 3, ReadFlag.NONE, b"")) for i in range(40)
        )
        hogs = []
        for _ in range(5):  # 200 reads for 50 slots
            hogs.append(_unread_stream_socket(bid))
            await hogs[-1].send_all(reads)
        # Each hog's reads are served until its queued answers pass max_unsent_bytes; those
        # taken before then wait. Whether they filled every slot depends on how fast the disk
        # reader answered while the requests were taken; if they did, some are refused.
        handler = bookie.handler
        await _wait_until(
            lambda: (
                len(handler.client_connections) == 5
                and all(c.unsent >= cfg.max_unsent_bytes for c in handler.client_connections)
                and handler.stats.reads_in_flight < cfg.max_inflight_reads
            )
        )
        async with connect(bid) as reader:
            with trio.fail_after(10):
                assert (await reader.read(1, 1)).status is StatusCode.OK
        for hog in hogs:
            await hog.aclose()


def test_the_bound_options_reach_the_config(capsys: pytest.CaptureFixture[str]) -> None:
    def config_of(*args: str) -> BookieConfig:
        return config_from_args(build_parser().parse_args(["--data-dir", "x", *args]))

    c = config_of(
        *("--first-request-timeout", "3", "--frame-timeout", "4", "--send-timeout", "5"),
        *("--evict-idle-after", "6", "--evict-unread-after", "0.5"),
        *("--max-unsent-bytes-total", "64MiB", "--max-inflight-add-bytes", "32MiB"),
        *("--max-connections-per-address", "50"),
    )
    assert (c.first_request_timeout, c.frame_timeout, c.send_timeout) == (3, 4, 5)
    assert (c.evict_idle_after, c.evict_unread_after) == (6, 0.5)
    assert (c.max_unsent_bytes_total, c.max_inflight_add_bytes) == (64 * MiB, 32 * MiB)
    assert c.max_connections_per_address == 50
    assert config_of().evict_unread_after == 2.0
    assert config_of().max_connections_per_address is None
    for option, bad in [
        *(("--evict-unread-after", b) for b in ("0", "-1", "soon")),
        *(("--max-connections-per-address", b) for b in ("0", "-3", "1.5", "x")),
    ]:
        with pytest.raises(SystemExit):
            config_of(option, bad)
        assert option in capsys.readouterr().err
