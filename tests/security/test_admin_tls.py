"""The bookie's admin endpoint over HTTPS: in-process bookies, certificates made by trustme."""

from __future__ import annotations

import contextlib
import json
import ssl
from pathlib import Path

import pytest
import trio
import trustme
from cryptography import x509

from tests.bookie._helpers import config, http_raw, http_request, running_bookie
from walkit_bookie.cli import build_parser, config_from_args

TOKEN = "a-long-enough-admin-token-for-tests"
HEALTH = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
METRICS = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
NO_HANG = 20.0


def post(token: str | None = None) -> bytes:
    auth = f"Authorization: Bearer {token}\r\n" if token is not None else ""
    return f"POST /admin/gc HTTP/1.1\r\nHost: x\r\n{auth}Content-Length: 0\r\n\r\n".encode()


class Pki:
    def __init__(self, directory: Path) -> None:
        self.ca_obj = trustme.CA()
        self.ca = directory / "ca.pem"
        self.ca_obj.cert_pem.write_to_path(str(self.ca))
        self.cert, self.key = self._leaf(directory, "bookie", "127.0.0.1", None)
        self.admin = self._leaf(directory, "admin", "admin.walkit.test", "admin")
        self.other = self._leaf(directory, "other", "other.walkit.test", "other")

    def _leaf(self, directory: Path, name: str, host: str, cn: str | None) -> tuple[Path, Path]:
        leaf = self.ca_obj.issue_cert(host, common_name=cn)
        cert, key = directory / f"{name}.pem", directory / f"{name}.key"
        cert.write_bytes(b"".join(blob.bytes() for blob in leaf.cert_chain_pems))
        leaf.private_key_pem.write_to_path(str(key))
        return cert, key

    @staticmethod
    def principal(cert: tuple[Path, Path]) -> str:
        """What the bookie makes of the certificate's subject (``CN=...,OU=...,O=...``)."""
        subject = x509.load_pem_x509_certificate(cert[0].read_bytes()).subject
        return subject.rfc4514_string()

    def client(self, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        if cert is not None:
            context.load_cert_chain(*cert)
        return context

    def bookie(self, **kw: object) -> dict[str, object]:
        return {"tls_cert": self.cert, "tls_key": self.key, "http_port": 0, **kw}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("admin-pki"))


async def https(address: tuple[str, int], raw: bytes, context: ssl.SSLContext) -> tuple[int, bytes]:
    stream = await trio.open_ssl_over_tcp_stream(
        *address, ssl_context=context, https_compatible=True
    )
    async with stream:
        data = b""
        with trio.fail_after(NO_HANG):
            await stream.send_all(raw)
            while chunk := await stream.receive_some(65536):  # a refused handshake raises
                data += chunk
    if not data:  # TLS 1.3: the bookie refuses the client's certificate after the handshake
        raise trio.BrokenResourceError("closed without an answer")
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def test_admin_endpoint_serves_https(pki: Pki, tmp_path: Path) -> None:
    cfg = config([tmp_path / "d"], **pki.bookie(admin_token=TOKEN))
    async with running_bookie(cfg) as (bookie, _):
        address = bookie.admin_address
        assert address is not None
        status, body = await https(address, HEALTH, pki.client())
        assert status == 200 and json.loads(body)["status"] == "ok"
        status, body = await https(address, METRICS, pki.client())
        assert status == 200 and b"walkit_bookie" in body
        assert (await https(address, post(), pki.client()))[0] == 401
        status, body = await https(address, post(TOKEN), pki.client())
        assert status == 200 and "entry_logs" in json.loads(body)
        assert bookie.gc.rounds == 1


async def test_plain_http_and_junk_on_the_https_port_fail_cleanly(pki: Pki, tmp_path: Path) -> None:
    cfg = config([tmp_path / "d"], **pki.bookie(admin_token=TOKEN))
    async with running_bookie(cfg) as (bookie, _):
        address = bookie.admin_address
        assert address is not None
        # Plain HTTP gets no HTTP answer, only a closed connection (and nothing is run).
        for raw in (post(TOKEN), HEALTH):
            with trio.fail_after(NO_HANG):
                try:
                    answer = await http_raw(address, raw)
                except trio.BrokenResourceError:  # a reset is clean too
                    answer = b""
            assert not answer.startswith(b"HTTP/")
        # Junk, a truncated ClientHello, a client that does not trust the bookie.
        junk = [b"\x00" * 100, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\xff" * 40]
        for raw in junk:
            with trio.fail_after(NO_HANG), contextlib.suppress(trio.BrokenResourceError):
                await http_raw(address, raw)
        trustme.CA().cert_pem.write_to_path(str(tmp_path / "stranger-ca.pem"))
        untrusting = ssl.create_default_context(cafile=str(tmp_path / "stranger-ca.pem"))
        with trio.fail_after(NO_HANG), pytest.raises(trio.BrokenResourceError):
            await https(address, HEALTH, untrusting)
        # The bookie lives on.
        assert bookie.gc.rounds == 0
        assert (await https(address, HEALTH, pki.client()))[0] == 200


async def test_client_certificates_authorize_admin_posts(pki: Pki, tmp_path: Path) -> None:
    cfg = config(
        [tmp_path / "d"],
        **pki.bookie(
            tls_ca=pki.ca,
            tls_client_auth="require",
            auth="tls",
            authorize=[f"admin={pki.principal(pki.admin)}"],
            admin_token=TOKEN,
        ),
    )
    async with running_bookie(cfg) as (bookie, _):
        address = bookie.admin_address
        assert address is not None
        # Every admin connection needs a certificate the CA signed, GETs included.
        with trio.fail_after(NO_HANG), pytest.raises(trio.BrokenResourceError):
            await https(address, HEALTH, pki.client())
        assert (await https(address, HEALTH, pki.client(pki.other)))[0] == 200
        # POSTs: the certificate of a principal --authorize admin= lists, or the token.
        status, body = await https(address, post(), pki.client(pki.admin))
        assert status == 200, body
        status, body = await https(address, post(), pki.client(pki.other))
        assert status == 403 and f"'{pki.principal(pki.other)}' may not admin".encode() in body
        assert (await https(address, post(TOKEN), pki.client(pki.other)))[0] == 200
        assert bookie.gc.rounds == 2


async def test_admin_plain_http_keeps_http(pki: Pki, tmp_path: Path) -> None:
    argv = ["--data-dir", str(tmp_path / "d"), "--tls-cert", str(pki.cert), "--tls-key",
            str(pki.key), "--admin-port", "0"]  # fmt: skip
    default = config_from_args(build_parser().parse_args(argv))
    assert default.admin_tls and default.admin_server_context() is not None
    cfg = config_from_args(build_parser().parse_args([*argv, "--admin-plain-http"]))
    assert not cfg.admin_tls and cfg.admin_server_context() is None
    async with running_bookie(cfg) as (bookie, _):
        assert bookie.admin_address is not None
        assert (await http_request(bookie.admin_address, HEALTH))[0] == 200
