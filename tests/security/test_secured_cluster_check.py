"""``walkit cluster check`` on a secured cluster: bookie processes that serve TLS only and ask
for a token, and ZooKeeper nodes behind digest ACLs. With the CLI's usual TLS and token options
every bookie passes; without the token each one fails with the bookie's refusal, and the exit
status says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests._cluster import process_cluster
from tests._zookeeper import ZooKeeperServer, unique_root
from tests.cli._run import walkit
from tests.security.test_secured_consumers import ZK_USER, pki, private

__all__ = ["pki"]  # (the fixture of test_secured_consumers, used here too)

pytestmark = [pytest.mark.zookeeper, pytest.mark.processes]

TOKEN = "check-s3cret-token"


def test_cluster_check_with_tls_tokens_and_zookeeper_acls(
    zookeeper_server: ZooKeeperServer,
    pki: dict[str, Path],
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    root = unique_root(request.node.name)
    zk_credentials = private(tmp_path / "zk-credentials", ZK_USER + "\n")
    url = f"{zookeeper_server.url(root)}?credentials_file={zk_credentials}"
    token_file = private(tmp_path / "client-token", TOKEN + "\n")
    args = ["--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"]),
            "--auth", "token",
            "--auth-token-file", str(private(tmp_path / "tokens", f"ops:{TOKEN}\n"))]  # fmt: skip
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
