"""Bookie processes killed with SIGKILL under a client: reads fall back to other replicas, and a
writer replaces a dead bookie without losing or reordering an acknowledged entry."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests._cluster import process_cluster
from tests.client.conftest import connect
from walkit.errors import NotEnoughBookiesError

pytestmark = pytest.mark.processes


def payload(i: int) -> bytes:
    return (f"entry-{i}:".encode() * 30)[:200]


async def test_reads_survive_sigkill_of_one_replica(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 3) as cluster:
        async with connect(url) as client:
            open_lw = await client.create_ledger(3, 2, 2, password=b"k")
            closed_lw = await client.create_ledger(3, 2, 2, password=b"k")
            for lw in (open_lw, closed_lw):
                await lw.append_batch([payload(i) for i in range(2_000)])
            await closed_lw.close()
            reader = await client.open_ledger(open_lw.id, password=b"k")
            assert await reader.wait_for_entry(1_999, timeout=30) is not None
            victim = open_lw.metadata.current_ensemble[0]
            cluster.by_address(victim).kill()
            for ledger_id in (open_lw.id, closed_lw.id):
                lr = await client.open_ledger(ledger_id, password=b"k")
                assert lr.last_add_confirmed == 1_999
                entries = await lr.read(0, 1_999)
                assert [e.payload for e in entries] == [payload(i) for i in range(2_000)]


async def test_sigkill_mid_stream_replaces_the_bookie_and_loses_nothing(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 4) as cluster:
        async with connect(url) as client:
            lw = await client.create_ledger(3, 2, 2, password=b"k")
            victim = lw.metadata.current_ensemble[1]
            acked: list[int] = []
            reached = trio.Event()
            target = 600
            stop = trio.Event()

            async def write() -> None:
                nonlocal reached
                while not stop.is_set():
                    start = len(acked)
                    ids = await lw.append_batch([payload(start + k) for k in range(16)])
                    assert ids == list(range(start, start + 16))  # in order, no gap
                    acked.extend(ids)
                    if len(acked) >= target:
                        reached.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(write)
                await reached.wait()
                cluster.by_address(victim).kill()
                killed_at = len(acked)
                target = killed_at + 600
                reached = trio.Event()
                await reached.wait()
                stop.set()
            await lw.close()
            md = await client.ledger_metadata(lw.id)
            assert md.is_closed and md.last_entry_id == acked[-1]
            assert len(md.fragments) >= 2
            assert victim in md.fragments[0][1]
            assert victim not in md.current_ensemble
            assert killed_at - 100 <= md.fragments[-1][0] <= killed_at + 100
            lr = await client.open_ledger(lw.id, password=b"k")
            entries = await lr.read(0, acked[-1])
            assert [e.payload for e in entries] == [payload(i) for i in acked]


async def test_create_skips_a_killed_bookie_that_is_still_registered(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 4) as cluster:
        async with connect(url) as client:
            dead = cluster.bookies[0].address
            cluster.bookies[0].kill()  # its registration outlives it until the session expires
            for _ in range(5):
                lw = await client.create_ledger(3, 2, 2)
                assert dead not in lw.metadata.current_ensemble
                await lw.append_batch([payload(i) for i in range(10)])
                await lw.close()
                assert len((await client.ledger_metadata(lw.id)).fragments) == 1
            cluster.bookies[1].kill()
            with pytest.raises(NotEnoughBookiesError):
                await client.create_ledger(3, 2, 2)
