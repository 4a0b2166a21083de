"""Durable consumers on a secured cluster: bookie processes that serve TLS only and ask for a
token, and a ZooKeeper whose nodes carry digest ACLs. A consumer's nodes get its log's ACL, so
nobody without the credentials reads or moves a position, and ``walkit log consumers`` works
with the same TLS and token options as the rest of the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

import walkit
from tests._cluster import process_cluster
from tests._zookeeper import ZooKeeperServer
from tests.log.test_cli_log import walkit as walkit_cli
from tests.security._secured import ZK_USER, pki, secured_cluster
from walkit.log import log_path

__all__ = ["pki"]  # (a fixture)

pytestmark = [pytest.mark.zookeeper, pytest.mark.processes]

NO_HANG = 60.0
TOKEN = "consumers-s3cret-token"


def acl_of(zk: KazooClient, path: str) -> list[tuple[str, str, int]]:
    acls, _ = zk.get_acls(path)
    return [(a.id.scheme, a.id.id, a.perms) for a in acls]


async def test_consumers_on_tls_tokens_and_zookeeper_acls(
    zookeeper_server: ZooKeeperServer,
    pki: dict[str, Path],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    cluster_setup = secured_cluster(
        zookeeper_server, pki, tmp_path, request, principal="app", token=TOKEN
    )
    url, token_file, args = cluster_setup.url, cluster_setup.token_file, cluster_setup.bookie_args
    root = cluster_setup.root
    tls = walkit.TLSConfig(ca=pki["ca"])
    auth = walkit.TokenAuth(token=TOKEN)
    with process_cluster(url, tmp_path, 3, extra_args=args), trio.fail_after(NO_HANG):
        async with walkit.Client.connect(url, tls=tls, auth=auth) as client:
            log = await walkit.Log.open(client, "payments", roll_entries=5, retain_records=0)
            async with log.consumer("ledger-sync", follow=False) as consumer:
                # Registered first: the writer runs retention as it rolls.
                async with log.writer() as w:
                    acked = [await w.append(b"p%d" % i) for i in range(12)]
                got = []
                async for record in consumer:
                    got.append(record)
                    if len(got) == 7:
                        break
                await consumer.commit(got[-1].position)
            # Retention keeps the ledgers the consumer has not committed past, and only those.
            await log.apply_retention()
            kept = [r.position async for r in log.reader(follow=False)]
            assert kept == [p for p in acked if p.ledger_seq >= acked[7].ledger_seq]
            assert kept[0] > acked[0]
            [info] = await log.consumers()
            assert info.name == "ledger-sync" and info.lag.records == 5

        # The CLI lists it with the same TLS and token options as every other command.
        cli = await walkit_cli(
            url, "log", "consumers", "payments", "--json",
            "--tls-ca", str(pki["ca"]), "--auth-token-file", str(token_file),
        )  # fmt: skip
        assert cli.returncode == 0, cli.stderr
        [listed] = json.loads(cli.stdout)
        assert listed["name"] == "ledger-sync" and listed["lag_records"] == 5

    # The consumer's nodes carry its log's ACL: the credentials' identity only.
    log_node = root + log_path("payments")
    nodes = [f"{log_node}/consumers", f"{log_node}/consumers/ledger-sync"]
    zk = KazooClient(hosts=zookeeper_server.hosts, auth_data=[("digest", ZK_USER)])
    zk.start(timeout=10)
    try:
        expected = acl_of(zk, log_node)
        assert [(scheme, ident.split(":")[0]) for scheme, ident, _ in expected] == [
            ("digest", "walkit")
        ]
        for node in nodes:
            assert acl_of(zk, node) == expected, node
    finally:
        zk.stop()
        zk.close()
    # Without the credentials nobody reads or moves a consumer's position.
    stranger = KazooClient(hosts=zookeeper_server.hosts)
    stranger.start(timeout=10)
    try:
        for node in nodes:
            with pytest.raises(NoAuthError):
                stranger.get(node)
            with pytest.raises(NoAuthError):
                stranger.set(node, b"{}")
    finally:
        stranger.stop()
        stranger.close()
