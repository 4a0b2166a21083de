"""Regression scenarios for the two bugs BookKeeper's TLA+ model found in recovery.

Each runs on real bookies and is run twice: as walkit is (safe), and with a test-only switch
that removes the fix, to show the scenario really exercises it (the broken variant loses an
acknowledged entry).
"""

from __future__ import annotations

from pathlib import Path

import pytest

import walkit
from tests.client.conftest import cluster, connect
from tests.recovery._faults import DroppingNetwork
from tests.recovery.test_recovery import _raw_add, payload
from walkit._core.digest import DigestManager
from walkit._core.recovery import RecoveryRules
from walkit._core.wire import Message, ReadLacFlag, ReadLacRequest, StatusCode
from walkit.metadata import LedgerManager, list_bookies, open_metadata_store

PW = b"recovery"


def lost_acknowledged(acked: list[int], closed_last_entry: int) -> list[int]:
    """Entries the writer was (or would be) acknowledged that the closed ledger does not have."""
    return [e for e in acked if e > closed_last_entry]


@pytest.mark.parametrize("fix", [True, False], ids=["recovery-reads-fence", "broken-variant"])
async def test_bookkeeper_2614_fencing_only_by_lac_reads_loses_an_ack(
    fix: bool, memory_url: str, tmp_path: Path
) -> None:
    """E=Qw=3, Qa=2 (apache/bookkeeper#2614, the TLA+ trace):

    w1 sends e0: to b1 it is lost, b2 stores it, to b3 it is still in flight.
    w2 recovers: its fence to b3 is lost; b1 and b2 answer (EC = 2), LAC -1. It reads e0:
    b1 and b3 say "no such entry" (QC = 2), so e0 is absent and the ledger closes empty.
    Then w1's e0 reaches b3. If recovery reads did not fence, b3 accepts it: w1 has Qa acks and
    tells its caller e0 is durable, but the closed ledger does not contain it.
    """
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as w1:
        lw = await w1.create_ledger(3, 3, 2, password=PW)
        _b1, b2, b3 = lw.metadata.current_ensemble
        e0 = DigestManager(lw.id, "crc32c", PW).encode(0, -1, len(payload(0)), payload(0))
        acks = {b2: await _raw_add(b2, lw.id, 0, e0)}  # w1 -> b1 lost; w1 -> b3 in flight

        def fence_to_b3_lost(bookie: walkit.BookieId, message: Message) -> bool:
            return (
                bookie == b3
                and isinstance(message, ReadLacRequest)
                and bool(message.flags & ReadLacFlag.FENCE)
            )

        network = DroppingNetwork(fence_to_b3_lost)
        async with connect(memory_url, network=network, read_timeout=2.0) as w2:
            w2._context.recovery_rules = RecoveryRules(fence_reads=fix)
            lr = await w2.open_ledger(lw.id, password=PW, recovery=True)
        assert network.dropped, "the scenario needs the fence to b3 to be lost"
        assert lr.last_add_confirmed == -1  # e0 was absent: QC bookies said so

        acks[b3] = await _raw_add(b3, lw.id, 0, e0)  # w1's delayed e0 reaches b3
        acked = [0] if sum(status is StatusCode.OK for status in acks.values()) >= 2 else []
        lost = lost_acknowledged(acked, lr.last_add_confirmed)
        if fix:
            assert acks[b3] is StatusCode.LEDGER_FENCED
            assert lost == []
        else:
            assert acks[b3] is StatusCode.OK
            assert lost == [0], "the broken variant should lose the acknowledged entry"


@pytest.mark.parametrize("fix", [True, False], ids=["start-at-last-fragment", "broken-variant"])
async def test_bookkeeper_2615_recovery_of_an_empty_last_fragment(
    fix: bool, memory_url: str, tmp_path: Path
) -> None:
    """apache/bookkeeper#2615: entries 0..1999 acknowledged on {b1, b2}; the writer then changed
    the ensemble to start a fragment at 2000 on {b3, b4} and died before writing there.

    The last fragment's bookies never saw the ledger and answer LAC -1. Recovery must start at
    the last fragment (entry 2000), find it empty, close at 1999 and drop the empty fragment.
    Starting from LAC -1 instead reads the last ensemble from entry 0, finds nothing, and closes
    the ledger empty: every acknowledged entry is lost.
    """
    async with cluster(memory_url, tmp_path, 4), connect(memory_url) as w1:
        lw = await w1.create_ledger(2, 2, 2, password=PW)
        acked = await lw.append_batch([payload(i) for i in range(2000)])
        first = set(lw.metadata.current_ensemble)
        async with await open_metadata_store(memory_url) as store:
            spare = sorted(b for b in (await list_bookies(store)).writable if b not in first)
            manager = LedgerManager(store)
            md, version = await manager.read(lw.id)
            await manager.write(md.with_fragment(2000, tuple(spare[:2])), version)

        async with connect(memory_url) as w2:
            w2._context.recovery_rules = RecoveryRules(start_at_last_fragment=fix)
            lr = await w2.open_ledger(lw.id, password=PW, recovery=True)
            md = await w2.ledger_metadata(lw.id)
            tail = (
                [e.payload for e in await lr.read(1990, 1999)] if md.last_entry_id >= 1999 else []
            )
        lost = lost_acknowledged(acked, md.last_entry_id)
        if fix:
            assert md.last_entry_id == 1999 and lost == []
            assert [first_entry for first_entry, _ in md.fragments] == [0]
            assert tail == [payload(i) for i in range(1990, 2000)]
        else:
            assert md.last_entry_id == -1
            assert len(lost) == 2000, "the broken variant should lose the acknowledged entries"
