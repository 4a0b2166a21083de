"""A worker inside a bookie copies to that bookie without the network, under the same rules
as a COPY add from the network (real bookies in this process, disk storage, loopback TCP)."""

from __future__ import annotations

import random
from pathlib import Path

import trio

from tests.autorecovery.test_rereplicator import FAST, read_all, write_ledgers
from tests.client.conftest import cluster, connect
from walkit import BookieId
from walkit._core.digest import master_key
from walkit.autorecovery import AutorecoveryMetrics, ReplicationWorker, RereplicationOutcome
from walkit.client import Client, client_services
from walkit.metadata import UnderreplicationManager
from walkit_bookie import Bookie
from walkit_bookie.server._local import LocalCopyStore

HANG_GUARD = 60


def bookie_worker(
    client: Client, bookie: Bookie, bid: BookieId, metrics: AutorecoveryMetrics, seed: int
) -> ReplicationWorker:
    """The replication worker of ``bookie`` (storing its own copies in the process)."""
    return ReplicationWorker(
        client,
        name=str(bid),
        options=FAST,
        metrics=metrics,
        rng=random.Random(seed),
        local=LocalCopyStore(bookie.handler, bid),
    )


async def test_a_worker_copies_to_its_own_bookie_without_the_network(
    memory_url: str, tmp_path: Path
) -> None:
    with trio.fail_after(HANG_GUARD):
        async with cluster(memory_url, tmp_path, 3) as bookies, connect(memory_url) as client:
            written = await write_ledgers(client, 3, 40)  # on all three bookies
            ensemble = (await client.ledger_metadata(next(iter(written)))).fragments[0][1]
            free = await bookies.start(3)
            lost = ensemble[0]
            await bookies.stop(bookies.index_of(lost))
            urm = UnderreplicationManager(client.metadata_store)
            await urm.ensure_paths()
            for lid in written:
                await urm.mark(lid, [lost])
            bookie = bookies.objects[bookies.index_of(free)]
            stored_before = bookie.storage.stats.copies_stored
            metrics = AutorecoveryMetrics()
            async with connect(memory_url) as worker_client:
                worker = bookie_worker(worker_client, bookie, free, metrics, 3)
                assert await worker.run_once() == len(written)
                # The only valid replacement is the worker's own bookie: every copy went to it
                # in the process, and the worker never connected to it.
                connected = {
                    c.bookie for c in client_services(worker_client).context.pool.connections()
                }
            assert free not in connected
            assert metrics.entries_copied == 3 * 40  # E = Qw: the lost bookie had them all
            assert metrics.entries_copied_locally == metrics.entries_copied
            assert bookie.storage.stats.copies_stored - stored_before == metrics.entries_copied
            assert await urm.list_ids() == []
            for lid in written:
                md = await client.ledger_metadata(lid)
                assert lost not in md.all_bookies() and free in md.all_bookies()
            # Only the worker's bookie is left of each ensemble: every entry reads back.
            for other in ensemble[1:]:
                await bookies.stop(bookies.index_of(other))
            async with connect(memory_url) as reader_client:
                await read_all(reader_client, written)


async def test_local_copies_follow_the_rules_of_network_copies(
    memory_url: str, tmp_path: Path
) -> None:
    with trio.fail_after(HANG_GUARD):
        async with cluster(memory_url, tmp_path, 3) as bookies, connect(memory_url) as client:
            written = await write_ledgers(client, 1, 5)
            (lid,) = written
            bookie = bookies.objects[0]
            local = LocalCopyStore(bookie.handler, bookies.ids[0])
            key = master_key(b"")
            packets = await bookie.storage.read_entries([(lid, e) for e in range(5)])
            assert all(p is not None for p in packets)
            stored = [(e, bytes(p or b"")) for e, p in enumerate(packets)]
            # The same bytes again: accepted (copies are idempotent).
            assert await local.store(lid, key, stored) == []
            # Other bytes for a stored entry: refused, and the stored bytes stay.
            forged = bytearray(stored[2][1])
            forged[-1] ^= 0xFF
            assert await local.store(lid, key, [(2, bytes(forged))]) == ["entry 2: ENTRY_EXISTS"]
            assert (await bookie.storage.read_entries([(lid, 2)]))[0] == stored[2][1]
            # Another master key: refused.
            problems = await local.store(lid, master_key(b"other"), [(1, stored[1][1])])
            assert problems == ["entry 1: UNAUTHORIZED_ACCESS"]
            # A packet that is not this entry's: a bad request, as from the network.
            assert await local.store(lid, key, [(7, stored[1][1])]) == ["entry 7: BAD_REQUEST"]
            # Nothing is left waiting, and the bookie serves as before.
            assert local.outstanding == 0 and bookie.handler.stats.adds_in_flight == 0
            reader = await client.open_ledger(lid)
            got = await reader.read(0, reader.last_add_confirmed)
            assert [e.payload for e in got] == written[lid]


async def test_a_worker_rereplicates_first_what_its_own_bookie_can_take(
    memory_url: str, tmp_path: Path
) -> None:
    """A worker whose bookie is in a ledger's ensemble leaves that ledger (DEFERRED) until it
    has rereplicated the ledgers it can copy to its own bookie, then rereplicates it over the network (a
    worker of a bookie outside the ensemble would have taken it meanwhile)."""
    with trio.fail_after(HANG_GUARD):
        async with cluster(memory_url, tmp_path, 3) as bookies, connect(memory_url) as client:
            b0, b2 = bookies.ids[0], bookies.ids[2]
            in_ensemble = next(iter(await write_ledgers(client, 1, 20)))  # on b0, b1, b2
            b3 = await bookies.start(3)
            await bookies.stop(2)
            outside = next(iter(await write_ledgers(client, 1, 20)))  # on b0, b1, b3
            assert b2 not in (await client.ledger_metadata(outside)).all_bookies()
            b2 = await bookies.start(2)
            await bookies.stop(0)  # lost: in both ledgers
            urm = UnderreplicationManager(client.metadata_store)
            await urm.ensure_paths()
            for lid in (in_ensemble, outside):
                await urm.mark(lid, [b0])
            bookie = bookies.objects[bookies.index_of(b2)]
            metrics = AutorecoveryMetrics()
            async with connect(memory_url) as worker_client:
                worker = bookie_worker(worker_client, bookie, b2, metrics, 1)
                calls: list[tuple[int, bool, RereplicationOutcome]] = []
                rereplicate = worker.rereplicator.rereplicate

                async def recording(
                    ledger_id: int, *, local_only: bool = False
                ) -> RereplicationOutcome:
                    outcome = await rereplicate(ledger_id, local_only=local_only)
                    calls.append((ledger_id, local_only, outcome))
                    return outcome

                worker.rereplicator.rereplicate = recording  # type: ignore[method-assign,assignment]
                assert await worker.run_once() == 2
            first_of_in_ensemble = next(c for c in calls if c[0] == in_ensemble)
            assert first_of_in_ensemble == (in_ensemble, True, RereplicationOutcome.DEFERRED)
            assert calls[-1] == (in_ensemble, False, RereplicationOutcome.REREPLICATED)
            assert (outside, True, RereplicationOutcome.REREPLICATED) in calls
            assert metrics.entries_copied_locally == 20  # the outside ledger's, to b2
            assert metrics.entries_copied == 40
            assert b3 in (await client.ledger_metadata(in_ensemble)).all_bookies()
            assert b2 in (await client.ledger_metadata(outside)).all_bookies()
            assert await urm.list_ids() == []
