"""TLS between clients and bookies: real bookie processes, certificates made by trustme."""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio.abc
import attrs
import pytest
import trio
import trustme

import walkit
from tests._cluster import ProcessCluster, free_port, process_cluster
from walkit._core.types import BookieId
from walkit.errors import ConfigurationError, InvalidArgumentError, TLSError
from walkit.net import TcpNetwork, TLSConfig, TlsNetwork, principal_of
from walkit_bookie.cli import main as bookie_main

pytestmark = pytest.mark.processes

#: Long enough for a loaded machine; a hang would blow it, a clear failure is much faster.
NO_HANG = 30.0


@attrs.frozen
class Pki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    stranger_cert: Path  # a client certificate signed by other_ca
    stranger_key: Path

    def bookie_args(self, client_auth: str = "none") -> list[str]:
        args = ["--tls-cert", str(self.server_cert), "--tls-key", str(self.server_key)]
        if client_auth != "none":
            args += ["--tls-ca", str(self.ca), "--tls-client-auth", client_auth]
        return args

    def client(self, *, cert: bool = True, ca: Path | None = None) -> TLSConfig:
        return TLSConfig(
            cert=self.client_cert if cert else None,
            key=self.client_key if cert else None,
            ca=ca or self.ca,
        )


def _write(cert: trustme.LeafCert, directory: Path, name: str) -> tuple[Path, Path]:
    chain = directory / f"{name}.pem"
    key = directory / f"{name}.key"
    chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    cert.private_key_pem.write_to_path(str(key))
    return chain, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca, other = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    other.cert_pem.write_to_path(str(directory / "other-ca.pem"))
    server = _write(ca.issue_cert("127.0.0.1", "localhost"), directory, "bookie")
    client = _write(
        ca.issue_cert("client-1.walkit.test", common_name="client-1"), directory, "client"
    )
    stranger = _write(
        other.issue_cert("mallory.walkit.test", common_name="mallory"), directory, "stranger"
    )
    return Pki(directory / "ca.pem", *server, *client, directory / "other-ca.pem", *stranger)


@pytest.fixture(scope="module")
def tls_cluster(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    """Three bookies serving TLS only, requiring client certificates signed by the CA."""
    root = tmp_path_factory.mktemp("tls-cluster")
    url = f"sqlite:///{root / 'metadata.db'}"
    with process_cluster(url, root, 3, extra_args=pki.bookie_args("require")) as cluster:
        yield cluster


async def write_and_read(
    url: str, tls: TLSConfig | None, n: int = 50, quorums: tuple[int, int, int] = (3, 2, 2)
) -> None:
    payloads = [b"entry-%d" % i for i in range(n)]
    async with walkit.Client.connect(url, tls=tls) as client:
        lw = await client.create_ledger(*quorums, password=b"pw")
        ids = await lw.append_batch(payloads[: n // 2])
        for p in payloads[n // 2 :]:
            ids.append(await lw.append(p))
        assert ids == list(range(n))
        await lw.close()
    async with walkit.Client.connect(url, tls=tls) as reader:
        lr = await reader.open_ledger(lw.id, password=b"pw")
        entries = await lr.read(0, lr.last_add_confirmed)
        assert [e.payload for e in entries] == payloads


async def test_ledger_written_and_read_over_tls(tls_cluster: ProcessCluster, pki: Pki) -> None:
    with trio.fail_after(NO_HANG):
        await write_and_read(tls_cluster.metadata_url, pki.client())


async def create_ledger(url: str, tls: TLSConfig | None, ensemble: int = 3) -> None:
    async with walkit.Client.connect(url, tls=tls) as client:
        await client.create_ledger(ensemble, min(ensemble, 2), min(ensemble, 2))


async def test_client_without_certificate_is_refused(tls_cluster: ProcessCluster, pki: Pki) -> None:
    with trio.fail_after(NO_HANG), pytest.raises(TLSError) as caught:
        await create_ledger(tls_cluster.metadata_url, pki.client(cert=False))
    assert "certificate" in str(caught.value).lower()
    assert not caught.value.retryable


async def test_reads_and_recovery_without_certificate_fail_with_tls_error(
    tls_cluster: ProcessCluster, pki: Pki
) -> None:
    url = tls_cluster.metadata_url
    with trio.fail_after(NO_HANG):
        async with walkit.Client.connect(url, tls=pki.client()) as client:
            lw = await client.create_ledger(3, 2, 2)
            await lw.append(b"kept")
        for tls in (pki.client(cert=False), None):
            async with walkit.Client.connect(url, tls=tls) as client:
                with pytest.raises(TLSError):
                    lr = await client.open_ledger(lw.id)
                    await lr.read(0, 0)
                with pytest.raises(TLSError, match="cannot fence"):
                    await client.open_ledger(lw.id, recovery=True)
        async with walkit.Client.connect(url, tls=pki.client()) as client:
            lr = await client.open_ledger(lw.id, recovery=True)
            assert [e.payload for e in await lr.read(0, lr.last_add_confirmed)] == [b"kept"]


async def test_client_certificate_from_another_ca_is_refused(
    tls_cluster: ProcessCluster, pki: Pki
) -> None:
    tls = TLSConfig(cert=pki.stranger_cert, key=pki.stranger_key, ca=pki.ca)
    with trio.fail_after(NO_HANG), pytest.raises(TLSError):
        await create_ledger(tls_cluster.metadata_url, tls)


async def test_bookie_certificate_from_an_unknown_ca_is_refused(
    tls_cluster: ProcessCluster, pki: Pki
) -> None:
    with trio.fail_after(NO_HANG), pytest.raises(TLSError) as caught:
        await create_ledger(tls_cluster.metadata_url, pki.client(ca=pki.other_ca))
    assert "CERTIFICATE_VERIFY_FAILED" in str(caught.value)


async def test_plain_client_to_tls_bookie_fails_fast(tls_cluster: ProcessCluster, pki: Pki) -> None:
    with trio.fail_after(NO_HANG), pytest.raises(TLSError) as caught:
        await create_ledger(tls_cluster.metadata_url, None)
    assert "serves TLS only" in str(caught.value)
    # The bookies live on and still serve TLS clients.
    assert all(b.running for b in tls_cluster.bookies)
    with trio.fail_after(NO_HANG):
        await create_ledger(tls_cluster.metadata_url, pki.client())


async def test_tls_client_to_plain_bookie_fails_fast(pki: Pki, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 1) as cluster, trio.fail_after(NO_HANG):
        with pytest.raises(TLSError) as caught:
            await create_ledger(url, pki.client(), ensemble=1)
        assert "is the bookie serving TLS" in str(caught.value)
        assert all(b.running for b in cluster.bookies)
        await write_and_read(url, None, n=4, quorums=(1, 1, 1))  # plain clients still served


async def test_tls_network_reports_the_client_principal(pki: Pki) -> None:
    """Optional client auth: the principal is the certificate's subject, or None."""
    server = TlsNetwork(
        TcpNetwork(),
        server_context=TLSConfig(pki.server_cert, pki.server_key, pki.ca).server_context(
            "optional"
        ),
    )
    seen: list[str | None] = []

    async def handler(stream: anyio.abc.ByteStream) -> None:
        seen.append(principal_of(stream))
        await stream.send(b"hi")
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        address: BookieId = await nursery.start(
            functools.partial(server.serve, "127.0.0.1", 0, handler)
        )
        for tls in (pki.client(), pki.client(cert=False)):
            client = TlsNetwork(TcpNetwork(), client_context=tls.client_context())
            stream = await client.connect(address)
            assert await stream.receive(10) == b"hi"
            await stream.aclose()
        nursery.cancel_scope.cancel()
    assert seen[0] is not None and seen[0].startswith("CN=client-1")
    assert seen[1] is None


def test_tls_config_validation(pki: Pki, tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="both cert and key"):
        TLSConfig(cert=pki.client_cert)
    with pytest.raises(ConfigurationError, match="cannot load CA"):
        TLSConfig(ca=tmp_path / "missing.pem").client_context()
    with pytest.raises(ConfigurationError, match="cannot load certificate"):
        TLSConfig(cert=tmp_path / "missing.pem", key=pki.client_key).client_context()
    with pytest.raises(ConfigurationError, match="cannot load certificate"):
        TLSConfig(cert=pki.client_cert, key=pki.server_key).client_context()  # not its key
    with pytest.raises(ConfigurationError, match="needs a certificate"):
        TLSConfig(ca=pki.ca).server_context()
    with pytest.raises(ConfigurationError, match="needs a CA"):
        TLSConfig(pki.server_cert, pki.server_key).server_context("require")
    with pytest.raises(ConfigurationError, match="one of"):
        TLSConfig(pki.server_cert, pki.server_key).server_context("always")  # type: ignore[arg-type]


async def test_client_refuses_a_bad_tls_argument(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with pytest.raises(InvalidArgumentError, match="TLSConfig"):
        async with walkit.Client.connect(url, tls="yes"):  # type: ignore[arg-type]
            pass
    with pytest.raises(ConfigurationError, match="cannot load CA"):
        async with walkit.Client.connect(url, tls=TLSConfig(ca=tmp_path / "nope.pem")):
            pass


def run_bookie(*args: str, data_dir: Path) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-c", "import sys; from walkit_bookie.cli import main; sys.exit(main())"]
    cmd += ["--data-dir", str(data_dir), "--port", str(free_port()), *args]
    return subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, env=dict(os.environ, PYTHONUNBUFFERED="1")
    )


def test_bookie_process_exits_on_a_missing_certificate(pki: Pki, tmp_path: Path) -> None:
    missing = tmp_path / "missing.pem"
    result = run_bookie(
        "--tls-cert", str(missing), "--tls-key", str(pki.server_key), data_dir=tmp_path / "d"
    )
    assert result.returncode == 2, result
    assert "cannot load certificate" in result.stderr and str(missing) in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "d").exists()  # refused before touching anything


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tls-cert", "{cert}", "--tls-key", "{missing}"], "cannot load certificate"),
        (["--tls-cert", "{cert}", "--tls-key", "{ca}"], "cannot load certificate"),
        (["--tls-cert", "{cert}"], "both a certificate and its key"),
        (
            ["--tls-cert", "{cert}", "--tls-key", "{key}", "--tls-client-auth", "require"],
            "needs --tls-ca",
        ),
        (["--tls-ca", "{ca}"], "need TLS"),
        (
            [
                "--tls-cert",
                "{cert}",
                "--tls-key",
                "{key}",
                "--tls-ca",
                "{missing}",
                "--tls-client-auth",
                "optional",
            ],
            "cannot load CA",
        ),
        (
            ["--tls-cert", "{cert}", "--tls-key", "{key}", "--tls-client-auth", "maybe"],
            "invalid choice",
        ),
    ],
)
def test_bookie_cli_refuses_bad_tls_options(
    pki: Pki, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    paths = {
        "missing": str(tmp_path / "missing.pem"),
        "cert": str(pki.server_cert),
        "key": str(pki.server_key),
        "ca": str(pki.ca),
    }
    argv = ["--data-dir", str(tmp_path / "d"), *(a.format(**paths) for a in args)]
    with pytest.raises(SystemExit) as exited:
        bookie_main(argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
