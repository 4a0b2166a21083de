"""`walkit underreplicated | recover | bookie decommission | autorecovery` as a user runs them,
against real bookie processes (their own autorecovery is off, so the commands do the work)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests._cluster import ProcessCluster, process_cluster
from tests.cli._run import walkit
from walkit import BookieId
from walkit.client import Client
from walkit.metadata import UnderreplicationManager, open_metadata_store, read_cookie


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("autorecovery-cli")
    with process_cluster(
        f"sqlite:///{root / 'metadata.db'}", root, 7, extra_args=["--no-autorecovery"]
    ) as c:
        yield c


def write(
    url: str, count: int, entries: int, password: bytes = b"", *, store_password: bool = True
) -> dict[int, list[bytes]]:
    async def main() -> dict[int, list[bytes]]:
        async with Client.connect(url) as client:
            out = {}
            for n in range(count):
                lw = await client.create_ledger(
                    3, 3, 2, password=password, store_password=store_password
                )
                payloads = [b"cli %d %d" % (n, i) for i in range(entries)]
                await lw.append_batch(payloads)
                await lw.close()
                out[lw.id] = payloads
            return out

    return trio.run(main)


def ensembles(url: str, ledgers: list[int]) -> dict[int, set[BookieId]]:
    async def main() -> dict[int, set[BookieId]]:
        async with Client.connect(url) as client:
            return {lid: (await client.ledger_metadata(lid)).all_bookies() for lid in ledgers}

    return trio.run(main)


def read_back(url: str, written: dict[int, list[bytes]], password: bytes = b"") -> None:
    async def main() -> None:
        async with Client.connect(url) as client:
            for lid, payloads in written.items():
                lr = await client.open_ledger(lid, password=password)
                assert [e.payload for e in await lr.read(0, lr.last_add_confirmed)] == payloads

    trio.run(main)


def test_autorecovery_settings(cluster: ProcessCluster) -> None:
    url = cluster.metadata_url
    status = walkit("autorecovery", "status", "--metadata", url, "--json")
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["enabled"] is True
    assert walkit("autorecovery", "disable", "--metadata", url).returncode == 0
    done = walkit("autorecovery", "delay", "7.5", "--metadata", url, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {
        "enabled": False,
        "lost_bookie_delay": 7.5,
        "auditor": None,
        "underreplicated_ledgers": 0,
    }
    shown = walkit("autorecovery", "enable", "--metadata", url)
    assert shown.returncode == 0
    assert "enabled                  True" in shown.stdout
    assert "lost_bookie_delay        7.5" in shown.stdout
    for bad in (["delay", "-1"], ["delay", "soon"], ["delay", "nan"], ["sometimes"]):
        result = walkit("autorecovery", *bad, "--metadata", url)
        assert result.returncode == 2, bad
        assert "error" in result.stderr


def test_recover_lists_then_heals(cluster: ProcessCluster) -> None:
    url = cluster.metadata_url
    # Ledgers whose metadata does not keep their password (their creator opted out).
    written = write(url, 3, 50, password=b"pw", store_password=False)
    lost = next(iter(ensembles(url, list(written)).values()))
    victim = cluster.by_address(sorted(lost)[0])
    victim.kill()
    listing = [lid for lid, bs in ensembles(url, list(written)).items() if victim.address in bs]

    # Without the password, the ledgers stay marked and the commands say why.
    failed = walkit("recover", str(victim.address), "--metadata", url)
    assert failed.returncode == 1
    for lid in listing:
        assert f"ledger {lid}: ledger {lid}: its password is needed" not in failed.stdout
        assert f"ledger {lid}: its password is needed" in failed.stdout
    shown = walkit("underreplicated", "--metadata", url, "--json")
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(shown.stdout)
    assert {r["ledger_id"] for r in rows} >= set(listing)
    assert all(r["missing"] == [str(victim.address)] for r in rows if r["ledger_id"] in listing)
    assert all(r["needs_password"] is True for r in rows if r["ledger_id"] in listing)
    text = walkit("underreplicated", "--metadata", url).stdout.splitlines()
    assert text[0].split() == ["LEDGER_ID", "MISSING", "LOCKED_BY"]
    assert [str(victim.address), "-"] in [line.split()[1:] for line in text[1:]]
    for lid in listing:  # one line each, after the table, saying what to do
        (line,) = [line for line in text if line.startswith(f"ledger {lid}: ")]
        assert "password is needed" in line and "walkit recover BOOKIE --password" in line

    healed = walkit("recover", str(victim.address), "--password", "pw", "--metadata", url)
    assert healed.returncode == 0, healed.stdout + healed.stderr
    assert f"{len(listing)}/{len(listing)} ledgers" in healed.stderr  # the progress bar
    assert "healed" in healed.stdout
    assert all(victim.address not in bs for bs in ensembles(url, list(written)).values())
    assert json.loads(walkit("underreplicated", "--metadata", url, "--json").stdout) == []
    read_back(url, written, b"pw")


def test_decommission(cluster: ProcessCluster) -> None:
    url = cluster.metadata_url
    written = write(url, 2, 20)
    target = sorted(next(iter(ensembles(url, list(written)).values())))[0]
    bookie = cluster.by_address(target)
    assert bookie.running  # new ledgers only go to live bookies
    refused = walkit("bookie", "decommission", str(target), "--metadata", url)
    assert refused.returncode == 1
    assert "stop it" in refused.stderr
    bookie.stop()
    # The earlier test's ledgers (password "pw") may list it too.
    done = walkit(
        "bookie", "decommission", str(target), "--password", "pw", "--metadata", url, "--json"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["decommissioned"] is True
    assert all(target not in bs for bs in ensembles(url, list(written)).values())

    async def cookie() -> object:
        async with await open_metadata_store(url) as store:
            assert await UnderreplicationManager(store).list_ids() == []
            return await read_cookie(store, target)

    assert trio.run(cookie) is None
    read_back(url, written)


def test_bad_arguments(cluster: ProcessCluster, tmp_path: Path) -> None:
    url = cluster.metadata_url
    for args in (
        ["recover", "not-a-bookie"],
        ["recover", "127.0.0.1:99999"],
        ["bookie", "decommission"],
        ["bookie", "explode", "127.0.0.1:1"],
        ["recover", "127.0.0.1:1", "--entries-per-second", "-5"],
        ["recover", "127.0.0.1:1", "--bytes-per-second", "lots"],
        ["recover", "127.0.0.1:1", "--bytes-per-second", "inf"],
    ):
        result = walkit(*args, "--metadata", url)
        assert result.returncode == 2, args
        assert "error" in result.stderr
    # A bookie no ledger lists: nothing to do, and it says so.
    result = walkit("recover", "127.0.0.1:1", "--metadata", url, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ledgers"] == 0


def test_recover_killed_while_copying_then_finished(cluster: ProcessCluster) -> None:
    """`walkit recover` SIGKILLed mid-copy: its lock goes with its metadata session, the
    ledger stays marked, and the next run finishes the job."""
    import os
    import subprocess
    import sys
    import time

    url = cluster.metadata_url
    written = write(url, 1, 200)
    (lid,) = written
    victim = cluster.by_address(sorted(ensembles(url, [lid])[lid])[0])
    victim.kill()
    slow = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "walkit.cli",
            "recover",
            str(victim.address),
            "--password",
            "pw",
            "--entries-per-second",
            "20",
            "--metadata",
            url,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, WALKIT_METADATA=""),
    )
    try:
        deadline = time.monotonic() + 60
        while True:  # until it holds the lock (it is copying)
            rows = json.loads(walkit("underreplicated", "--metadata", url, "--json").stdout)
            if any(r["ledger_id"] == lid and r["locked_by"] == "walkit recover" for r in rows):
                break
            if slow.poll() is not None:
                raise AssertionError(slow.communicate()[0])
            assert time.monotonic() < deadline
            time.sleep(0.1)
        slow.kill()
    finally:
        slow.kill()
        slow.wait(timeout=30)
    rows = json.loads(walkit("underreplicated", "--metadata", url, "--json").stdout)
    assert lid in [r["ledger_id"] for r in rows]  # still marked (with any other ledger of it)
    done = walkit("recover", str(victim.address), "--password", "pw", "--metadata", url, "--json")
    assert done.returncode == 0, done.stdout + done.stderr  # waits for the dead lock to expire
    assert json.loads(done.stdout)["healed"] >= 1
    assert victim.address not in ensembles(url, [lid])[lid]
    assert json.loads(walkit("underreplicated", "--metadata", url, "--json").stdout) == []
    read_back(url, written)


def test_recover_without_a_rate_limit_has_the_replacements_copy(cluster: ProcessCluster) -> None:
    """With no rate limit, each replacement (a `walkit-bookie --no-autorecovery` process) copies
    the lost copies from the replicas itself; the report counts them."""
    url = cluster.metadata_url
    written = write(url, 2, 40)
    victim = cluster.by_address(sorted(next(iter(ensembles(url, list(written)).values())))[0])
    listing = [lid for lid, bs in ensembles(url, list(written)).items() if victim.address in bs]
    victim.kill()
    done = walkit(
        "recover",
        str(victim.address),
        "--entries-per-second",
        "0",
        "--bytes-per-second",
        "0",
        "--password",
        "pw",  # the first test's ledgers: the bookies cannot know it, so they are sent copies
        "--metadata",
        url,
        "--json",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["copied_by_replacements"] >= 40 * len(listing) > 0
    assert all(victim.address not in bs for bs in ensembles(url, list(written)).values())
    read_back(url, written)


def test_underreplicated_says_which_ledgers_need_their_password(tmp_path: Path) -> None:
    """Straight from the metadata store (no bookie needed): a ledger that keeps its password,
    one that opted out, one of 0.1.0 with the default password, and one whose metadata is
    malformed (its row says null, and the command goes on)."""
    from tests._release_0_1 import ledger_metadata_bytes
    from walkit import LedgerMetadata
    from walkit._core.ledger_metadata import password_hash
    from walkit.metadata import LedgerManager, ledger_path

    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    lost = BookieId("127.0.0.1", 9)
    ensemble = (lost, BookieId("127.0.0.1", 10), BookieId("127.0.0.1", 11))

    def md(ledger_id: int, password: bytes, stored: bool) -> LedgerMetadata:
        return LedgerMetadata(
            ledger_id=ledger_id,
            ensemble_size=3,
            write_quorum=3,
            ack_quorum=2,
            fragments=((0, ensemble),),
            password_sha256=password_hash(password, b"0123456789abcdef"),
            password=password if stored else None,
        )

    async def prepare() -> None:
        async with await open_metadata_store(url) as store:
            ledgers = LedgerManager(store)
            await ledgers.create(md(1, b"kept", True))
            await ledgers.create(md(2, b"opted out", False))
            await store.create(ledger_path(3), ledger_metadata_bytes(md(3, b"", False)))
            doc = json.loads(md(4, b"pw", True).to_bytes())
            doc["password"] = 1234
            await store.create(ledger_path(4), json.dumps(doc).encode())
            urm = UnderreplicationManager(store)
            await urm.ensure_paths()
            for ledger_id in (1, 2, 3, 4, 5):  # 5: marked, then deleted
                await urm.mark(ledger_id, [lost])

    trio.run(prepare)
    shown = walkit("underreplicated", "--metadata", url, "--json")
    assert shown.returncode == 0, shown.stderr
    needs = {row["ledger_id"]: row["needs_password"] for row in json.loads(shown.stdout)}
    assert needs == {1: False, 2: True, 3: False, 4: None, 5: None}
    text = walkit("underreplicated", "--metadata", url)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert [line for line in lines if "password" in line] == [lines[-1]]  # one line, last
    assert lines[-1].startswith("ledger 2: its password is needed")
