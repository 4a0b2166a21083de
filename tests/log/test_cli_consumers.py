"""``walkit log consumers`` and ``walkit log consumer delete``, run as a user would (a
subprocess) against in-process bookies on sqlite metadata."""

from __future__ import annotations

import json
from pathlib import Path

from tests.client.conftest import cluster, connect
from tests.log.test_cli_log import walkit
from walkit import Log


async def test_consumer_commands(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'metadata.db'}"
    async with cluster(url, tmp_path, 3), connect(url) as client:
        log = await Log.open(client, "orders", roll_entries=4, password=b"pw")
        async with log.writer() as w:
            positions = [await w.append(b"order-%d" % i) for i in range(10)]
        done = log.consumer("billing")
        await done.commit(positions[-1])
        halfway = log.consumer("search")
        await halfway.commit(positions[3])
        await log.consumer("audit").register()

        listed = await walkit(url, "log", "consumers", "orders", "--json", "--password", "pw")
        assert listed.returncode == 0, listed.stderr
        rows = {r["name"]: r for r in json.loads(listed.stdout)}
        assert set(rows) == {"audit", "billing", "search"}
        assert rows["billing"]["lag_records"] == 0 and rows["billing"]["lag_bytes"] == 0
        assert rows["search"]["position"] == str(positions[3].next())
        assert rows["search"]["lag_records"] == 6
        assert rows["search"]["lag_bytes"] > 0 and rows["search"]["exact"] is True
        assert rows["audit"]["position"] == "earliest" and rows["audit"]["lag_records"] == 10
        assert not any(r["behind"] for r in rows.values())
        table = await walkit(url, "log", "consumers", "orders", "--password", "pw")
        assert table.returncode == 0
        head, *lines = table.stdout.decode().splitlines()
        assert head.split()[:4] == ["NAME", "POSITION", "BEHIND", "LAG_RECORDS"]
        assert [line.split()[0] for line in lines] == ["audit", "billing", "search"]

        deleted = await walkit(url, "log", "consumer", "delete", "orders", "audit", "--json")
        assert deleted.returncode == 0, deleted.stderr
        assert json.loads(deleted.stdout) == {"log": "orders", "consumer": "audit", "deleted": True}
        assert [i.name for i in await log.consumers()] == ["billing", "search"]

        # Errors: a clear message, a non-zero status, nothing changed.
        again = await walkit(url, "log", "consumer", "delete", "orders", "audit")
        assert again.returncode == 1 and b"NoSuchConsumerError" in again.stderr
        missing = await walkit(url, "log", "consumers", "nope")
        assert missing.returncode == 1 and b"NoSuchLogError" in missing.stderr
        bad = await walkit(url, "log", "consumer", "delete", "orders", "a/b")
        assert bad.returncode == 1 and b"bad consumer name" in bad.stderr
        usage = await walkit(url, "log", "consumer")
        assert usage.returncode == 2
        assert [i.name for i in await log.consumers()] == ["billing", "search"]
