"""From sqlite to ZooKeeper with real processes: a `walkit sandbox` on sqlite holds logs and a
snapshot; stopped, its metadata moves to a real ZooKeeper with `walkit metadata migrate`; the
sandbox starts again on the ZooKeeper URL (same data dirs and ports) and every record, the
snapshot and the ledgers' id counter come back (docs/operations.md walks an operator through
the same steps)."""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path

import pytest
import trio

from tests._sandbox import running_sandbox
from tests.cli._run import walkit
from walkit import Client, Log, LogPosition
from walkit.metadata import LedgerManager, list_bookies, open_metadata_store

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]


async def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return await trio.to_thread.run_sync(functools.partial(walkit, *args))


async def _write(url: str) -> tuple[dict[str, list[tuple[LogPosition, bytes]]], bytes]:
    written: dict[str, list[tuple[LogPosition, bytes]]] = {"orders": [], "events": []}
    state = b"".join(b"state %d;" % i for i in range(5000))
    async with Client.connect(url) as client:
        # Small ledgers, so that the log spans several.
        async with Log.open(client, "orders", roll_entries=40) as log, log.writer() as writer:
            for i in range(150):
                payload = b"order %d" % i
                written["orders"].append((await writer.append(payload), payload))
            snap_at = written["orders"][99][0]
            await log.save_snapshot(snap_at, state)
        async with Log.open(client, "events") as log:
            for round_ in range(2):  # two writers: a takeover in between
                async with log.writer() as writer:
                    batch = [b"event %d.%d" % (round_, i) for i in range(30)]
                    positions = await writer.append_batch(batch)
                    written["events"] += list(zip(positions, batch, strict=True))
    return written, state


async def _read_all(url: str, name: str) -> list[tuple[LogPosition, bytes]]:
    async with Client.connect(url) as client, Log.open(client, name, create=False) as log:
        return [(r.position, r.payload) async for r in log.reader(follow=False)]


async def test_a_sandbox_moves_from_sqlite_to_zookeeper(tmp_path: Path, zookeeper_url: str) -> None:
    data_dir = tmp_path / "sandbox"
    with running_sandbox(data_dir, bookies=3) as sandbox:
        sqlite_url = sandbox.metadata_url
        assert sqlite_url.startswith("sqlite:///")
        written, state = await _write(sqlite_url)
        async with await open_metadata_store(sqlite_url) as store:
            old_ids = await LedgerManager(store).list_ids()
            last_id = (await store.id_counters())["ledger"]

        refused = await _run("metadata", "migrate", "--from", sqlite_url, "--to", zookeeper_url)
        assert refused.returncode == 1 and "ClusterRunningError" in refused.stderr
        assert "/bookies/available/127.0.0.1:" in refused.stderr
        assert sandbox.stop() == 0

    done = await _run("metadata", "migrate", "--from", sqlite_url, "--to", zookeeper_url)
    assert done.returncode == 0, done.stderr
    assert f"--metadata {zookeeper_url}" in done.stdout

    with running_sandbox(data_dir, bookies=3, extra=["--metadata", zookeeper_url]) as sandbox:
        assert sandbox.metadata_url == zookeeper_url
        async with await open_metadata_store(zookeeper_url) as store:
            assert len((await list_bookies(store)).writable) == 3  # their cookies matched
        for name, records in written.items():
            assert await _read_all(zookeeper_url, name) == records, name
        async with (
            Client.connect(zookeeper_url) as client,
            Log.open(client, "orders", create=False) as log,
        ):
            snapshot = await log.latest_snapshot()
            assert snapshot is not None and snapshot.position == written["orders"][99][0]
            assert await snapshot.read() == state
            async with log.writer() as writer:  # a takeover: a new ledger on ZooKeeper
                after = await writer.append(b"after the move")
        async with await open_metadata_store(zookeeper_url) as store:
            new_ids = set(await LedgerManager(store).list_ids()) - set(old_ids)
        assert new_ids and min(new_ids) > last_id  # the id counter came along
        assert (await _read_all(zookeeper_url, "orders"))[-1] == (after, b"after the move")
