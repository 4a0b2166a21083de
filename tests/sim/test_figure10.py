"""The TLA+ protocol guide, Figure 10: recovery finds entry 3 unconfirmed and closes the ledger at entry 2.

E=3, Qw=3, Qa=2 on bookies B1, B2, B3. Entries 0 and 1 reach every bookie. Entry 2 reaches B1
and B2 only (acknowledged: Qa=2). Entry 3 reaches B1 only (never acknowledged). The writer dies.
A second client opens the ledger with recovery: it fences, reads forward from the LAC, finds
entry 2 on Qa bookies (confirmed) and entry 3 missing on QC = (Qw - Qa) + 1 = 2 bookies
(unconfirmed), writes entry 2 back to its whole write set, and closes the ledger at entry 2.
"""

from __future__ import annotations

import trio
import trio.testing

from walkit import LedgerState
from walkit.errors import WalkitError
from walkit.testing import SimBookie, SimCluster


async def arrange(cluster: SimCluster) -> tuple[int, list[SimBookie]]:
    """Write entries 0..3 as in the figure, then kill the writer. Returns the ledger id and
    its bookies B1, B2, B3."""
    history, net = cluster.history, cluster.network
    # No ensemble change while the bookies' contents are arranged, and no explicit LAC: the
    # bookies' LAC stays at 1, so recovery reads forward from entry 2, as in the figure.
    async with cluster.client("writer", add_timeout=1000.0, explicit_lac_interval=None) as client:
        lw = await client.create_ledger(3, 3, 2)
        bookies = [cluster.bookie(b) for b in lw.metadata.current_ensemble]
        b1, b2, b3 = (b.name for b in bookies)
        for i in range(2):
            await history.append("writer", lw, b"entry-%d" % i)
        await trio.sleep(0.1)  # entries 0 and 1 are on all three

        acked: list[int] = []

        async def append(payload: bytes) -> None:
            try:
                acked.append(await history.append("writer", lw, payload))
            except WalkitError:
                pass

        async with trio.open_nursery() as nursery:
            # Answers are held, so entries 2 and 3 both carry LAC 1.
            net.stall(b1, "writer")
            net.stall(b2, "writer")
            net.stall("writer", b3)
            nursery.start_soon(append, b"entry-2")  # reaches B1 and B2
            await trio.sleep(0.01)
            net.stall("writer", b2)
            nursery.start_soon(append, b"entry-3")  # reaches B1 only
            await trio.sleep(0.01)
            net.unstall(b1, "writer")
            net.unstall(b2, "writer")
            await trio.sleep(0.01)
            assert acked == [2]  # entry 2 on Qa=2 bookies; entry 3 on one
            # The writer dies; what it still had in flight dies with it.
            net.isolate("writer", reset=True)
            nursery.cancel_scope.cancel()
    return lw.id, bookies


def stored(bookie: SimBookie, ledger_id: int) -> list[int]:
    return sorted(e for (lid, e) in bookie.storage.entries if lid == ledger_id)


async def test_figure_10(autojump_clock: trio.testing.MockClock) -> None:
    async with SimCluster(bookies=3, seed=10) as cluster:
        lid, bookies = await arrange(cluster)
        assert [stored(b, lid) for b in bookies] == [[0, 1, 2, 3], [0, 1, 2], [0, 1]]
        await recover_and_check(cluster, lid, bookies)


async def recover_and_check(cluster: SimCluster, lid: int, bookies: list[SimBookie]) -> None:
    async with cluster.client("recoverer") as client:
        handle = await client.open_ledger(lid, recovery=True)
        cluster.history.record_fence_completed("recoverer", lid)
        assert handle.metadata.state is LedgerState.CLOSED
        assert handle.last_add_confirmed == 2
        # Entry 2 was written back to its whole write set; entry 3 is not in the ledger.
        # The copies already there answer at once (the same bytes), so recovery may close
        # once Qa answered, before B3's journal sync lands: give it that sync.
        await trio.sleep(0.1)
        assert [stored(b, lid) for b in bookies] == [[0, 1, 2, 3], [0, 1, 2], [0, 1, 2]]
        fenced = [b.storage.ledgers[lid].fenced for b in bookies if lid in b.storage.ledgers]
        assert sum(fenced) >= 2  # durably fenced on at least an ensemble coverage (E-Qa+1)
        await cluster.read_back(client, lid)
    results = cluster.assert_ok()
    assert results[0].counts["verified"] == 3
    assert results[1].counts["closed_ledgers"] == 1
