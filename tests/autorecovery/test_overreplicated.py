"""Over-replication cleanup: a bookie's GC forgets closed ledgers that no longer list it, and
nothing else (marked, locked, still listed)."""

from __future__ import annotations

from pathlib import Path

import attrs
import trio

from tests.client.conftest import cluster, connect
from walkit.autorecovery import collect_overreplicated, rereplicate_bookie
from walkit.metadata import UnderreplicationManager

HANG_GUARD = 60


async def test_gc_forgets_only_unlisted_closed_unmarked_ledgers(
    memory_url: str, tmp_path: Path
) -> None:
    with trio.fail_after(HANG_GUARD):
        async with cluster(memory_url, tmp_path, 4) as bookies, connect(memory_url) as client:
            written = {}
            for _ in range(2):
                lw = await client.create_ledger(4, 4, 2)  # every bookie holds every entry
                payloads = [b"over %d" % i for i in range(30)]
                await lw.append_batch(payloads)
                await lw.close()
                written[lw.id] = payloads
            a, c = written
            live = bookies.ids[0]
            keeper = bookies.objects[0]
            assert {a, c} <= set(keeper.ledger_ids())
            # E=4 on 4 bookies has no replacement; a fifth bookie joins, then `walkit recover`
            # replaces the *live* bookie 0 in both ledgers.
            await bookies.start(4)
            report = await rereplicate_bookie(client, live)
            assert report.ok and sorted(report.rereplicated) == [a, c]
            urm = UnderreplicationManager(client.metadata_store)
            await urm.mark(c, [bookies.ids[1]])  # c is marked again: hands off
            still_listed = await client.create_ledger(5, 5, 2)  # all five bookies, 0 included
            await still_listed.append(b"listed")
            await still_listed.close()

            store = client.metadata_store
            assert await collect_overreplicated(
                store, live, keeper.ledger_ids(), keeper.forget_ledgers
            ) == [a]
            assert a not in keeper.ledger_ids() and c in keeper.ledger_ids()
            # A worker's lock keeps the GC away too.
            found = await urm.read(c)
            assert found is not None
            await urm.remove(c, found[1])
            assert await urm.try_lock(c, "worker")
            assert (
                await collect_overreplicated(
                    store, live, keeper.ledger_ids(), keeper.forget_ledgers
                )
                == []
            )
            await urm.unlock(c)
            # Through the bookie's own GC round (autorecovery on): c goes now.
            keeper.gc._config = attrs.evolve(keeper.config, autorecovery=True)
            gc_report = await keeper.collect_garbage()
            assert gc_report.ledgers_deleted == [c]
            remaining = set(keeper.ledger_ids())
            assert c not in remaining
            assert still_listed.id in remaining  # it lists this bookie: kept
            # The data is still all there, on the bookies the ledgers list.
            for lid, payloads in written.items():
                reader = await client.open_ledger(lid)
                assert [e.payload for e in await reader.read(0, 29)] == payloads
