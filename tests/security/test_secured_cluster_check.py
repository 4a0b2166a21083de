"""``walkit cluster check`` on a secured cluster: bookie processes that serve TLS only and ask
for a token, and ZooKeeper nodes behind digest ACLs. With the CLI's usual TLS and token options
every bookie passes; without the token each one fails with the bookie's refusal, and the exit
status says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._cluster import process_cluster
from tests._zookeeper import ZooKeeperServer
from tests.cli._run import walkit
from tests.security._secured import pki, secured_cluster

__all__ = ["pki"]  # (a fixture)

pytestmark = [pytest.mark.zookeeper, pytest.mark.processes]

TOKEN = "check-s3cret-token"


def test_cluster_check_with_tls_tokens_and_zookeeper_acls(
    zookeeper_server: ZooKeeperServer,
    pki: dict[str, Path],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    cluster_setup = secured_cluster(
        zookeeper_server, pki, tmp_path, request, principal="ops", token=TOKEN
    )
    url, token_file, args = cluster_setup.url, cluster_setup.token_file, cluster_setup.bookie_args
    with process_cluster(url, tmp_path, 3, extra_args=args) as cluster:
        secured = walkit(
            "cluster", "check", "--metadata", url, "--json",
            "--tls-ca", str(pki["ca"]), "--auth-token-file", str(token_file),
        )  # fmt: skip
        assert secured.returncode == 0, secured.stdout + secured.stderr
        report = json.loads(secured.stdout)
        assert report["ok"] is True and report["checked"] == 3, report
        assert {row["bookie"] for row in report["bookies"]} == {
            str(b.address) for b in cluster.bookies
        }

        no_token = walkit(
            "cluster", "check", "--metadata", url, "--json", "--tls-ca", str(pki["ca"]),
            "--timeout", "5",
        )  # fmt: skip
        assert no_token.returncode == 1, no_token.stdout + no_token.stderr
        assert "Traceback" not in no_token.stderr, no_token.stderr
        refused = json.loads(no_token.stdout)
        assert refused["ok"] is False and refused["failed"] == 3, refused
        for row in refused["bookies"]:
            assert row["ok"] is False and "requires authentication" in row["error"], row["error"]
            assert "--auth-token-file" in row["error"], row["error"]
