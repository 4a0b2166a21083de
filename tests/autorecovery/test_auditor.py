"""The auditor taking office after a bookie is already gone (the last auditor may have died
with it): the bookie's ledgers are marked at once, not at the next periodic check."""

from __future__ import annotations

import random
from pathlib import Path

import attrs
import trio

from tests.autorecovery.test_rereplicator import FAST, write_ledgers
from tests.client.conftest import cluster, connect
from walkit.autorecovery import Auditor
from walkit.metadata import UnderreplicationManager


async def test_a_new_auditor_marks_a_bookie_gone_before_it_took_office(
    memory_url: str, tmp_path: Path
) -> None:
    # The periodic check is an hour away: only the check made on taking office can find it.
    options = attrs.evolve(FAST, check_interval=3600.0, check_entries=False)
    async with cluster(memory_url, tmp_path, 4) as bookies, connect(memory_url) as client:
        written = await write_ledgers(client, 2, 10)
        ensemble = (await client.ledger_metadata(next(iter(written)))).fragments[0][1]
        lost = ensemble[0]
        listing = [
            lid for lid in written if lost in (await client.ledger_metadata(lid)).all_bookies()
        ]
        urm = UnderreplicationManager(client.metadata_store)
        await urm.ensure_paths()
        await urm.init_settings(0.0)  # a lost-bookie delay shorter than any check
        await bookies.stop(bookies.index_of(lost))  # gone before any auditor runs
        auditor = Auditor(client, name="a", options=options, rng=random.Random(1))
        async with trio.open_nursery() as nursery:
            await nursery.start(auditor.run)
            with trio.fail_after(30):
                while sorted(await urm.list_ids()) != sorted(listing):  # noqa: ASYNC110
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        markers = {m.ledger_id: m.missing for m in await urm.markers()}
        assert all(set(markers[lid]) == {lost} for lid in listing)


async def test_a_new_auditor_marks_them_in_its_first_check(memory_url: str, tmp_path: Path) -> None:
    # With a delay of 0 the bookie is due as soon as a ledger shows it gone: the first check
    # marks its ledgers (a second pass over every ledger cost a rereplication ~0.2 s); a longer delay
    # still starts from that first sight.
    async with cluster(memory_url, tmp_path, 4) as bookies, connect(memory_url) as client:
        written = await write_ledgers(client, 3, 5)
        lost = (await client.ledger_metadata(next(iter(written)))).fragments[0][1][0]
        listing = [
            lid for lid in written if lost in (await client.ledger_metadata(lid)).all_bookies()
        ]
        await bookies.stop(bookies.index_of(lost))
        registered = set(bookies.ids.values()) - {lost}
        waiting = Auditor(client, name="w", options=FAST, rng=random.Random(1))
        assert await waiting.check(registered, set(), delay=30.0) == 0
        assert set(waiting.lost.since) == {lost}
        auditor = Auditor(client, name="a", options=FAST, rng=random.Random(1))
        assert await auditor.check(registered, set(), delay=0.0) == len(listing)
        urm = UnderreplicationManager(client.metadata_store)
        assert sorted(await urm.list_ids()) == sorted(listing)
