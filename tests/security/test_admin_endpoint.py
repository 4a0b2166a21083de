"""The bookie's admin endpoint and address options, probed as an attacker would."""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
from prometheus_client import CollectorRegistry

from tests.bookie._helpers import (
    BookieProcess,
    SlowCollector,
    admin_slots_held,
    config,
    http_raw,
    http_request,
    running_bookie,
)
from walkit.errors import ConfigurationError
from walkit_bookie import BookieConfig

TOKEN = "a-long-enough-admin-token-for-tests"


def _post(token: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token is not None else ""
    return f"POST /admin/gc HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 0\r\n\r\n".encode()


async def test_admin_posts_need_the_token(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "a"], http_port=0)) as (bookie, _):
        assert bookie.admin_address is not None
        status, body = await http_request(bookie.admin_address, _post())
        assert status == 403 and b"--admin-token" in body  # no token configured: no POSTs
        status, _ = await http_request(bookie.admin_address, _post(TOKEN))
        assert status == 403
    cfg = config([tmp_path / "b"], http_port=0, admin_token=TOKEN)
    async with running_bookie(cfg) as (bookie, _):
        assert bookie.admin_address is not None
        head = await http_raw(bookie.admin_address, _post())
        assert head.startswith(b"HTTP/1.1 401 ") and b"WWW-Authenticate: Bearer" in head
        status, _ = await http_request(bookie.admin_address, _post(TOKEN + "x"))
        assert status == 401
        assert bookie.gc.rounds == 0
        status, body = await http_request(bookie.admin_address, _post(TOKEN))
        assert status == 200 and "entry_logs" in json.loads(body)
        # Reading stays open (metrics scrapers and health checks carry no token).
        status, _ = await http_request(
            bookie.admin_address, b"GET /admin/gc HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        assert status == 200
    assert "a-long-enough" not in repr(cfg)  # never printed


HEALTH = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"


def _slow_reader(address: tuple[str, int]) -> bytes:
    """A client that sends its request at once and reads the answer a little later (as a
    loaded client does). A server that closes with the request unread resets the connection,
    and the reset destroys the answer waiting in the client's socket: ECONNRESET."""
    with socket.create_connection(address, timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        select.select([sock], [], [], 10)  # the answer is there...
        time.sleep(0.1)  # ...and the client is slow to read it
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
        return data


async def test_over_limit_admin_connections_get_503_not_a_reset(tmp_path: Path) -> None:
    """32 answers being made at once (scrapes through a slow collector) hold every slot: a
    newcomer gets 503 with a reason, which it reads (not a reset); then all goes on."""
    registry = CollectorRegistry()
    registry.register(slow := SlowCollector())
    cfg = config([tmp_path / "d"], http_port=0)
    async with running_bookie(cfg, registry=registry) as (bookie, _):
        address = bookie.admin_address
        assert address is not None
        async with admin_slots_held(address, slow) as statuses:  # every slot answering
            for _ in range(5):
                answer = await trio.to_thread.run_sync(_slow_reader, address)
                head, _, body = answer.partition(b"\r\n\r\n")
                assert head.startswith(b"HTTP/1.1 503 ") and b"\r\nRetry-After: 1" in head
                assert body == b"too many admin connections\n"
                assert f"Content-Length: {len(body)}".encode() in head
        assert statuses == [200] * 32
        assert (await http_request(address, HEALTH))[0] == 200


async def test_admin_endpoint_is_on_loopback_whatever_the_host(tmp_path: Path) -> None:
    cfg = config([tmp_path / "d"], host="127.0.0.2", http_port=0)
    async with running_bookie(cfg) as (bookie, bid):
        assert bid.host == "127.0.0.2"
        assert bookie.admin_address is not None and bookie.admin_address[0] == "127.0.0.1"
    cfg = config([tmp_path / "e"], host="127.0.0.2", http_port=0, http_host="127.0.0.3")
    async with running_bookie(cfg) as (bookie, _):
        assert bookie.admin_address is not None and bookie.admin_address[0] == "127.0.0.3"


async def test_the_advertised_address_is_what_is_registered(tmp_path: Path) -> None:
    cfg = config([tmp_path / "d"], advertised_address="localhost")
    async with running_bookie(cfg) as (_, bid):
        assert bid.host == "localhost"


@pytest.mark.parametrize(
    "options",
    [
        {"host": "0.0.0.0"},
        {"host": "::"},
        {"advertised_address": "0.0.0.0"},
        {"advertised_address": "a host"},
        {"advertised_address": ""},
        {"admin_token": "short"},
        {"admin_token": " padded-token-with-spaces "},
        {"admin_token": "x" * 20 + "\n"},
    ],
)
def test_bad_address_and_token_options_are_configuration_errors(
    tmp_path: Path, options: dict[str, str]
) -> None:
    with pytest.raises(ConfigurationError):
        BookieConfig(data_dirs=[str(tmp_path)], **options)  # type: ignore[arg-type]


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "walkit_bookie.cli", "--data-dir", str(tmp_path / "d"), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_wildcard_host_needs_an_advertised_address(tmp_path: Path) -> None:
    done = _cli(tmp_path, "--host", "0.0.0.0")
    assert done.returncode == 2 and "--advertised-address" in done.stderr


def test_cli_token_file_must_be_private_and_not_empty(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    os.chmod(token_file, 0o644)
    done = _cli(tmp_path, "--admin-token-file", str(token_file))
    assert done.returncode == 2 and "chmod 600" in done.stderr
    empty = tmp_path / "empty"
    empty.write_text("\n")
    os.chmod(empty, 0o600)
    done = _cli(tmp_path, "--admin-token-file", str(empty))
    assert done.returncode == 2 and "empty" in done.stderr
    done = _cli(tmp_path, "--admin-token-file", str(tmp_path / "missing"))
    assert done.returncode == 2 and "cannot read" in done.stderr


@pytest.mark.processes
async def test_cli_token_file_protects_admin_posts(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    os.chmod(token_file, 0o600)
    proc = BookieProcess(
        [tmp_path / "d"], "--admin-port", "0", "--admin-token-file", str(token_file)
    )
    await proc.start()
    try:
        assert proc.proc is not None and proc.proc.stdout is not None
        line = await trio.to_thread.run_sync(proc.proc.stdout.readline)
        host, port = line.rsplit("//", 1)[1].split("/")[0].rsplit(":", 1)
        assert host == "127.0.0.1"
        assert (await http_request((host, int(port)), _post()))[0] == 401
        assert (await http_request((host, int(port)), _post(TOKEN)))[0] == 200
        assert TOKEN not in proc.stderr()
    finally:
        proc.terminate()
