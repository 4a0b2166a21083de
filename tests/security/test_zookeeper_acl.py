"""ZooKeeper digest ACLs on walkit's nodes: a real ZooKeeper, real bookie processes."""

from __future__ import annotations

import base64
import json
import logging
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import OPEN_ACL_UNSAFE

import walkit
from tests._cluster import process_cluster
from tests._zookeeper import ZooKeeperServer, unique_root
from tests.metadata._util import wait_for
from walkit.errors import ConfigurationError, MetadataAccessError
from walkit.metadata import WatchEventKind, ledger_path, open_metadata_store

pytestmark = pytest.mark.zookeeper

NO_HANG = 30.0


def credentials(tmp_path: Path, text: str, name: str = "zk-credentials", mode: int = 0o600) -> str:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def secured(server: ZooKeeperServer, root: str, path: str) -> str:
    return f"{server.url(root)}?credentials_file={path}"


def raw_client(server: ZooKeeperServer, auth: str | None = None) -> KazooClient:
    client = KazooClient(hosts=server.hosts, auth_data=None if auth is None else [("digest", auth)])
    client.start(timeout=10)
    return client


@pytest.fixture
def root(request: pytest.FixtureRequest) -> str:
    return unique_root(request.node.name)


async def test_store_with_credentials_works_and_acls_every_node(
    zookeeper_server: ZooKeeperServer, root: str, tmp_path: Path
) -> None:
    url = secured(zookeeper_server, root, credentials(tmp_path, "walkit:s3cret-pw\n"))
    with trio.fail_after(NO_HANG):
        async with (
            await open_metadata_store(url) as store,
            await open_metadata_store(url) as other,
        ):
            await store.create("/a/b", b"1")
            events = other.watch("/a/b")
            # One connection keeps its order: the watch is armed once this read is answered.
            assert (await other.get("/a/b")).value == b"1"
            assert await store.set("/a/b", b"2", 0) == 1
            assert await other.children("/a") == ["b"]
            assert await store.next_id() == 1
            assert await other.next_id() == 2
            await store.create("/member", b"", ephemeral=True)
            await wait_for(events, WatchEventKind.CHANGED)
            await store.delete("/a/b")
            # Every node, the root and its ancestors included, is ACL'd to walkit:s3cret-pw.
            zk = raw_client(zookeeper_server, "walkit:s3cret-pw")
            try:
                for node in (root, f"{root}/a", f"{root}/idgen/ledger", f"{root}/member"):
                    acls, _ = zk.get_acls(node)
                    assert [(a.id.scheme, a.id.id.split(":")[0], a.perms) for a in acls] == [
                        ("digest", "walkit", 31)
                    ], node
            finally:
                zk.stop()
                zk.close()


async def test_clients_without_or_with_wrong_credentials_are_refused(
    zookeeper_server: ZooKeeperServer, root: str, tmp_path: Path
) -> None:
    good = secured(zookeeper_server, root, credentials(tmp_path, "walkit:s3cret-pw"))
    wrong = secured(zookeeper_server, root, credentials(tmp_path, "walkit:guess", "wrong"))
    with trio.fail_after(NO_HANG):
        async with await open_metadata_store(good) as store:
            await store.create("/ledgers/L1", b"metadata")
        for url in (zookeeper_server.url(root), wrong):
            with pytest.raises(MetadataAccessError, match="refused access") as info:
                await open_metadata_store(url)
            assert not info.value.retryable
        # A walkit client says the same, and so does a raw ZooKeeper client for every call.
        with pytest.raises(MetadataAccessError):
            async with walkit.Client.connect(wrong):
                pass
    for auth in (None, "walkit:guess", "mallory:s3cret-pw"):
        zk = raw_client(zookeeper_server, auth)
        try:
            node = f"{root}/ledgers/L1"
            calls: list[tuple[Callable[..., object], tuple[object, ...]]] = [
                (zk.get, (node,)),
                (zk.get_children, (root,)),
                (zk.set, (node, b"forged")),
                (zk.delete, (node,)),
                (zk.create, (f"{root}/ledgers/L2", b"x")),
                (zk.set_acls, (node, OPEN_ACL_UNSAFE)),
            ]
            for call, args in calls:
                with pytest.raises(NoAuthError):
                    call(*args)
        finally:
            zk.stop()
            zk.close()
    async with await open_metadata_store(good) as store:
        assert (await store.get("/ledgers/L1")).value == b"metadata"
        assert await store.children("/ledgers") == ["L1"]


def test_bad_credentials_files_are_refused_clearly(
    zookeeper_server: ZooKeeperServer, root: str, tmp_path: Path
) -> None:
    cases = {
        credentials(tmp_path, "walkit:pw", "open", 0o644): "readable by others",
        credentials(tmp_path, "# only a comment\n\n", "empty"): "holds no user:password",
        credentials(tmp_path, "no-colon", "nocolon"): "one user:password",
        credentials(tmp_path, ":pw", "nouser"): "one user:password",
        credentials(tmp_path, "walkit:", "nopw"): "one user:password",
        credentials(tmp_path, "a:b\nc:d\n", "two"): "more than one line",
        str(tmp_path / "missing"): "cannot read",
    }
    for path, message in cases.items():
        with pytest.raises(ConfigurationError, match=message) as info:
            trio.run(open_metadata_store, secured(zookeeper_server, root, path))
        assert "pw" not in str(info.value).replace(path, "")  # never the password
    with pytest.raises(ConfigurationError, match="must be a file path"):
        trio.run(lambda: open_metadata_store(zookeeper_server.url(root), credentials_file=3))
    with pytest.raises(ConfigurationError, match="unknown option"):
        trio.run(open_metadata_store, f"sqlite:///{tmp_path}/m.db?credentials_file=/x")


async def test_nodes_created_before_credentials_stay_open(
    zookeeper_server: ZooKeeperServer, root: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Existing data keeps its open ACL; new nodes get the ACL; the store warns at open."""
    caplog.set_level(logging.WARNING, logger="walkit")
    async with await open_metadata_store(zookeeper_server.url(root)) as plain:
        await plain.create("/old", b"open")
    url = secured(zookeeper_server, root, credentials(tmp_path, "walkit:pw-1"))
    async with await open_metadata_store(url) as store:
        await store.create("/new", b"closed")
        await store.set("/old", b"still open", 0)
    assert any("zookeeper_root_open_acl" in r.getMessage() for r in caplog.records)
    async with await open_metadata_store(zookeeper_server.url(root)) as plain:
        assert (await plain.get("/old")).value == b"still open"
        with pytest.raises(MetadataAccessError):
            await plain.get("/new")


@pytest.mark.processes
async def test_bookie_processes_and_a_client_on_an_acl_zookeeper(
    zookeeper_server: ZooKeeperServer, root: str, tmp_path: Path
) -> None:
    url = secured(zookeeper_server, root, credentials(tmp_path, "walkit:cluster-pw"))
    with process_cluster(url, tmp_path, 3):
        with trio.fail_after(NO_HANG):
            async with walkit.Client.connect(url) as client:
                lw = await client.create_ledger(3, 2, 2, password=b"pw")
                for i in range(20):
                    await lw.append(b"entry-%d" % i)
                await lw.close()
                lr = await client.open_ledger(lw.id, password=b"pw")
                entries = await lr.read(0, lr.last_add_confirmed)
                assert [e.payload for e in entries] == [b"entry-%d" % i for i in range(20)]
        # The bookies' registrations are ACL'd too: nobody else sees the cluster.
        zk = raw_client(zookeeper_server)
        try:
            with pytest.raises(NoAuthError):
                zk.get_children(root)
            # Nor the ledger's metadata, which keeps its password for autorecovery.
            with pytest.raises(NoAuthError):
                zk.get(root + ledger_path(lw.id))
        finally:
            zk.stop()
            zk.close()
        zk = raw_client(zookeeper_server, "walkit:cluster-pw")
        try:
            stored = json.loads(zk.get(root + ledger_path(lw.id))[0])["password"]
            assert base64.b64decode(stored) == b"pw"
            acls, _ = zk.get_acls(root + ledger_path(lw.id))
            assert [(a.id.scheme, a.id.id.split(":")[0]) for a in acls] == [("digest", "walkit")]
        finally:
            zk.stop()
            zk.close()


@pytest.mark.processes
def test_commands_report_refused_credentials_clearly(
    zookeeper_server: ZooKeeperServer, root: str, tmp_path: Path
) -> None:
    good = secured(zookeeper_server, root, credentials(tmp_path, "walkit:cli-pw"))
    ok = _command(["-m", "walkit.cli", "bookies", "--metadata", good])
    assert ok.returncode == 0, ok.stderr  # creates the ACL'd root
    refused = "ZooKeeper refused access to metadata node " + root
    cli = _command(["-m", "walkit.cli", "bookies", "--metadata", zookeeper_server.url(root)])
    assert cli.returncode == 1
    assert cli.stderr.splitlines()[-1].startswith(f"walkit: error: MetadataAccessError: {refused}")
    data = ["-m", "walkit_bookie.cli", "--data-dir", str(tmp_path / "b"), "--metadata"]
    bookie = _command([*data, zookeeper_server.url(root)])
    assert bookie.returncode == 1
    assert bookie.stderr.splitlines()[-1].startswith(f"walkit-bookie: error: {refused}")
    missing = _command([*data, secured(zookeeper_server, root, str(tmp_path / "nofile"))])
    assert missing.returncode == 2
    assert "cannot read the ZooKeeper credentials file" in missing.stderr
    assert "Traceback" not in cli.stderr + bookie.stderr + missing.stderr


def _command(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=NO_HANG, check=False
    )
