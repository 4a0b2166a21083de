"""Request semantics of one bookie: adds, reads, master key, fencing, LAC and long polls."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.bookie._helpers import (
    KEY,
    Client,
    config,
    connect,
    http_request,
    packet,
    payload_for,
    running_bookie,
)
from walkit._core.digest import master_key, read_header
from walkit._core.wire import (
    AddFlag,
    AddRequest,
    ReadLacFlag,
    ReadRequest,
    StatusCode,
    encode_frame,
)
from walkit_bookie import Bookie

OTHER_KEY = master_key(b"not the password")


async def test_add_then_read_back_and_missing_answers(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (_, bid), connect(bid) as c:
        assert (await c.add(1, 0, b"first")).status is StatusCode.OK
        assert (await c.add(1, 2, b"third", lac=0)).status is StatusCode.OK  # striping: a hole
        got = await c.read(1, 0)
        assert got.status is StatusCode.OK
        assert got.packet == packet(1, 0, b"first")
        assert (await c.read(1, 1)).status is StatusCode.NO_SUCH_ENTRY
        assert (await c.read(1, 3)).status is StatusCode.NO_SUCH_ENTRY
        assert (await c.read(1, -1)).status is StatusCode.NO_SUCH_ENTRY
        assert (await c.read(2, 0)).status is StatusCode.NO_SUCH_LEDGER
        assert (await c.read_lac(2)).status is StatusCode.NO_SUCH_LEDGER
        lac = await c.read_lac(1)
        assert (lac.status, lac.lac) == (StatusCode.OK, 0)


async def test_lac_is_max_of_packet_lacs_and_explicit_lac(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (_, bid), connect(bid) as c:
        for e in range(5):
            await c.add(4, e, payload_for(4, e), lac=e - 1)
        assert (await c.read_lac(4)).lac == 3
        assert (await c.write_lac(4, 4)).status is StatusCode.OK
        assert (await c.read_lac(4)).lac == 4
        assert (await c.write_lac(4, 2)).status is StatusCode.OK  # never goes back
        assert (await c.read_lac(4)).lac == 4
        assert (await c.write_lac(4, 9, key=OTHER_KEY)).status is StatusCode.UNAUTHORIZED_ACCESS


async def test_bad_add_packets_are_refused(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (_, bid), connect(bid) as c:
        wrong_entry = AddRequest(c.next_id(), 1, 5, KEY, packet(1, 6, b"x"))
        wrong_ledger = AddRequest(c.next_id(), 1, 5, KEY, packet(2, 5, b"x"))
        short = AddRequest(c.next_id(), 1, 5, KEY, b"short")
        negative = AddRequest(c.next_id(), 1, -3, KEY, packet(1, -3, b"x"))
        for req in (wrong_entry, wrong_ledger, short, negative):
            answer = await c.call(req)
            assert answer.status is StatusCode.BAD_REQUEST  # type: ignore[union-attr]
        assert (await c.read(1, 5)).status is StatusCode.NO_SUCH_LEDGER


async def test_master_key_mismatch_is_refused(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (bookie, bid), connect(bid) as c:
        assert (await c.add(1, 0, b"a")).status is StatusCode.OK
        assert (await c.add(1, 1, b"b", key=OTHER_KEY)).status is StatusCode.UNAUTHORIZED_ACCESS
        fence_read = await c.read(1, 0, fence=True, key=OTHER_KEY)
        assert fence_read.status is StatusCode.UNAUTHORIZED_ACCESS
        fence_lac = await c.read_lac(1, flags=ReadLacFlag.FENCE, key=OTHER_KEY)
        assert fence_lac.status is StatusCode.UNAUTHORIZED_ACCESS
        info = bookie.ledger_info(1)
        assert info is not None and not info.fenced
        # Normal reads need no key.
        assert (await c.read(1, 0)).status is StatusCode.OK
        assert (await c.read(1, 1)).status is StatusCode.NO_SUCH_ENTRY


async def test_fencing_refuses_normal_adds_and_takes_idempotent_recovery_adds(
    tmp_path: Path,
) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (_, bid), connect(bid) as c:
        for e in range(3):
            await c.add(1, e, payload_for(1, e), lac=e - 1)
        fenced = await c.read_lac(1, flags=ReadLacFlag.FENCE)
        assert (fenced.status, fenced.lac) == (StatusCode.OK, 1)
        assert (await c.add(1, 3, b"late")).status is StatusCode.LEDGER_FENCED
        recovery = {"flags": AddFlag.RECOVERY, "lac": 1}
        assert (await c.add(1, 2, payload_for(1, 2), **recovery)).status is StatusCode.OK
        assert (await c.add(1, 2, payload_for(1, 2), **recovery)).status is StatusCode.OK
        assert (await c.add(1, 3, b"rewritten", **recovery)).status is StatusCode.OK
        assert (await c.read(1, 2)).packet == packet(1, 2, payload_for(1, 2), 1)
        assert (await c.read(1, 3)).packet == packet(1, 3, b"rewritten", 1)
        # A recovery read fences too, and reads: the entry is there.
        again = await c.read(1, 3, fence=True)
        assert again.status is StatusCode.OK


async def test_fencing_an_unknown_ledger_keeps_a_late_writer_out(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (_, bid), connect(bid) as c:
        fenced = await c.read(9, 0, fence=True)
        assert fenced.status is StatusCode.NO_SUCH_ENTRY
        assert (await c.add(9, 0, b"late writer")).status is StatusCode.LEDGER_FENCED
        lac = await c.read_lac(9)
        assert (lac.status, lac.lac) == (StatusCode.OK, -1)


async def test_fencing_is_durable_across_a_clean_restart(tmp_path: Path) -> None:
    cfg = config([tmp_path / "j", tmp_path / "l"])
    async with running_bookie(cfg) as (_, bid), connect(bid) as c:
        await c.add(1, 0, b"a")
        assert (await c.read_lac(1, flags=ReadLacFlag.FENCE)).status is StatusCode.OK
    async with running_bookie(cfg) as (bookie, bid2), connect(bid2) as c:
        assert bid2 == bid  # port 0 reuses the cookie's port
        assert (await c.add(1, 1, b"b")).status is StatusCode.LEDGER_FENCED
        assert (await c.read(1, 0)).packet == packet(1, 0, b"a")
        info = bookie.ledger_info(1)
        assert info is not None and info.fenced and info.master_key == KEY


async def test_long_poll_returns_on_a_new_lac_and_on_timeout(tmp_path: Path) -> None:
    async with (
        running_bookie(config([tmp_path / "d"])) as (bookie, bid),
        connect(bid) as poller,
        connect(bid) as writer,
    ):
        await writer.add(3, 0, b"zero")
        await writer.add(3, 1, b"one", lac=0)
        assert (await poller.read_lac(3)).lac == 0
        flags = ReadLacFlag.LONG_POLL | ReadLacFlag.PIGGYBACK_ENTRY
        # Already past previous_lac: answers at once, with entry previous_lac + 1.
        now = await poller.read_lac(3, flags=flags, previous_lac=-1, timeout_ms=60_000)
        assert (now.lac, now.packet) == (0, packet(3, 0, b"zero"))
        result: dict[str, object] = {}

        async def poll() -> None:
            result["answer"] = await poller.read_lac(
                3, flags=flags, previous_lac=0, timeout_ms=60_000
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            await _until_polls(bookie, 1)
            assert "answer" not in result  # waiting for a newer LAC
            await writer.add(3, 2, b"two", lac=1)
        answer = result["answer"]
        assert answer.status is StatusCode.OK  # type: ignore[attr-defined]
        assert answer.lac == 1  # type: ignore[attr-defined]
        assert answer.packet == packet(3, 1, b"one", 0)  # type: ignore[attr-defined]
        # Timeout: OK with the current LAC and no entry.
        timed = await poller.read_lac(3, flags=flags, previous_lac=1, timeout_ms=50)
        assert (timed.status, timed.lac, timed.packet) == (StatusCode.OK, 1, b"")
        # An explicit LAC wakes long polls too.
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_poll_into, poller, result, 1)
            await _until_polls(bookie, 1)
            await writer.write_lac(3, 2)
        assert result["second"].lac == 2  # type: ignore[attr-defined]


async def _until_polls(bookie: Bookie, count: int) -> None:
    """Wait until the bookie holds ``count`` long polls (they are parked, not answered)."""
    with trio.fail_after(10):
        while bookie.handler.stats.long_polls != count:  # noqa: ASYNC110 (the bookie's own count)
            await trio.sleep(0.005)


async def _poll_into(poller: object, result: dict[str, object], previous: int) -> None:
    result["second"] = await poller.read_lac(  # type: ignore[attr-defined]
        3, flags=ReadLacFlag.LONG_POLL, previous_lac=previous, timeout_ms=60_000
    )


async def test_many_requests_in_flight_answered_by_request_id(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (_, bid), connect(bid) as c:
        adds = [c.add_request(5, e, payload_for(5, e, 300), lac=e - 1) for e in range(300)]
        answers = await c.call_many(adds)
        assert [a.request_id for a in answers] == [r.request_id for r in adds]
        assert all(a.status is StatusCode.OK for a in answers)  # type: ignore[union-attr]
        for e in (0, 150, 299):
            got = await c.read(5, e)
            assert read_header(got.packet).entry_id == e
            assert got.packet.endswith(payload_for(5, e, 300))


async def test_small_in_flight_limits_still_answer_everything(tmp_path: Path) -> None:
    cfg = config([tmp_path / "d"], max_inflight_adds=8, max_inflight_reads=4, max_unsent_bytes=1024)
    async with running_bookie(cfg) as (bookie, bid):

        async def worker(ledger: int) -> None:
            async with connect(bid) as c:
                adds = [c.add_request(ledger, e, payload_for(ledger, e)) for e in range(300)]
                assert all(a.status is StatusCode.OK for a in await c.call_many(adds))  # type: ignore[union-attr]
                reads = [ReadRequest(c.next_id(), ledger, e) for e in range(0, 300, 3)]
                answers = await c.call_many(reads)
                assert all(a.status is StatusCode.OK for a in answers)  # type: ignore[union-attr]

        async with trio.open_nursery() as nursery:
            for ledger in (1, 2, 3):
                nursery.start_soon(worker, ledger)
        assert (
            bookie.handler.stats.adds_in_flight == 0 and bookie.handler.stats.reads_in_flight == 0
        )


async def test_a_peer_that_never_reads_only_stalls_itself(tmp_path: Path) -> None:
    cfg = config([tmp_path / "d"], max_unsent_bytes=64 * 1024, http_port=0)
    big = b"x" * (256 * 1024)
    async with running_bookie(cfg) as (bookie, bid):
        async with connect(bid) as writer:
            assert (await writer.add(1, 0, big)).status is StatusCode.OK
        stream = await trio.open_tcp_stream(bid.host, bid.port)
        try:
            greedy = Client(stream)  # asks for 2000 x 256 KiB and never reads an answer
            before = bookie.handler.stats.requests
            await stream.send_all(
                b"".join(encode_frame(ReadRequest(greedy.next_id(), 1, 0)) for _ in range(2000))
            )
            async with connect(bid) as other:
                assert (await other.add(2, 0, b"unaffected")).status is StatusCode.OK
                assert (await other.read(1, 0)).packet == packet(1, 0, big)
            # It stops taking that peer's requests once the answers it could not deliver pass
            # the limit (what is sent fits the kernel's socket buffers, ~36 MiB here): the
            # connection shows as stalled, and stays so while the peer reads nothing.
            with trio.fail_after(10):
                while bookie.handler.stats.stalled_connections != 1:  # noqa: ASYNC110 (its own count)
                    await trio.sleep(0.005)
            assert bookie.handler.stats.requests - before - 2 < 400
            assert bookie.handler.stats.stalled_connections == 1
            assert bookie.admin_address is not None
            get = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
            _status, metrics = await http_request(bookie.admin_address, get)
            assert b"walkit_bookie_stalled_connections 1.0" in metrics
        finally:
            await trio.aclose_forcefully(stream)
        # A peer gone releases it.
        with trio.fail_after(10):
            while bookie.handler.stats.stalled_connections:  # noqa: ASYNC110 (its own count)
                await trio.sleep(0.005)


async def test_long_poll_on_an_unknown_ledger_waits_for_its_entries(tmp_path: Path) -> None:
    async with (
        running_bookie(config([tmp_path / "d"])) as (bookie, bid),
        connect(bid) as poller,
        connect(bid) as writer,
    ):
        # Without LONG_POLL an unknown ledger is answered at once, as before.
        assert (await poller.read_lac(7)).status is StatusCode.NO_SUCH_LEDGER
        piggyback = await poller.read_lac(7, flags=ReadLacFlag.PIGGYBACK_ENTRY)
        assert piggyback.status is StatusCode.NO_SUCH_LEDGER
        flags = ReadLacFlag.LONG_POLL | ReadLacFlag.PIGGYBACK_ENTRY
        result: dict[str, object] = {}

        async def poll() -> None:
            result["answer"] = await poller.read_lac(
                7, flags=flags, previous_lac=-1, timeout_ms=60_000
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(poll)
            with trio.fail_after(10):
                while bookie.handler.stats.long_polls == 0:  # noqa: ASYNC110 (the bookie holds the poll)
                    await trio.sleep(0.005)
            assert bookie.ledger_info(7) is None
            await writer.add(7, 0, b"zero")  # the ledger exists now, its LAC is still -1
            assert "answer" not in result
            await writer.add(7, 1, b"one", lac=0)
        answer = result["answer"]
        assert answer.status is StatusCode.OK  # type: ignore[attr-defined]
        assert answer.lac == 0  # type: ignore[attr-defined]
        assert answer.packet == packet(7, 0, b"zero")  # type: ignore[attr-defined]
        # previous_lac below -1: the ledger's first entry (LAC -1) is news already.
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_poll_unknown, poller, result)
                while bookie.handler.stats.long_polls == 0:  # noqa: ASYNC110 (the bookie holds the poll)
                    await trio.sleep(0.005)
                await writer.add(10, 0, b"zero")
        first = result["first"]
        assert (first.status, first.lac) == (StatusCode.OK, -1)  # type: ignore[attr-defined]
        # Still unknown when the poll times out: NO_SUCH_LEDGER then.
        timed = await poller.read_lac(8, flags=flags, previous_lac=-1, timeout_ms=50)
        assert timed.status is StatusCode.NO_SUCH_LEDGER
        assert bookie.handler.stats.reads_in_flight == 0 and bookie.handler.stats.long_polls == 0


async def test_fencing_an_unknown_ledger_with_a_long_poll_still_fences_at_once(
    tmp_path: Path,
) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (_, bid), connect(bid) as c:
        fenced = await c.read_lac(
            9, flags=ReadLacFlag.FENCE | ReadLacFlag.LONG_POLL, previous_lac=-2, timeout_ms=60_000
        )
        assert (fenced.status, fenced.lac) == (StatusCode.OK, -1)
        assert (await c.add(9, 0, b"late writer")).status is StatusCode.LEDGER_FENCED


async def _poll_unknown(poller: Client, result: dict[str, object]) -> None:
    result["first"] = await poller.read_lac(
        10, flags=ReadLacFlag.LONG_POLL, previous_lac=-2, timeout_ms=60_000
    )
