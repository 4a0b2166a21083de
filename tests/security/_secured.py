"""A secured cluster for the tests that use every guard at once: bookie processes that serve
TLS only (certificates from a throwaway CA) and ask for a token, and ZooKeeper nodes behind
digest ACLs. ``pki`` is a fixture; :func:`secured_cluster` gives the URL and bookie options."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trustme

from tests._zookeeper import ZooKeeperServer, unique_root

__all__ = ["ZK_USER", "Secured", "pki", "private", "secured_cluster"]

ZK_USER = "walkit:zk-s3cret"


def private(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.fixture
def pki(tmp_path: Path) -> Iterator[dict[str, Path]]:
    ca = trustme.CA()
    files = {"ca": tmp_path / "ca.pem"}
    ca.cert_pem.write_to_path(str(files["ca"]))
    cert = ca.issue_cert("127.0.0.1", "localhost")
    files["cert"], files["key"] = tmp_path / "bookie.pem", tmp_path / "bookie.key"
    files["cert"].write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(files["key"]))
    yield files


@attrs.frozen
class Secured:
    #: The test's ZooKeeper root (its nodes are under it).
    root: str
    #: The metadata URL, with the ZooKeeper credentials file.
    url: str
    #: A file (mode 0600) holding the client's token.
    token_file: Path
    #: The bookies' options: TLS only, tokens required.
    bookie_args: list[str]


def secured_cluster(
    zookeeper_server: ZooKeeperServer,
    pki: dict[str, Path],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    *,
    principal: str,
    token: str,
) -> Secured:
    """The URL and options of a secured cluster under a ZooKeeper root of this test's own;
    the bookies know ``token`` as ``principal``."""
    root = unique_root(request.node.name)
    zk_credentials = private(tmp_path / "zk-credentials", ZK_USER + "\n")
    tokens = private(tmp_path / "tokens", f"{principal}:{token}\n")
    return Secured(
        root=root,
        url=f"{zookeeper_server.url(root)}?credentials_file={zk_credentials}",
        token_file=private(tmp_path / "client-token", token + "\n"),
        bookie_args=[
            *("--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"])),
            *("--auth", "token", "--auth-token-file", str(tokens)),
        ],
    )
