"""Offloading as users run it, in processes: ``walkit log offload`` and ``walkit log show``,
and an offloader SIGKILLed in the middle of a step, finished by the next pass."""

from __future__ import annotations

import json
import signal
import sys
import time
from pathlib import Path

import pytest
import trio

from tests.client.conftest import cluster, connect
from tests.lake.test_crashes import _check_exactly_once, _fill
from tests.log.test_cli_log import walkit
from walkit import Log


@pytest.mark.parametrize("step", ["commit", "bookies"])
async def test_a_sigkilled_offloader_then_the_cli(tmp_path: Path, step: str) -> None:
    url = f"sqlite://{tmp_path / 'metadata.db'}"
    lake = f"file://{tmp_path / 'lake'}"
    async with cluster(url, tmp_path, 3), connect(url, wall_clock=time.time) as client:
        log = await Log.open(client, "orders", roll_entries=5)
        payloads = await _fill(log, 17)
        with trio.fail_after(120):
            killed = await trio.run_process(
                [sys.executable, "-m", "tests.lake._offloader", url, "orders", lake, step],
                check=False,
                capture_stderr=True,
            )
        assert killed.returncode == -signal.SIGKILL, killed.stderr
        done = await walkit(
            url, "log", "offload", "orders", "--to", lake, "--deletion-lag", "0", "--json"
        )
        assert done.returncode == 0, done.stderr
        doc = json.loads(done.stdout)
        assert doc["in_lake"] == 3 and doc["bookie_copies_deleted"] == 2
        shown = await walkit(url, "log", "show", "orders", "--json")
        assert shown.returncode == 0, shown.stderr
        where = [lg["where"] for lg in json.loads(shown.stdout)["ledgers"]]
        assert where == ["lake", "lake", "lake+bookies", "bookies"]
        handle = await Log.open(client, "orders", offload_to=lake)
        await _check_exactly_once(handle, payloads)
        bad = await walkit(url, "log", "offload", "orders", "--to", "ftp://x")
        assert bad.returncode != 0 and b"offload_to" in bad.stderr
