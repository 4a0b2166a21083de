"""Autorecovery across real `walkit-bookie` processes (bookies killed and wiped, ledgers rereplicated with nobody's help).

4 bookies, E=Qw=3 Qa=2, 2,000 entries in closed ledgers. One bookie is SIGKILLed and its data
dir wiped; the bookies' own auditor and workers rereplicate every ledger. Then two more bookies are
SIGKILLed: every entry must still read back, byte for byte, from the one bookie left, which is
only possible if the first loss was rereplicated.

The same with ledgers that each have a password of their own, which nobody gives
autorecovery: the bookies take it from the ledgers' metadata. Ledgers whose metadata keeps no
password (their creator opted out, or they were written before ledgers kept it) stay marked,
say so once and are listed by `walkit underreplicated`, until an operator gives the password.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import pytest
import trio

from tests._cluster import ProcessCluster, process_cluster
from tests._release_0_1 import ledger_metadata_bytes
from tests.cli._run import walkit
from walkit import BookieId
from walkit.autorecovery import AutorecoveryOptions, rereplicate_bookie
from walkit.client import Client
from walkit.metadata import UnderreplicationManager, ledger_path

HANG_GUARD = 180
LEDGERS = 10
ENTRIES = 200  # per ledger: 2,000 in all


class Written(NamedTuple):
    password: bytes
    payloads: list[bytes]


def password_lines(cluster: ProcessCluster, ledgers: Sequence[int]) -> list[str]:
    """The bookies' log lines saying that they cannot find the password of one of
    ``ledgers`` (``ledger_id=N`` ends at a space)."""
    names = {f"ledger_id={lid} " for lid in ledgers}
    return [
        line
        for bookie in cluster.bookies
        for line in bookie.output
        if "password" in line
        and ("rereplication_failed" in line or "rereplication_needs_password" in line)
        and any(name in line + " " for name in names)
    ]


async def _rereplicated(
    client: Client, ledgers: list[int], lost: BookieId, cluster: ProcessCluster
) -> None:
    """Until no ledger lists ``lost`` and no marker is left. Polled: the bookies' log lines,
    which end the wait at once if a worker cannot find a ledger's password, have no event."""
    urm = UnderreplicationManager(client.metadata_store)
    while True:
        stuck = password_lines(cluster, ledgers)
        assert not stuck, f"the bookies cannot rereplicate without the password: {stuck[0]}"
        listing = [
            lid for lid in ledgers if lost in (await client.ledger_metadata(lid)).all_bookies()
        ]
        if not listing and not await urm.list_ids():
            return
        await trio.sleep(0.2)


async def write_wipe_one_rereplicate_lose_two(
    client: Client,
    cluster: ProcessCluster,
    ledgers: int,
    entries: int,
    *,
    recover: bool = False,
    passwords: Sequence[bytes] = (b"",),
    digests: Sequence[str] = ("crc32c",),
) -> dict[int, Written]:
    """The scenario: write closed ledgers, SIGKILL and wipe a bookie of their ensemble, wait
    until the bookies rereplicated every ledger (none lists it, no marker left), then SIGKILL two
    more of the original ensemble. Returns what was written, to read back from the last one.

    ``recover``: rereplicate with ``rereplicate_bookie`` through ``client``, with no rate limit, instead
    of waiting for the bookies' workers; the replacement must copy every entry itself.
    Ledger ``n`` gets ``passwords[n % len(passwords)]`` (the bookies are given none: they
    take them from the ledgers' metadata) and ``digests[n % len(digests)]``."""
    written: dict[int, Written] = {}
    for n in range(ledgers):
        password = passwords[n % len(passwords)]
        lw = await client.create_ledger(
            3, 3, 2, password=password, digest=digests[n % len(digests)]
        )
        payloads = [bytes([n, i % 251]) * (1 + (i * 37) % 300) for i in range(entries)]
        await lw.append_batch(payloads)
        await lw.close()
        written[lw.id] = Written(password, payloads)
    first = await client.ledger_metadata(next(iter(written)))
    victim = cluster.by_address(first.fragments[0][1][0])
    victim.kill()
    shutil.rmtree(victim.data_dir)
    if recover:
        unlimited = AutorecoveryOptions(entries_per_second=0, bytes_per_second=0)
        report = await rereplicate_bookie(client, victim.address, options=unlimited)
        assert report.ok, report.failed
        # The ledgers that listed it (with 4 bookies and E = 3, maybe not all of them).
        assert report.ledgers and report.entries == entries * len(report.ledgers)
        assert report.entries_by_replacements == report.entries
    await _rereplicated(client, list(written), victim.address, cluster)
    survivors = [b for b in cluster.bookies if b is not victim]
    for lid in written:
        md = await client.ledger_metadata(lid)
        assert md.is_closed
        assert set(md.all_bookies()) == {b.address for b in survivors}
    # Two more bookies of the original ensemble die; one bookie is left.
    for bookie in survivors[:2]:
        bookie.kill()
    return written


async def read_back(client: Client, written: dict[int, Written]) -> None:
    """Every entry, byte for byte, with each ledger's password."""
    for lid, (password, payloads) in written.items():
        lr = await client.open_ledger(lid, password=password)
        got = await lr.read(0, lr.last_add_confirmed)
        assert [e.payload for e in got] == payloads, lid


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
                    written = await write_wipe_one_rereplicate_lose_two(
                        client, cluster, LEDGERS, ENTRIES
                    )
                async with Client.connect(url) as reader:
                    await read_back(reader, written)

        trio.run(main)
        # The rereplication was done by the bookies' own workers (their logs say so).
        logs = "\n".join(line for b in cluster.bookies for line in b.output)
        assert "ledger_rereplicated" in logs
        assert "auditor_elected" in logs


def test_ledgers_with_passwords_of_their_own_are_rereplicated_by_themselves(tmp_path: Path) -> None:
    """Outside testing found that ledgers created with ``password=b"pw"`` were never rereplicated:
    autorecovery knew only b"", logs' passwords and the operator's. Now each ledger keeps its
    password in its metadata and the bookies' workers rereplicate it (crc32c and MAC digests, every
    ledger a password of its own, none given to the bookies)."""
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    passwords = [b"password of ledger %d" % n for n in range(6)]
    with process_cluster(url, tmp_path, 4, extra_args=["--lost-bookie-delay", "1"]) as cluster:

        async def main() -> dict[int, Written]:
            with trio.fail_after(HANG_GUARD):
                async with Client.connect(url) as client:
                    written = await write_wipe_one_rereplicate_lose_two(
                        client, cluster, 6, 150, passwords=passwords, digests=("crc32c", "mac")
                    )
                async with Client.connect(url) as reader:
                    await read_back(reader, written)
                return written

        written = trio.run(main)
        logs = "\n".join(line for b in cluster.bookies for line in b.output)
        assert "ledger_rereplicated" in logs
        assert not password_lines(cluster, list(written))


def test_ledgers_without_a_stored_password_wait_for_the_operator(tmp_path: Path) -> None:
    """A ledger whose creator opted out, and one written as 0.1.0 wrote metadata (no password
    kept; through the store), both with passwords of their own, stay marked: each bookie says
    so once, and `walkit underreplicated` lists them with the reason. A 0.1.0 ledger with the
    default password b"" is rereplicated by itself, as it did. `walkit recover --password` rereplicates the
    others; then the rest of the original ensemble dies and every entry reads back."""
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 4, extra_args=["--lost-bookie-delay", "1"]) as cluster:

        async def write() -> tuple[dict[int, Written], list[int], BookieId]:
            async with Client.connect(url) as client:
                written: dict[int, Written] = {}
                ensembles = []
                for password, store in ((b"opted out", False), (b"before", True), (b"", True)):
                    lw = await client.create_ledger(
                        3, 3, 2, password=password, store_password=store
                    )
                    payloads = [b"%s %d " % (password, i) * (1 + i % 9) for i in range(100)]
                    await lw.append_batch(payloads)
                    await lw.close()
                    written[lw.id] = Written(password, payloads)
                    ensembles.append(set(lw.metadata.fragments[0][1]))
                opted_out, before, default = written
                store_ = client.metadata_store
                for lid in (before, default):  # rewritten as 0.1.0 wrote them
                    md = await client.ledger_metadata(lid)
                    node = await store_.get(ledger_path(lid))
                    await store_.set(ledger_path(lid), ledger_metadata_bytes(md), node.version)
                    assert not (await client.ledger_metadata(lid)).has_password
                # Three ensembles of 3 among 4 bookies share at least one bookie.
                return written, [opted_out, before, default], min(set.intersection(*ensembles))

        written, (opted_out, before, default), lost = trio.run(write)
        victim = cluster.by_address(lost)
        victim.kill()
        shutil.rmtree(victim.data_dir)

        async def marked_and_said() -> None:
            """Until the b"" ledger is rereplicated and both others were found without a password.
            Polled: the bookies' log lines have no event."""
            with trio.fail_after(HANG_GUARD):
                async with Client.connect(url) as client:
                    urm = UnderreplicationManager(client.metadata_store)
                    while True:
                        said = {
                            lid for lid in (opted_out, before) if password_lines(cluster, [lid])
                        }
                        rereplicated = (
                            lost not in (await client.ledger_metadata(default)).all_bookies()
                        )
                        marked = await urm.list_ids()
                        if said == {opted_out, before} and rereplicated and default not in marked:
                            assert sorted(marked) == sorted([opted_out, before])
                            return
                        await trio.sleep(0.2)

        trio.run(marked_and_said)
        for bookie in cluster.bookies:  # said once by a bookie, not once per pass
            for lid in (opted_out, before):
                lines = password_lines(cluster, [lid])
                assert all("rereplication_needs_password" in line for line in lines)
                assert len([line for line in bookie.output if line in lines]) <= 1
        listed = walkit("underreplicated", "--metadata", url, "--json")
        assert listed.returncode == 0, listed.stderr
        rows = {row["ledger_id"]: row for row in json.loads(listed.stdout)}
        assert set(rows) == {opted_out, before}
        assert all(row["needs_password"] and row["missing"] == [str(lost)] for row in rows.values())
        text = walkit("underreplicated", "--metadata", url).stdout
        for lid in (opted_out, before):
            assert f"ledger {lid}: its password is needed" in text

        rereplicated = walkit(
            "recover", str(lost), "--password", "opted out", "--password", "before",
            "--metadata", url, "--json",
        )  # fmt: skip
        assert rereplicated.returncode == 0, rereplicated.stdout + rereplicated.stderr
        assert walkit("underreplicated", "--metadata", url, "--json").stdout.strip() == "[]"
        survivors = [b for b in cluster.bookies if b is not victim]
        for bookie in survivors[:2]:
            bookie.kill()

        async def read() -> None:
            with trio.fail_after(HANG_GUARD):
                async with Client.connect(url) as reader:
                    for lid in written:
                        assert lost not in (await reader.ledger_metadata(lid)).all_bookies()
                    await read_back(reader, written)

        trio.run(read)
