"""End to end: the ledger API against real bookies (in this process, DiskStorage) and every
metadata driver."""

from __future__ import annotations

from pathlib import Path

from tests.client.conftest import cluster, connect


def payload(i: int, size: int = 100) -> bytes:
    seed = f"entry-{i}:".encode()
    return (seed * (size // len(seed) + 1))[:size]


async def test_write_and_read_back_10000_entries(metadata_url: str, tmp_path: Path) -> None:
    async with cluster(metadata_url, tmp_path, 3), connect(metadata_url) as client:
        lw = await client.create_ledger(
            ensemble_size=3, write_quorum=2, ack_quorum=2, password=b"pw"
        )
        assert await lw.append(payload(0)) == 0
        ids = [0]
        for start in range(1, 10_000, 1_111):
            batch = [payload(i) for i in range(start, min(start + 1_111, 10_000))]
            ids += await lw.append_batch(batch)
        assert ids == list(range(10_000))
        assert lw.last_add_confirmed == 9_999
        # A reader of the open ledger sees up to the LAC the bookies know: at least what the
        # last batch carried; the writer's explicit LAC soon tells them the rest.
        lr = await client.open_ledger(lw.id, password=b"pw")
        assert not lr.is_closed
        assert 8_888 <= lr.last_add_confirmed <= 9_999
        last = await lr.wait_for_entry(9_999, timeout=30)
        assert last is not None and last.payload == payload(9_999)
        assert lr.last_add_confirmed == 9_999
        tail = await lr.read(9_000, 9_999)
        assert [e.payload for e in tail] == [payload(i) for i in range(9_000, 10_000)]
        await lw.close()
        md = await client.ledger_metadata(lw.id)
        assert md.is_closed and md.last_entry_id == 9_999
        lr = await client.open_ledger(lw.id, password=b"pw")
        assert lr.is_closed and lr.last_add_confirmed == 9_999
        entries = await lr.read(0, 9_999)
        assert [e.entry_id for e in entries] == list(range(10_000))
        assert all(e.payload == payload(e.entry_id) for e in entries)
        assert all(e.ledger_id == lw.id for e in entries)
        assert lw.id in await client.list_ledgers()
