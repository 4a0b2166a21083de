"""ZooKeeper over TLS: a real ZooKeeper serving only a secureClientPort (Netty, PEM key
stores, client certificates required), certificates made by trustme."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import walkit
from tests._cluster import process_cluster
from tests._zookeeper import (
    ServerTls,
    ZkPki,
    ZooKeeperServer,
    make_pki,
    missing_zookeeper,
    running_zookeeper,
    unique_root,
)
from tests.bookie._helpers import config, running_bookie
from tests.metadata._util import wait_for
from walkit.errors import ConfigurationError, MetadataAccessError, MetadataStoreError
from walkit.metadata import WatchEventKind, list_bookies, open_metadata_store

pytestmark = pytest.mark.zookeeper

#: Far above a handshake, far below waiting out a 60 s connect timeout: a guard against hangs.
NO_HANG = 30.0
SLOW_CONNECT = {"connect_timeout": 60.0}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> ZkPki:
    return make_pki(tmp_path_factory.mktemp("zk-pki"))


@pytest.fixture(scope="module")
def tls_zookeeper(
    pki: ZkPki, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ZooKeeperServer]:
    problem = missing_zookeeper(netty=True)
    if problem:
        pytest.fail(problem, pytrace=False)
    with running_zookeeper(tmp_path_factory.mktemp("zk-tls"), ServerTls(pki)) as server:
        yield server


@pytest.fixture
def root(request: pytest.FixtureRequest) -> str:
    return unique_root(request.node.name)


async def test_store_over_tls_with_acls(
    tls_zookeeper: ZooKeeperServer, root: str, tmp_path: Path
) -> None:
    creds = tmp_path / "zk-credentials"
    creds.write_text("walkit:tls-and-acl\n")
    creds.chmod(0o600)
    url = f"{tls_zookeeper.url(root)}&credentials_file={creds}"
    with trio.fail_after(NO_HANG):
        async with (
            await open_metadata_store(url) as store,
            await open_metadata_store(url) as other,
        ):
            await store.create("/n", b"1")
            events = other.watch("/n")
            # One connection keeps its order: the watch is armed once this read is answered.
            assert (await other.get("/n")).value == b"1"
            await store.set("/n", b"2", 0)
            await wait_for(events, WatchEventKind.CHANGED)
            assert await store.next_id() == 1


@pytest.mark.processes
async def test_bookie_and_client_over_tls(
    tls_zookeeper: ZooKeeperServer, root: str, tmp_path: Path
) -> None:
    url = tls_zookeeper.url(root)
    with process_cluster(url, tmp_path, 1), trio.fail_after(NO_HANG):
        async with walkit.Client.connect(url) as client:
            lw = await client.create_ledger(1, 1, 1, password=b"pw")
            await lw.append_batch([b"a", b"b", b"c"])
            await lw.close()
            lr = await client.open_ledger(lw.id, password=b"pw")
            assert [e.payload for e in await lr.read(0, 2)] == [b"a", b"b", b"c"]


@pytest.mark.parametrize("case", ["untrusted server", "no client certificate"])
async def test_tls_failures_are_clear_and_quick(
    tls_zookeeper: ZooKeeperServer, pki: ZkPki, root: str, case: str
) -> None:
    base = f"zk://{tls_zookeeper.hosts}{root}"
    if case == "untrusted server":
        query = f"tls_ca={pki.other_ca}&tls_cert={pki.client_cert}&tls_key={pki.client_key}"
    else:
        query = f"tls_ca={pki.ca}"
    with trio.fail_after(NO_HANG), pytest.raises(MetadataAccessError, match="TLS with ZooKeeper"):
        await open_metadata_store(f"{base}?{query}", **SLOW_CONNECT)


async def test_tls_client_to_a_plain_zookeeper_fails_quickly(
    zookeeper_server: ZooKeeperServer, pki: ZkPki, root: str
) -> None:
    url = f"{zookeeper_server.url(root)}?tls_ca={pki.ca}"
    with trio.fail_after(NO_HANG), pytest.raises(MetadataAccessError, match="TLS with ZooKeeper"):
        await open_metadata_store(url, **SLOW_CONNECT)


async def test_plain_client_to_a_tls_zookeeper_names_tls(
    tls_zookeeper: ZooKeeperServer, root: str
) -> None:
    url = f"zk://{tls_zookeeper.hosts}{root}"
    with trio.fail_after(NO_HANG), pytest.raises(MetadataStoreError, match="give tls_ca"):
        await open_metadata_store(url, connect_timeout=2.0)


def test_bad_tls_options_are_configuration_errors(
    zookeeper_server: ZooKeeperServer, pki: ZkPki, root: str, tmp_path: Path
) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    base = zookeeper_server.url(root)
    cases = {
        f"tls_cert={pki.client_cert}&tls_key={pki.client_key}": "needs tls_ca",
        f"tls_ca={pki.ca}&tls_cert={pki.client_cert}": "both tls_cert and tls_key",
        f"tls_ca={tmp_path / 'missing.pem'}": "cannot load the ZooKeeper TLS CA",
        f"tls_ca={junk}": "cannot load the ZooKeeper TLS CA",
        f"tls_ca={pki.ca}&tls_cert={junk}&tls_key={pki.client_key}": "cannot load the ZooKeeper",
    }
    for query, message in cases.items():
        with pytest.raises(ConfigurationError, match=message):
            trio.run(open_metadata_store, f"{base}?{query}")


async def test_bookie_registers_again_over_tls_with_acls_after_session_expiry(
    tls_zookeeper: ZooKeeperServer, root: str, tmp_path: Path
) -> None:
    """The new session (the URL's options: TLS, credentials) registers the bookie again."""
    creds = tmp_path / "zk-credentials"
    creds.write_text("walkit:expiry-pw\n")
    creds.chmod(0o600)
    url = f"{tls_zookeeper.url(root)}&credentials_file={creds}"
    async with (
        await open_metadata_store(url) as store,
        await open_metadata_store(url) as observer,
        running_bookie(config([tmp_path / "d"]), metadata=store) as (bookie, bid),
    ):
        registration = bookie.registration
        assert registration is not None
        await store.expire_session()  # over TLS, with the credentials, as the store's own
        with trio.fail_after(NO_HANG):
            while registration.sessions < 2 or bid not in (await list_bookies(observer)).writable:  # noqa: ASYNC110 (polls the store)
                await trio.sleep(0.05)
        assert registration.store is not store
        assert registration.store.url == url


async def test_one_host_failing_tls_does_not_stop_the_others(
    tls_zookeeper: ZooKeeperServer, zookeeper_server: ZooKeeperServer, root: str
) -> None:
    """kazoo tries the hosts in turn: a handshake that fails on one (here a plain port) moves
    on to the next, and the open gives up only when every host failed."""
    assert tls_zookeeper.tls is not None
    hosts = f"{zookeeper_server.hosts},{tls_zookeeper.hosts}"
    url = f"zk://{hosts}{root}?{tls_zookeeper.tls.url_query()}"
    for _ in range(3):  # kazoo shuffles the hosts: either may come first
        with trio.fail_after(NO_HANG):
            async with await open_metadata_store(url, **SLOW_CONNECT) as store:
                await store.create("/n", b"", ephemeral=True)
