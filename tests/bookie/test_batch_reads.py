"""Batch reads (BATCH_READ_REQUEST, BookKeeper's BP-62): one answer with a run of consecutive
entries, from the write cache or the entry logs, within the byte limits; bad requests and
missing entries answered clearly; the read rules apply."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.bookie._helpers import Client, config, connect, packet, payload_for, running_bookie
from tests.security.test_authorization import RULES, TOKENS, _refusal, as_principal
from walkit._core.wire import (
    MAX_BATCH_READ_ENTRIES,
    BatchReadRequest,
    BatchReadResponse,
    ErrorResponse,
    Message,
    StatusCode,
    decode_message,
    encode_batch_read_request,
    encode_batch_read_response_parts,
    encode_frame,
)
from walkit.errors import RemoteProtocolError
from walkit_bookie.server._disk_reads import BATCH_READ_MAX_BYTES


async def batch(
    c: Client, ledger: int, first: int, count: int, max_bytes: int = 1 << 20
) -> Message:
    return await c.call(BatchReadRequest(c.next_id(), ledger, first, count, max_bytes))


def test_batch_messages_round_trip_and_refuse_malformed_bodies() -> None:
    request = BatchReadRequest(9, 3, 5, 16, 1 << 20)
    frame = encode_frame(request)
    assert decode_message(frame[4:]) == request
    assert encode_batch_read_request(9, 3, 5, 16, 1 << 20) == frame
    big = b"x" * 70_000
    for packets in [(), (b"",), (b"ab", big, b"c"), tuple(bytes([i]) * i for i in range(200))]:
        answer = BatchReadResponse(9, StatusCode.OK, 3, 5, packets)
        frame = encode_frame(answer)
        assert decode_message(frame[4:]) == answer
        assert b"".join(encode_batch_read_response_parts(9, 0, 3, 5, packets)) == frame
    body = encode_frame(BatchReadResponse(9, StatusCode.OK, 3, 5, (b"ab", b"cd")))[4:]
    for bad in [
        body[:-1],  # a packet cut short
        body + b"\0",  # bytes after the last packet
        body[:-6],  # the second packet's length prefix cut
        encode_frame(request)[4:] + b"\0",  # a request longer than its fields
    ]:
        with pytest.raises(RemoteProtocolError):
            decode_message(bad)
    # A count above the limit is refused before anything is read.
    too_many = bytearray(encode_frame(BatchReadResponse(9, StatusCode.OK, 3, 5, ()))[4:])
    too_many[-4:] = (MAX_BATCH_READ_ENTRIES + 1).to_bytes(4, "big")
    with pytest.raises(RemoteProtocolError, match="at most"):
        decode_message(bytes(too_many))


@pytest.mark.parametrize("from_disk", [False, True])
async def test_a_batch_answers_a_run_of_consecutive_entries(
    tmp_path: Path, from_disk: bool
) -> None:
    cfg = config([tmp_path / "d"], checkpoint_interval=3600)
    async with running_bookie(cfg) as (bookie, bid), connect(bid) as c:
        for e in range(40):
            assert (await c.add(4, e, payload_for(4, e, 3000), lac=e - 1)).status is StatusCode.OK
        assert (await c.add(4, 42, payload_for(4, 42, 3000), lac=39)).status is StatusCode.OK
        if from_disk:
            await bookie.storage.checkpoint()
            assert bookie.storage.cached_entry(4, 5) is None
        answer = await batch(c, 4, 5, 10)
        assert isinstance(answer, BatchReadResponse) and answer.status is StatusCode.OK
        assert answer.first_entry_id == 5
        assert list(answer.packets) == [
            packet(4, e, payload_for(4, e, 3000), e - 1) for e in range(5, 15)
        ]
        # Up to the first entry it does not have (40, 41 were never added).
        answer = await batch(c, 4, 35, 64)
        assert isinstance(answer, BatchReadResponse) and len(answer.packets) == 5
        # Within max_bytes (each packet is 3000 bytes and a header), but never empty.
        answer = await batch(c, 4, 0, 64, max_bytes=10_000)
        assert isinstance(answer, BatchReadResponse) and len(answer.packets) == 3
        answer = await batch(c, 4, 0, 64, max_bytes=1)
        assert isinstance(answer, BatchReadResponse) and len(answer.packets) == 1
        # Missing first entry, unknown ledger.
        answer = await batch(c, 4, 40, 4)
        assert isinstance(answer, BatchReadResponse) and answer.status is StatusCode.NO_SUCH_ENTRY
        assert answer.packets == ()
        answer = await batch(c, 77, 0, 4)
        assert isinstance(answer, BatchReadResponse)
        assert answer.status is StatusCode.NO_SUCH_LEDGER


async def test_a_batch_answer_holds_at_most_the_bookies_limit(tmp_path: Path) -> None:
    size = 200_000
    async with running_bookie(config([tmp_path / "d"])) as (_, bid), connect(bid) as c:
        for e in range(12):
            assert (await c.add(6, e, payload_for(6, e, size), lac=e - 1)).status is StatusCode.OK
        answer = await batch(c, 6, 0, 12, max_bytes=64 << 20)
        assert isinstance(answer, BatchReadResponse)
        assert sum(map(len, answer.packets)) <= BATCH_READ_MAX_BYTES
        assert len(answer.packets) == BATCH_READ_MAX_BYTES // (size + 32)


async def test_bad_batch_reads_are_refused_and_the_connection_serves_on(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (bookie, bid), connect(bid) as c:
        assert (await c.add(2, 0, b"zero")).status is StatusCode.OK
        for count, max_bytes in [(0, 100), (MAX_BATCH_READ_ENTRIES + 1, 100), (4, 0)]:
            answer = await batch(c, 2, 0, count, max_bytes)
            assert isinstance(answer, ErrorResponse), answer
            assert answer.status is StatusCode.BAD_REQUEST
            assert "a batch read asks for 1 to 1024 entries" in answer.message
        answer = await batch(c, 2, -5, 4)
        assert isinstance(answer, BatchReadResponse) and answer.status is StatusCode.NO_SUCH_ENTRY
        answer = await batch(c, 2, 0, MAX_BATCH_READ_ENTRIES)
        assert isinstance(answer, BatchReadResponse) and len(answer.packets) == 1
        # The last entry id there is: a batch from it asks for nothing past it.
        last = 2**63 - 1
        assert (await c.add(3, last, b"last")).status is StatusCode.OK
        answer = await batch(c, 3, last, MAX_BATCH_READ_ENTRIES)
        assert isinstance(answer, BatchReadResponse) and len(answer.packets) == 1
        assert (await c.read(2, 0)).status is StatusCode.OK  # the bookie serves on
        assert bookie.handler.stats.reads_in_flight == 0


async def test_batch_reads_follow_the_read_rules(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("".join(f"{p}:{t}\n" for p, t in TOKENS.items()))
    tokens.chmod(0o600)
    cfg = config([tmp_path / "d"], auth="token", auth_token_file=str(tokens), authorize=RULES)
    async with running_bookie(cfg) as (_, bid):
        with trio.fail_after(20):
            async with as_principal(bid, "writer") as w:
                assert (await w.add(1, 0, b"zero")).status is StatusCode.OK
            async with as_principal(bid, "reader") as r:
                answer = await batch(r, 1, 0, 4)
                assert isinstance(answer, BatchReadResponse) and len(answer.packets) == 1
            async with as_principal(bid, "operator") as o:  # not listed for "read"
                _refusal(await batch(o, 1, 0, 4), "read", "operator")
