"""open_ledger(recovery=True) against real bookies in this process (DiskStorage in tmp dirs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

import walkit
from tests.client.conftest import cluster, connect
from walkit._core.digest import DigestManager, master_key
from walkit._core.distribution import write_set
from walkit._core.wire import (
    AddRequest,
    AddResponse,
    FrameDecoder,
    StatusCode,
    decode_message,
    encode_frame,
)
from walkit.errors import UnauthorizedAccessError, WriterFencedError

PW = b"recovery"


def payload(i: int) -> bytes:
    return (f"r{i}-".encode() * 40)[:120]


async def _raw_add(
    bookie: walkit.BookieId, ledger_id: int, entry_id: int, packet: bytes
) -> StatusCode:
    """Put one entry on one bookie, as a writer that died mid-write would have."""
    stream = await trio.open_tcp_stream(bookie.host, bookie.port)
    async with stream:
        await stream.send_all(
            encode_frame(AddRequest(1, ledger_id, entry_id, master_key(PW), packet))
        )
        decoder = FrameDecoder()
        while (body := decoder.next_frame()) is None:
            decoder.feed(await stream.receive_some(65536))
        answer = decode_message(body)
        assert isinstance(answer, AddResponse)
        return answer.status


async def test_recovery_closes_at_the_last_acknowledged_entry(
    memory_url: str, tmp_path: Path
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url) as writer_client,
        connect(memory_url) as reader_client,
    ):
        lw = await writer_client.create_ledger(3, 2, 2, password=PW)
        ids = await lw.append_batch([payload(i) for i in range(500)])
        assert ids == list(range(500))
        lr = await reader_client.open_ledger(lw.id, password=PW, recovery=True)
        assert lr.is_closed and lr.last_add_confirmed == 499
        md = await reader_client.ledger_metadata(lw.id)
        assert md.state is walkit.LedgerState.CLOSED and md.last_entry_id == 499
        assert md.length == sum(len(payload(i)) for i in range(500))
        assert [e.payload for e in await lr.read(0, 499)] == [payload(i) for i in range(500)]
        # The old writer is fenced: its next append and its close fail, and nothing is lost.
        with pytest.raises(WriterFencedError):
            await lw.append(b"after the fence")
        # BookKeeper's protocol document: CLOSED at the entry the writer was last acknowledged is a successful close.
        await lw.close()
        assert lw.last_add_confirmed == 499
        again = await reader_client.open_ledger(lw.id, password=PW, recovery=True)
        assert again.last_add_confirmed == 499


async def test_empty_ledger_recovers_to_minus_one(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        lw = await client.create_ledger(3, 3, 2, password=PW)
        lr = await client.open_ledger(lw.id, password=PW, recovery=True)
        assert lr.last_add_confirmed == -1
        md = await client.ledger_metadata(lw.id)
        assert md.is_closed and md.last_entry_id == -1 and md.length == 0


async def test_wrong_password_is_refused(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        lw = await client.create_ledger(3, 2, 2, password=PW)
        await lw.append(b"x")
        with pytest.raises(UnauthorizedAccessError):
            await client.open_ledger(lw.id, password=b"nope", recovery=True)
        assert (await client.ledger_metadata(lw.id)).state is walkit.LedgerState.OPEN


async def test_unacknowledged_tail_confirmed_on_ack_quorum_and_cut_before_first_absent(
    memory_url: str, tmp_path: Path
) -> None:
    """Entries 0..9 acknowledged; entry 10 on two bookies (Qa), entry 11 on one, entry 12 on
    two. Recovery keeps 10 (confirmed), stops at 11 (absent: QC = 2 said no), and never
    includes 12 though it has Qa copies: it was never acknowledged, as 11 was not."""
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        lw = await client.create_ledger(3, 3, 2, password=PW)
        await lw.append_batch([payload(i) for i in range(10)])
        ensemble = lw.metadata.current_ensemble
        digests = DigestManager(lw.id, "crc32c", PW)
        length = sum(len(payload(i)) for i in range(10))
        for entry_id, copies in ((10, 2), (11, 1), (12, 2)):
            length += len(payload(entry_id))
            packet = digests.encode(entry_id, 9, length, payload(entry_id))
            for index in write_set(entry_id, 3, 3)[:copies]:
                assert await _raw_add(ensemble[index], lw.id, entry_id, packet) is StatusCode.OK
        lr = await client.open_ledger(lw.id, password=PW, recovery=True)
        assert lr.last_add_confirmed == 10
        entries = await lr.read(0, 10)
        assert [e.payload for e in entries] == [payload(i) for i in range(11)]
        md = await client.ledger_metadata(lw.id)
        assert md.length == sum(len(payload(i)) for i in range(11))


async def test_concurrent_recoveries_converge(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 4), connect(memory_url) as writer_client:
        lw = await writer_client.create_ledger(3, 2, 2, password=PW)
        await lw.append_batch([payload(i) for i in range(300)])
        results: list[int] = []

        async def recover() -> None:
            async with connect(memory_url) as client:
                lr = await client.open_ledger(lw.id, password=PW, recovery=True)
                results.append(lr.last_add_confirmed)

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(recover)
        assert results == [299, 299, 299]


async def test_recovery_with_one_bookie_down(memory_url: str, tmp_path: Path) -> None:
    async with (
        cluster(memory_url, tmp_path, 3) as bookies,
        connect(memory_url, read_timeout=1.0) as client,
    ):
        lw = await client.create_ledger(3, 3, 2, password=PW)
        await lw.append_batch([payload(i) for i in range(100)])
        await bookies.stop(bookies.index_of(lw.metadata.current_ensemble[2]))
        async with connect(memory_url, read_timeout=1.0) as other:
            lr = await other.open_ledger(lw.id, password=PW, recovery=True)
            assert lr.last_add_confirmed == 99
            assert [e.payload for e in await lr.read(0, 99)] == [payload(i) for i in range(100)]
