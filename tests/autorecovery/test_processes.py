"""Autorecovery across real `walkit-bookie` processes (the scenario of issue 13).

4 bookies, E=Qw=3 Qa=2, 2,000 entries in closed ledgers. One bookie is SIGKILLed and its data
dir wiped; the bookies' own auditor and workers heal every ledger. Then two more bookies are
SIGKILLed: every entry must still read back, byte for byte, from the one bookie left, which is
only possible if the first loss was healed.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import trio

from tests._cluster import ProcessCluster, process_cluster
from walkit import BookieId
from walkit.autorecovery import AutorecoveryOptions, recover_bookie
from walkit.client import Client
from walkit.metadata import UnderreplicationManager

HANG_GUARD = 180
LEDGERS = 10
ENTRIES = 200  # per ledger: 2,000 in all


async def _healed(client: Client, ledgers: list[int], lost: BookieId) -> None:
    """Poll the metadata until no ledger lists ``lost`` and no marker is left."""
    urm = UnderreplicationManager(client.metadata_store)
    while True:
        listing = [
            lid for lid in ledgers if lost in (await client.ledger_metadata(lid)).all_bookies()
        ]
        if not listing and not await urm.list_ids():
            return
        await trio.sleep(0.2)


async def write_wipe_one_heal_lose_two(
    client: Client, cluster: ProcessCluster, ledgers: int, entries: int, *, recover: bool = False
) -> dict[int, list[bytes]]:
    """The scenario: write closed ledgers, SIGKILL and wipe a bookie of their ensemble, wait
    until the bookies healed every ledger (none lists it, no marker left), then SIGKILL two
    more of the original ensemble. Returns what was written, to read back from the last one.

    ``recover``: heal with ``recover_bookie`` through ``client``, with no rate limit, instead
    of waiting for the bookies' workers; the replacement must copy every entry itself."""
    written: dict[int, list[bytes]] = {}
    for n in range(ledgers):
        lw = await client.create_ledger(3, 3, 2)
        payloads = [bytes([n, i % 251]) * (1 + (i * 37) % 300) for i in range(entries)]
        await lw.append_batch(payloads)
        await lw.close()
        written[lw.id] = payloads
    first = await client.ledger_metadata(next(iter(written)))
    victim = cluster.by_address(first.fragments[0][1][0])
    victim.kill()
    shutil.rmtree(victim.data_dir)
    if recover:
        unlimited = AutorecoveryOptions(entries_per_second=0, bytes_per_second=0)
        report = await recover_bookie(client, victim.address, options=unlimited)
        assert report.ok, report.failed
        # The ledgers that listed it (with 4 bookies and E = 3, maybe not all of them).
        assert report.ledgers and report.entries == entries * len(report.ledgers)
        assert report.entries_by_replacements == report.entries
    await _healed(client, list(written), victim.address)
    survivors = [b for b in cluster.bookies if b is not victim]
    for lid in written:
        md = await client.ledger_metadata(lid)
        assert md.is_closed
        assert set(md.all_bookies()) == {b.address for b in survivors}
    # Two more bookies of the original ensemble die; one bookie is left.
    for bookie in survivors[:2]:
        bookie.kill()
    return written


@pytest.mark.parametrize(
    "driver", ["sqlite", pytest.param("zookeeper", marks=pytest.mark.zookeeper)]
)
def test_sigkill_and_wipe_one_bookie_then_lose_two_more(
    tmp_path: Path, driver: str, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'metadata.db'}"
        if driver == "sqlite"
        else request.getfixturevalue("zookeeper_url")
    )
    with process_cluster(url, tmp_path, 4, extra_args=["--lost-bookie-delay", "1"]) as cluster:

        async def main() -> None:
            with trio.fail_after(HANG_GUARD):
                async with Client.connect(url) as client:
                    written = await write_wipe_one_heal_lose_two(client, cluster, LEDGERS, ENTRIES)
                async with Client.connect(url) as reader:
                    for lid, payloads in written.items():
                        lr = await reader.open_ledger(lid)
                        got = await lr.read(0, lr.last_add_confirmed)
                        assert [e.payload for e in got] == payloads, lid

        trio.run(main)
        # The healing was done by the bookies' own workers (their logs say so).
        logs = "\n".join(line for b in cluster.bookies for line in b.output)
        assert "ledger_rereplicated" in logs
        assert "auditor_elected" in logs
