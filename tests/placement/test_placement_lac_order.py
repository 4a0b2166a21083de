"""A placement plug-in's reorder_read_lac_sequence orders the client's LAC reads and long polls."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

from tests.client.conftest import cluster, connect
from walkit import BookieId
from walkit.placement import DefaultEnsemblePlacementPolicy


class _LacOrderPolicy(DefaultEnsemblePlacementPolicy):
    """Reverses the LAC read order and records every call (or drops a bookie when told to)."""

    def __init__(self, drop: bool = False) -> None:
        super().__init__()
        self.calls: list[list[int]] = []
        self.drop = drop

    def reorder_read_lac_sequence(
        self,
        ensemble: Sequence[BookieId],
        write_set: Sequence[int],
        failure_history: Mapping[BookieId, float],
    ) -> list[int]:
        order = list(reversed(write_set))
        self.calls.append(order)
        return order[1:] if self.drop else order


@pytest.mark.parametrize("drop", [False, True])
async def test_lac_reads_follow_the_policys_lac_order(tmp_path: Path, drop: bool) -> None:
    """The policy is asked for every LAC read and long poll; one that loses a bookie from the
    order is not trusted (every bookie is still asked), and the answers stay right."""
    url = f"memory://lac-order-{drop}"
    policy = _LacOrderPolicy(drop)
    async with cluster(url, tmp_path, 3), connect(url, placement=policy) as client:
        writer = await client.create_ledger(3, 2, 2, password=b"pw")
        for payload in (b"a", b"b", b"c"):  # one at a time: entry 2 carries LAC 1
            await writer.append(payload)
        reader = await client.open_ledger(writer.id, password=b"pw")
        policy.calls.clear()
        assert await reader.read_last_add_confirmed() >= 1
        assert policy.calls == [[2, 1, 0]]
        assert await reader.wait_for_entry(3, timeout=0.05) is None
        assert len(policy.calls) >= 2
        await writer.append(b"d")
        entry = await reader.wait_for_entry(3, timeout=10)
        assert entry is not None and entry.payload == b"d"
        await writer.close()
