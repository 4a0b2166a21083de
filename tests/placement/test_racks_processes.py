"""Rack-aware placement on a real cluster: 6 bookie processes in 3 racks, E=3 Qw=2 Qa=2.

Both copies of every entry must sit in different racks, as the metadata says and as the bookies
themselves answer; killing every bookie of one rack must lose no acknowledged entry, and writing
must go on after the ensemble change.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import walkit
from tests._cluster import ProcessCluster, process_cluster
from walkit._core.distribution import write_set
from walkit._core.wire import ReadRequest, ReadResponse, StatusCode
from walkit.client import client_services

pytestmark = pytest.mark.processes

RACKS = [
    "/region-a/rack-1",
    "/region-a/rack-1",
    "/region-a/rack-2",
    "/region-a/rack-2",
    "/region-a/rack-3",
    "/region-a/rack-3",
]
PW = b"racks"


def payload(i: int) -> bytes:
    return (f"rack-entry-{i}:".encode() * 10)[:96]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    with process_cluster(f"sqlite:///{tmp_path / 'metadata.db'}", tmp_path, 6, RACKS) as c:
        yield c


def rack_of(cluster: ProcessCluster) -> dict[walkit.BookieId, str]:
    return {b.address: str(b.network_location) for b in cluster.bookies}


def write_sets_spanning_racks(
    md: walkit.LedgerMetadata,
    ensemble: tuple[walkit.BookieId, ...],
    racks: dict[walkit.BookieId, str],
) -> int:
    """How many of the fragment's E write sets have their copies in two racks."""
    spanning = 0
    for entry in range(md.ensemble_size):
        holders = [ensemble[i] for i in write_set(entry, md.ensemble_size, md.write_quorum)]
        spanning += len({racks[b] for b in holders}) == 2
    return spanning


def check_fragments_span_racks(
    md: walkit.LedgerMetadata, racks: dict[walkit.BookieId, str]
) -> None:
    """From the metadata: every write set of every fragment spans two racks."""
    for first, ensemble in md.fragments:
        assert write_sets_spanning_racks(md, ensemble, racks) == md.ensemble_size, (
            first,
            [str(b) for b in ensemble],
        )


def _read_request(rid: int, *, ledger_id: int, entry: int) -> ReadRequest:
    return ReadRequest(rid, ledger_id, entry)


async def holders_by_asking_bookies(
    client: walkit.Client, cluster: ProcessCluster, ledger_id: int, entries: range
) -> dict[int, list[walkit.BookieId]]:
    """From the bookies: ask every live bookie for every entry; who has it?"""
    found: dict[int, list[walkit.BookieId]] = {e: [] for e in entries}
    for bookie in cluster.bookies:
        if not bookie.running:
            continue
        for entry in entries:
            answer = await client_services(client).context.call(
                bookie.address, functools.partial(_read_request, ledger_id=ledger_id, entry=entry)
            )
            assert isinstance(answer, ReadResponse)
            if answer.status == StatusCode.OK:
                found[entry].append(bookie.address)
    return found


async def test_copies_of_every_entry_are_in_different_racks(cluster: ProcessCluster) -> None:
    racks = rack_of(cluster)
    async with walkit.Client.connect(cluster.metadata_url, placement="rackaware") as client:
        for _ in range(4):  # several ledgers: several random ensembles
            lw = await client.create_ledger(3, 2, 2, password=PW)
            await lw.append_batch([payload(i) for i in range(30)])
            await lw.close()
            md = await client.ledger_metadata(lw.id)
            check_fragments_span_racks(md, racks)
            found = await holders_by_asking_bookies(client, cluster, lw.id, range(30))
            for entry, holders in found.items():
                assert len(holders) == 2, (entry, holders)
                assert racks[holders[0]] != racks[holders[1]], (entry, [str(h) for h in holders])


async def test_losing_a_whole_rack_loses_no_acknowledged_entry(cluster: ProcessCluster) -> None:
    racks = rack_of(cluster)
    async with walkit.Client.connect(
        cluster.metadata_url, placement="rackaware", add_timeout=2.0, read_timeout=1.0
    ) as client:
        lw = await client.create_ledger(3, 2, 2, password=PW)
        doomed_rack = racks[lw.metadata.current_ensemble[0]]
        acked: list[int] = []

        async def write(until: int) -> None:
            while len(acked) < until:
                start = len(acked)
                ids = await lw.append_batch([payload(start + k) for k in range(20)])
                assert ids == list(range(start, start + 20)), "acknowledged out of order"
                acked.extend(ids)

        await write(400)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(write, 1600)
            with trio.fail_after(30):  # kill the rack mid-stream: once the writes are going on
                while len(acked) < 440:  # noqa: ASYNC110 (the writer's own progress)
                    await trio.sleep(0.005)
            for bookie in cluster.bookies:
                if str(bookie.network_location) == doomed_rack:
                    bookie.kill()
        await lw.close()

        md = await client.ledger_metadata(lw.id)
        assert md.is_closed and md.last_entry_id == acked[-1]
        assert len(md.fragments) >= 2, "the writer should have changed its ensemble"
        assert all(racks[b] != doomed_rack for b in md.current_ensemble)
        first_ensemble = md.fragments[0][1]
        assert write_sets_spanning_racks(md, first_ensemble, racks) == 3
        # With two racks left, the write quorums of E=3 Qw=2 are the pairs of a 3-cycle, which
        # two racks cannot all split: best effort splits 2 of the 3.
        for _, ensemble in md.fragments[1:]:
            if len({racks[b] for b in ensemble}) == 3:
                assert write_sets_spanning_racks(md, ensemble, racks) == 3
            else:
                assert write_sets_spanning_racks(md, ensemble, racks) == 2
        reader = await client.open_ledger(lw.id, password=PW)
        entries = await reader.read(0, md.last_entry_id)
        assert [e.payload for e in entries] == [payload(i) for i in range(len(acked))]
