"""Bugs the simulation found in other parts of walkit, pinned as small deterministic tests.

Each was first written to fail (pinned as ``xfail(strict=True)``) and stays, now fixed, as a
regression test. Their seeds are also in ``REGRESSION_SEEDS`` of test_random_schedules.py.
"""

from __future__ import annotations

import errno

import trio
import trio.testing

from walkit.errors import WalkitError
from walkit.testing import SimCluster


# Was a livelock (found by tests/sim, e.g. WALKIT_SIM_SEED=14563139416777314): with every
# replacement bookie answering IO_ERROR, the writer changed its ensemble back and forth without
# pausing, one metadata CAS each time. Fixed by backing off between changes that make no progress.
async def test_writer_does_not_spin_while_replacements_fail(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with (
        SimCluster(bookies=2, seed=1, stall_steps=50_000) as cluster,
        cluster.client("writer", add_timeout=1.0) as client,
    ):
        lw = await client.create_ledger(1, 1, 1)
        await lw.append(b"before")
        for b in cluster.bookies:  # both disks fail for one second
            b.storage.fail_writes = OSError(errno.EIO, "simulated disk error")
        outcome: list[object] = []

        async def append() -> None:
            try:
                outcome.append(await lw.append(b"during"))
            except WalkitError as exc:  # failing the append is a fine answer too
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(append)
            await trio.sleep(1.0)
            for b in cluster.bookies:
                b.storage.fail_writes = None
        assert len(outcome) == 1
