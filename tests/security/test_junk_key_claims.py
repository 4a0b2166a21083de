"""Junk-key claims (ledger ids claimed ahead with a wrong master key) replayed against real bookie processes.

A fence or an add with a junk master key, for a ledger id a bookie has not seen yet, makes
that bookie hold the junk key for the id: it refuses the real writer's adds and the real
recovery's fences with UNAUTHORIZED. Ledger ids are sequential, so an attacker can claim the
next ones ahead of time. The writer must treat such a bookie as failed (an ensemble change),
and recovery must count it as a failed bookie while the quorum rules can still decide; no
acknowledged record is lost or reordered.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

import walkit
from tests._cluster import ProcessCluster, process_cluster
from tests.bookie._helpers import connect as raw_connect
from walkit import BookieId, LogPosition
from walkit._core.wire import ReadLacFlag, StatusCode
from walkit.errors import WalkitError

pytestmark = pytest.mark.processes

PASSWORD = b"the right password"
JUNK = b"\x00" * 32
LOG = "orders"


@pytest.fixture
def bookies(tmp_path: Path) -> Iterator[ProcessCluster]:
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 4) as cluster:
        yield cluster


async def fence_with_junk(bookie: BookieId, ledger_ids: range | list[int]) -> list[StatusCode]:
    """What the probe did: fencing LAC reads with a junk key (one connection, pipelined)."""
    async with raw_connect(bookie) as attacker:
        return [
            (await attacker.read_lac(lid, flags=ReadLacFlag.FENCE, key=JUNK)).status
            for lid in ledger_ids
        ]


async def add_with_junk(bookie: BookieId, ledger_ids: range) -> list[StatusCode]:
    async with raw_connect(bookie) as attacker:
        return [(await attacker.add(lid, 0, b"junk", key=JUNK)).status for lid in ledger_ids]


async def current_ledger(log: walkit.Log) -> int:
    return (await log.metadata()).ledgers[-1].ledger_id


async def test_junk_key_claims_neither_stop_a_writer_nor_block_a_takeover(
    bookies: ProcessCluster, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="walkit")
    url = bookies.metadata_url
    acked: list[tuple[LogPosition, bytes]] = []
    options: dict[str, Any] = {
        "ensemble_size": 3,
        "write_quorum": 3,
        "ack_quorum": 2,
        "password": PASSWORD,
    }
    with trio.fail_after(120):
        async with (
            walkit.Client.connect(url) as c1,
            walkit.Client.connect(url) as c2,
            walkit.Client.connect(url) as c3,
        ):
            log1 = await walkit.Log.open(c1, LOG, roll_entries=5, **options)
            # 1. The writer's current ledger, fenced with a junk key on one of its bookies
            #    before the first record; and the next 40 ledger ids claimed there too
            #    (half by fence, half by add).
            async with log1.writer() as w1:
                first = await current_ledger(log1)
                md = await c1.ledger_metadata(first)
                victim = md.current_ensemble[0]
                assert await fence_with_junk(victim, [first]) == [StatusCode.OK]
                await fence_with_junk(victim, range(first + 1, first + 21))
                await add_with_junk(victim, range(first + 21, first + 41))
                # The writer survives: the refusing bookie is replaced, ledgers roll on.
                for i in range(30):
                    payload = b"w1-%d" % i
                    acked.append((await w1.append(payload), payload))
            md = await c1.ledger_metadata(first)
            assert victim not in md.current_ensemble
            assert md.is_closed and md.last_entry_id == 4
            # The claimed-ahead ids hit the writer's later ledgers too (3 of 4 bookies are in
            # each ensemble); each such ledger went on without the victim.
            refused = {
                int(m.group(1))
                for r in caplog.records
                if (m := re.search(r"ledger_key_refused ledger_id=(\d+)", r.getMessage()))
            }
            assert first in refused and len(refused) >= 2, refused
            for lid in refused:
                assert victim not in (await c1.ledger_metadata(lid)).current_ensemble

            # 2. A takeover whose new ledger is fenced with a junk key on one bookie before
            #    it writes anything; the next takeover recovers it all the same.
            log2 = await walkit.Log.open(c2, LOG, roll_entries=5, password=PASSWORD)
            w2 = await log2.writer().__aenter__()
            try:
                taken = await current_ledger(log2)
                target = (await c2.ledger_metadata(taken)).current_ensemble[0]
                assert await fence_with_junk(target, [taken]) == [StatusCode.OK]
                log3 = await walkit.Log.open(c3, LOG, roll_entries=5, password=PASSWORD)
                async with log3.writer() as w3:
                    for i in range(7):
                        payload = b"w3-%d" % i
                        acked.append((await w3.append(payload), payload))
                # Recovered empty, it left the log (and was deleted).
                assert taken not in [lg.ledger_id for lg in (await log3.metadata()).ledgers]
            finally:
                with contextlib.suppress(WalkitError):
                    await w2.__aexit__(None, None, None)

            # Nothing acknowledged is lost, duplicated or reordered.
            records = [(r.position, r.payload) async for r in log3.reader(follow=False)]
            assert records == acked


async def test_recovery_of_a_ledger_claimed_before_its_first_entry(
    memory_url: str, tmp_path: Path
) -> None:
    """In-process bookies: a ledger fenced with a junk key on two of its three bookies before
    its writer wrote anything recovers (empty), and one with entries recovers them all."""
    from tests.client.conftest import cluster

    async with cluster(memory_url, tmp_path, 3), walkit.Client.connect(memory_url) as client:
        empty = await client.create_ledger(3, 3, 2, password=PASSWORD)
        ensemble = empty.metadata.current_ensemble
        for bookie in ensemble[:2]:
            assert await fence_with_junk(bookie, [empty.id]) == [StatusCode.OK]
        reader = await client.open_ledger(empty.id, password=PASSWORD, recovery=True)
        assert reader.is_closed and reader.last_add_confirmed == -1

        full = await client.create_ledger(3, 3, 2, password=PASSWORD)
        for i in range(5):
            await full.append(b"%d" % i)
        # One bookie refuses the key on a ledger it never held (ids claimed ahead) ...
        spare = await client.create_ledger(3, 3, 2, password=PASSWORD)
        assert await fence_with_junk(spare.metadata.current_ensemble[0], [spare.id]) == [
            StatusCode.OK
        ]
        reader = await client.open_ledger(spare.id, password=PASSWORD, recovery=True)
        assert reader.last_add_confirmed == -1
        # ... and a wrong password is still refused before any bookie is asked.
        with pytest.raises(walkit.errors.UnauthorizedAccessError):
            await client.open_ledger(full.id, password=b"wrong", recovery=True)
        reader = await client.open_ledger(full.id, password=PASSWORD, recovery=True)
        assert [e.payload for e in await reader.read(0, 4)] == [b"%d" % i for i in range(5)]
