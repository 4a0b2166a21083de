"""examples/kv_store.py, run as a program against in-process bookies (sqlite metadata, so the
program's own process can reach the cluster): the demo (failover included), then commands, and
``serve``'s refusal of bad options (the service itself: tests/kv/)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import trio

from tests.client.conftest import cluster

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kv_store.py"


async def kv(url: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(120):
        return await trio.run_process(
            [sys.executable, str(EXAMPLE), url, *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )


async def test_kv_store_demo_and_commands(tmp_path: Path) -> None:
    url = f"sqlite://{tmp_path / 'metadata.db'}"
    async with cluster(url, tmp_path, 3):
        demo = await kv(url)
        out = demo.stdout.decode()
        assert demo.returncode == 0, out + demo.stderr.decode()
        assert "node A tried to write and was fenced (WriterFencedError)" in out
        assert "identical to node B" in out
        assert "the demo worked." in out
        # Snapshots were saved and the log truncated behind them.
        assert "0 snapshot(s)" not in out and "truncated at earliest" not in out

        for args in (("set", "a", "1"), ("set", "b", "2"), ("delete", "a")):
            done = await kv(url, *args)
            assert done.returncode == 0, done.stderr.decode()
        got = await kv(url, "get", "b")
        assert (got.returncode, got.stdout.decode().strip()) == (0, "2")
        missing = await kv(url, "get", "a")
        assert missing.returncode == 1 and b"not set" in missing.stderr
        dump = await kv(url, "dump")
        assert json.loads(dump.stdout) == {"b": "2"}


async def test_serve_refuses_bad_options(tmp_path: Path) -> None:
    """``serve`` with bad options: a clear message and a non-zero exit, no traceback."""
    env = {k: v for k, v in os.environ.items() if k != "WALKIT_METADATA"}
    url = f"sqlite://{tmp_path / 'metadata.db'}"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cases = [
            ((), 2, "give --metadata URL"),
            (("--metadata", url, "--http", "nonsense"), 2, "expected HOST:PORT"),
            (("--metadata", url, "--http", "127.0.0.1:99999"), 2, "expected HOST:PORT"),
            (("--metadata", url, "--lease-timeout", "0"), 2, "must be > 0"),
            (("--metadata", url, "--lease-timeout", "nan"), 2, "must be > 0"),
            (("--metadata", url, "--snapshot-ratio", "inf"), 2, "must be > 0"),
            (("--metadata", url, "--max-body", "big"), 2, "not a number"),
            (("--metadata", "bogus://x"), 1, "ConfigurationError: bad metadata URL"),
            (("--metadata", url, "--http", f"127.0.0.1:{port}"), 1, "Address already in use"),
        ]
        for args, code, message in cases:
            with trio.fail_after(60):
                done = await trio.run_process(
                    [sys.executable, str(EXAMPLE), "serve", *args],
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                    env=env,
                )
            err = done.stderr.decode()
            assert done.returncode == code, (args, err)
            assert message in err, (args, err)
            assert "Traceback" not in err, err
