"""`walkit metadata export | import | migrate` as a user runs them, on sqlite stores."""

from __future__ import annotations

import functools
import json
import stat
import subprocess
from pathlib import Path

import trio

from tests.cli._run import walkit
from walkit.metadata import ensure_cluster, open_metadata_store


async def _run(*args: str) -> subprocess.CompletedProcess[str]:
    # In a thread: the test's own sqlite session keeps its heartbeat meanwhile.
    return await trio.to_thread.run_sync(functools.partial(walkit, *args))


async def test_export_import_and_migrate(tmp_path: Path) -> None:
    source = f"sqlite://{tmp_path / 'source.db'}"
    dump = tmp_path / "backup.dump"
    async with await open_metadata_store(source) as store:
        instance = await ensure_cluster(store)
        await store.create("/logs/orders", b'{"format": 1}')
        await store.next_id("ledger")
        await store.create("/bookies/available/127.0.0.1:3181", b"{}", ephemeral=True)

        done = await _run("metadata", "export", source, str(dump))
        assert done.returncode == 0, done.stderr
        assert "exported 10 nodes and 1 id counter from" in done.stdout
        assert "left out 1 ephemeral node)" in done.stdout
        assert stat.S_IMODE(dump.stat().st_mode) == 0o600  # it holds passwords

        moved = f"sqlite://{tmp_path / 'moved.db'}"
        refused = await _run("metadata", "migrate", "--from", source, "--to", moved)
        assert refused.returncode == 1
        assert "ClusterRunningError" in refused.stderr
        assert "/bookies/available/127.0.0.1:3181" in refused.stderr
        assert "Traceback" not in refused.stderr

    copy = f"sqlite://{tmp_path / 'copy.db'}"
    done = await _run("metadata", "import", str(dump), copy, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["nodes"] == 10
    async with await open_metadata_store(copy) as store:
        assert await ensure_cluster(store) == instance
        assert await store.exists("/logs/orders") == 0
        assert await store.next_id("ledger") == 2

    again = await _run("metadata", "import", str(dump), copy)
    assert again.returncode == 1
    assert "MetadataNotEmptyError" in again.stderr and "is not empty" in again.stderr

    moved = f"sqlite://{tmp_path / 'moved.db'}"
    done = await _run("metadata", "migrate", "--from", source, "--to", moved)
    assert done.returncode == 0, done.stderr
    assert f"--metadata {moved}" in done.stdout


async def test_bad_dump_files_get_clear_errors(tmp_path: Path) -> None:
    target = f"sqlite://{tmp_path / 'target.db'}"
    cases = {
        "missing.dump": None,
        "empty.dump": b"",
        "junk.dump": b"\x00\x01 not a dump\n",
        "cut.dump": b'{"format":"walkit-metadata-dump","version":1,"walkit":"x","source":"s"}\n'
        b'{"path":"/a","value":""}\n',
        "future.dump": b'{"format":"walkit-metadata-dump","version":7}\n',
    }
    expected = {
        "missing.dump": "cannot read dump file",
        "empty.dump": "is not a walkit metadata dump",
        "junk.dump": "is not a walkit metadata dump",
        "cut.dump": "is truncated: it has no end line",
        "future.dump": "version 7 is not one this walkit reads",
    }
    for name, content in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        done = await _run("metadata", "import", str(path), target)
        assert done.returncode == 1, name
        assert expected[name] in done.stderr, (name, done.stderr)
        assert "Traceback" not in done.stderr
    async with await open_metadata_store(target) as store:
        assert await store.children("/") == []  # nothing was written
