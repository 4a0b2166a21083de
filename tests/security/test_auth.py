"""Authentication plug-ins: shared tokens and TLS client certificates, against real bookie
processes (certificates made by trustme); the pure parts (wire, token files) below them."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import trio
import trustme

import walkit
from tests._cluster import ProcessCluster, process_cluster
from tests._event_loops import EVENT_LOOPS, run_on
from tests.cli._run import walkit as walkit_cli
from walkit._core.auth import TlsAuthenticator, TokenAuthenticator, parse_token_file
from walkit._core.wire import (
    AuthRequest,
    AuthResponse,
    StatusCode,
    decode_message,
    encode_frame,
)
from walkit.errors import AuthenticationError, ConfigurationError
from walkit_bookie._config import BookieConfig

pytestmark = pytest.mark.processes

#: Long enough for a loaded machine; a hang would blow it, a clear failure is much faster.
NO_HANG = 30.0
WRITER_TOKEN = "s3cret-writer-token"
READER_TOKEN = "another:token:with:colons"
AUTORECOVERY_TOKEN = "autorecovery-worker-token"


# --- pure parts ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "message",
    [
        AuthRequest(0, "token", b"abc\x00\xff"),
        AuthRequest(7, "", b""),
        AuthResponse(0, StatusCode.OK, "writer"),
        AuthResponse(3, StatusCode.AUTH_REQUIRED, "the bookie does not know this token"),
    ],
)
def test_auth_messages_round_trip(message: AuthRequest | AuthResponse) -> None:
    assert decode_message(encode_frame(message)[4:]) == message


def test_auth_request_with_a_bad_method_length_is_refused() -> None:
    body = bytearray(encode_frame(AuthRequest(1, "token", b""))[4:])
    body[10] = 200  # the method length: beyond the frame
    with pytest.raises(walkit.errors.RemoteProtocolError):
        decode_message(bytes(body))


def test_token_file_parsing() -> None:
    text = f"# comment\n\nwriter:{WRITER_TOKEN}\n reader : {READER_TOKEN} \n"
    assert parse_token_file(text) == {WRITER_TOKEN: "writer", READER_TOKEN: "reader"}
    for bad, why in [
        ("", "no PRINCIPAL:TOKEN"),
        ("justatoken\n", "line 1: expected PRINCIPAL:TOKEN"),
        ("a:x\n:y\n", "line 2: expected"),
        ("a:\n", "line 1: expected"),
        ("a:x\nb:x\n", "line 2: this token is already given"),
    ]:
        with pytest.raises(ConfigurationError, match=why):
            parse_token_file(bad)


def test_token_authenticator() -> None:
    auth = TokenAuthenticator({WRITER_TOKEN: "writer", READER_TOKEN: "reader"})
    assert auth.on_connect("CN=x") is None
    assert auth.authenticate("token", WRITER_TOKEN.encode(), None) == "writer"
    assert auth.authenticate("token", READER_TOKEN.encode(), None) == "reader"
    for method, credentials in [("token", b"wrong"), ("token", b""), ("kerberos", b"x")]:
        with pytest.raises(AuthenticationError):
            auth.authenticate(method, credentials, None)
    tls = TlsAuthenticator()
    assert tls.on_connect("CN=a") == "CN=a"
    assert tls.on_connect(None) is None
    with pytest.raises(AuthenticationError, match="certificate"):
        tls.authenticate("token", b"x", None)


def test_token_auth_hides_and_checks_its_token() -> None:
    assert WRITER_TOKEN not in repr(walkit.TokenAuth(token=WRITER_TOKEN))
    for bad in ["", " padded ", "line\nbreak"]:
        with pytest.raises(ConfigurationError):
            walkit.TokenAuth(token=bad)


def _token_file(directory: Path, text: str, mode: int = 0o600) -> Path:
    path = directory / "tokens"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_bookie_auth_options_are_checked(tmp_path: Path) -> None:
    def config(**kwargs: object) -> BookieConfig:
        return BookieConfig(data_dirs=[str(tmp_path / "d")], **kwargs)  # type: ignore[arg-type]

    with pytest.raises(ConfigurationError, match="needs --auth-token-file"):
        config(auth="token")
    with pytest.raises(ConfigurationError, match="only used with --auth token"):
        config(auth_token_file=str(tmp_path / "t"))
    with pytest.raises(ConfigurationError, match="--tls-client-auth require"):
        config(auth="tls")
    with pytest.raises(ConfigurationError, match="auth must be one of"):
        config(auth="sasl")
    missing = config(auth="token", auth_token_file=str(tmp_path / "nope"))
    with pytest.raises(ConfigurationError, match="cannot read"):
        missing.authenticator()
    path = _token_file(tmp_path, f"writer:{WRITER_TOKEN}\n", 0o644)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        config(auth="token", auth_token_file=str(path)).authenticator()
    path.chmod(0o600)
    assert config(auth="token", auth_token_file=str(path)).authenticator() is not None
    assert config().authenticator() is None


def test_bookie_command_refuses_an_unsafe_token_file(tmp_path: Path) -> None:
    import subprocess
    import sys

    path = _token_file(tmp_path, f"writer:{WRITER_TOKEN}\n", 0o640)
    result = subprocess.run(
        [sys.executable, "-m", "walkit_bookie.cli", "--data-dir", str(tmp_path / "d"),
         "--auth", "token", "--auth-token-file", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert "chmod 600" in result.stderr
    path.chmod(0o600)
    worker = tmp_path / "worker-token"
    worker.write_text("a-token\n")
    worker.chmod(0o644)
    result = subprocess.run(
        [sys.executable, "-m", "walkit_bookie.cli", "--data-dir", str(tmp_path / "d"),
         "--auth", "token", "--auth-token-file", str(path),
         "--autorecovery-token-file", str(worker)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    assert f"{worker} is readable by others" in result.stderr


# --- token authentication, real bookies ----------------------------------------------------


@pytest.fixture(scope="module")
def token_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("token-cluster")
    tokens = _token_file(
        root,
        f"# principals\nwriter:{WRITER_TOKEN}\nreader:{READER_TOKEN}\n"
        f"autorecovery:{AUTORECOVERY_TOKEN}\n",
    )
    worker = root / "autorecovery-token"
    worker.write_text(AUTORECOVERY_TOKEN + "\n")
    worker.chmod(0o600)
    url = f"sqlite:///{root / 'metadata.db'}"
    args = ["--auth", "token", "--auth-token-file", str(tokens),
            "--autorecovery-token-file", str(worker)]  # fmt: skip
    with process_cluster(url, root, 3, extra_args=args) as cluster:
        yield cluster


async def write_and_read(url: str, auth: walkit.AuthProvider | None, n: int = 20) -> None:
    payloads = [b"entry-%d" % i for i in range(n)]
    async with walkit.Client.connect(url, auth=auth) as client:
        lw = await client.create_ledger(3, 2, 2, password=b"pw")
        assert await lw.append_batch(payloads) == list(range(n))
        await lw.close()
    async with walkit.Client.connect(url, auth=walkit.TokenAuth(token=READER_TOKEN)) as reader:
        lr = await reader.open_ledger(lw.id, password=b"pw")
        entries = await lr.read(0, lr.last_add_confirmed)
        assert [e.payload for e in entries] == payloads


async def create_ledger(url: str, auth: walkit.AuthProvider | None) -> None:
    async with walkit.Client.connect(url, auth=auth) as client:
        await client.create_ledger(3, 2, 2)


async def test_token_accepted(token_cluster: ProcessCluster) -> None:
    with trio.fail_after(NO_HANG):
        await write_and_read(token_cluster.metadata_url, walkit.TokenAuth(token=WRITER_TOKEN))


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_token_accepted_on_each_event_loop(token_cluster: ProcessCluster, loop: str) -> None:
    # (the client reads the authentication answer through its stream, then reads the socket
    # itself: on asyncio both watch it, one after the other)
    async def scenario() -> None:
        with anyio.fail_after(NO_HANG):
            auth = walkit.TokenAuth(token=WRITER_TOKEN)
            await write_and_read(token_cluster.metadata_url, auth, n=500)

    run_on(loop, scenario)


@pytest.mark.parametrize("token", ["wrong-token", WRITER_TOKEN + "x", WRITER_TOKEN[:-1]])
async def test_wrong_token_is_refused_fast(token_cluster: ProcessCluster, token: str) -> None:
    with trio.fail_after(NO_HANG), pytest.raises(AuthenticationError) as caught:
        await create_ledger(token_cluster.metadata_url, walkit.TokenAuth(token=token))
    assert "refused the 'token' credentials" in str(caught.value)
    assert "does not know this token" in str(caught.value)
    assert not caught.value.retryable
    assert all(b.running for b in token_cluster.bookies)
    with trio.fail_after(NO_HANG):
        await write_and_read(token_cluster.metadata_url, walkit.TokenAuth(token=WRITER_TOKEN))


async def test_client_without_auth_is_refused(token_cluster: ProcessCluster) -> None:
    url = token_cluster.metadata_url
    with trio.fail_after(NO_HANG), pytest.raises(AuthenticationError) as caught:
        await create_ledger(url, None)
    assert "requires authentication" in str(caught.value)
    # Reads of a ledger written by an authenticated writer fail the same way.
    with trio.fail_after(NO_HANG):
        async with walkit.Client.connect(url, auth=walkit.TokenAuth(token=WRITER_TOKEN)) as c:
            lw = await c.create_ledger(3, 2, 2)
            await lw.append(b"kept")
        async with walkit.Client.connect(url) as client:
            with pytest.raises(AuthenticationError, match="requires authentication"):
                await client.open_ledger(lw.id)
    assert all(b.running for b in token_cluster.bookies)
    with trio.fail_after(NO_HANG):
        async with walkit.Client.connect(url, auth=walkit.TokenAuth(token=WRITER_TOKEN)) as c:
            lr = await c.open_ledger(lw.id, recovery=True)
            assert [e.payload for e in await lr.read(0, lr.last_add_confirmed)] == [b"kept"]


async def test_raw_unauthenticated_request_gets_auth_required(
    token_cluster: ProcessCluster,
) -> None:
    """On the wire: a read before AUTH is answered AUTH_REQUIRED, then the bookie closes."""
    from walkit._core.wire import ErrorResponse, ReadRequest

    address = token_cluster.bookies[0].address
    with trio.fail_after(NO_HANG):
        stream = await trio.open_tcp_stream(address.host, address.port)
        async with stream:
            await stream.send_all(encode_frame(ReadRequest(42, 1, 0)))
            data = b""
            while chunk := await stream.receive_some(65536):
                data += chunk
    answer = decode_message(data[4:])
    assert isinstance(answer, ErrorResponse)
    assert (answer.request_id, answer.status) == (42, StatusCode.AUTH_REQUIRED)


async def test_token_client_against_a_plain_bookie_works(tmp_path: Path) -> None:
    """Clients may turn authentication on before their bookies do."""
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 3), trio.fail_after(NO_HANG):
        await write_and_read(url, walkit.TokenAuth(token=WRITER_TOKEN))


def test_simpletest_with_auth_token_file(token_cluster: ProcessCluster, tmp_path: Path) -> None:
    url = token_cluster.metadata_url
    good = tmp_path / "good"
    good.write_text(f"{WRITER_TOKEN}\n")
    good.chmod(0o600)
    result = walkit_cli("simpletest", "--metadata", url, "--entries", "20",
                        "--auth-token-file", str(good))  # fmt: skip
    assert result.returncode == 0, result.stderr
    bad = tmp_path / "bad"
    bad.write_text("nope\n")
    bad.chmod(0o600)
    result = walkit_cli("simpletest", "--metadata", url, "--entries", "20",
                        "--auth-token-file", str(bad))  # fmt: skip
    assert result.returncode == 1
    assert "AuthenticationError" in result.stderr
    assert "does not know this token" in result.stderr
    result = walkit_cli("simpletest", "--metadata", url, "--entries", "20")
    assert result.returncode == 1
    assert "requires authentication" in result.stderr
    assert "--auth-token-file PATH" in result.stderr  # the CLI's way, not only the library's
    bad.chmod(0o644)
    result = walkit_cli("simpletest", "--metadata", url, "--auth-token-file", str(bad))
    assert result.returncode == 1
    assert "chmod 600" in result.stderr
    # From the environment.
    os.environ["WALKIT_AUTH_TOKEN_FILE"] = str(good)
    try:
        result = walkit_cli("simpletest", "--metadata", url, "--entries", "5")
    finally:
        del os.environ["WALKIT_AUTH_TOKEN_FILE"]
    assert result.returncode == 0, result.stderr


# --- TLS client certificates as principals -------------------------------------------------


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("auth-pki")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    files = {"ca": directory / "ca.pem"}
    for name, cert in [
        ("bookie", ca.issue_cert("127.0.0.1", "localhost")),
        ("client", ca.issue_cert("orders.walkit.test", common_name="orders-service")),
    ]:
        chain, key = directory / f"{name}.pem", directory / f"{name}.key"
        chain.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
        cert.private_key_pem.write_to_path(str(key))
        files[name], files[f"{name}_key"] = chain, key
    return files


async def test_tls_certificate_authentication(pki: dict[str, Path], tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    args = ["--tls-cert", str(pki["bookie"]), "--tls-key", str(pki["bookie_key"]),
            "--tls-ca", str(pki["ca"]), "--tls-client-auth", "require", "--auth", "tls"]  # fmt: skip
    tls = walkit.TLSConfig(ca=pki["ca"], cert=pki["client"], key=pki["client_key"])
    with process_cluster(url, tmp_path, 3, extra_args=args) as cluster, trio.fail_after(NO_HANG):
        async with walkit.Client.connect(url, tls=tls) as client:
            lw = await client.create_ledger(3, 2, 2)
            await lw.append(b"over tls, authenticated")
            await lw.close()
            lr = await client.open_ledger(lw.id)
            assert (await lr.read(0, 0))[0].payload == b"over tls, authenticated"
        # The certificate authenticates the connection; a token sent as well changes nothing.
        auth = walkit.TokenAuth(token="unknown-here")
        async with walkit.Client.connect(url, tls=tls, auth=auth) as client:
            lr = await client.open_ledger(lw.id)
            assert (await lr.read(0, 0))[0].payload == b"over tls, authenticated"
        # A token without TLS: the bookie's plain answer says it serves TLS only.
        async with walkit.Client.connect(url, auth=auth) as client:
            with pytest.raises(walkit.errors.TLSError, match="serves TLS only"):
                lr = await client.open_ledger(lw.id)
                await lr.read(0, 0)
        # Without a certificate there is no TLS connection at all (--tls-client-auth require).
        async with walkit.Client.connect(url, tls=walkit.TLSConfig(ca=pki["ca"])) as client:
            with pytest.raises(walkit.errors.TLSError):
                lr = await client.open_ledger(lw.id)
                await lr.read(0, 0)
        assert all(b.running for b in cluster.bookies)


# --- junk-key claims with authentication on --------------------------


async def test_junk_key_claims_are_refused_with_authentication_on(
    token_cluster: ProcessCluster,
) -> None:
    """The probe's attack, replayed: a stranger without credentials cannot claim ledger ids
    ahead, and another principal, even knowing the password, cannot fence or add to the
    writer's current ledger. The writer goes on with its ensemble unchanged."""
    from tests.bookie._helpers import connect as raw_connect
    from walkit._core.digest import master_key
    from walkit._core.wire import AddRequest, ErrorResponse, ReadLacFlag, ReadLacRequest
    from walkit.net import AuthNetwork, TcpNetwork

    url = token_cluster.metadata_url
    password = b"the right password"
    key = master_key(password)
    writer_auth = walkit.TokenAuth(token=WRITER_TOKEN)
    acked: list[tuple[walkit.LogPosition, bytes]] = []
    with trio.fail_after(2 * NO_HANG):
        async with walkit.Client.connect(url, auth=writer_auth) as client:
            log = await walkit.Log.open(client, "claims", password=password, ensemble_size=3,
                                        write_quorum=3, ack_quorum=2)  # fmt: skip
            async with log.writer() as w:
                acked.append((await w.append(b"first"), b"first"))
                current = (await log.metadata()).ledgers[-1].ledger_id
                ensemble = (await client.ledger_metadata(current)).current_ensemble
                victim = ensemble[0]
                # 1. No credentials: every claim is refused (AUTH_REQUIRED), nothing is held.
                async with raw_connect(victim) as stranger:
                    fence = ReadLacRequest(1, current + 1, ReadLacFlag.FENCE, -1, 0, b"\0" * 32)
                    answer = await stranger.call(fence)
                    assert isinstance(answer, ErrorResponse)
                    assert answer.status is StatusCode.AUTH_REQUIRED
                # 2. Another principal with the right key: the ledger belongs to the writer.
                network = AuthNetwork(TcpNetwork(), walkit.TokenAuth(token=READER_TOKEN))
                async with raw_connect(victim, network) as other:
                    fence = ReadLacRequest(other.next_id(), current, ReadLacFlag.FENCE, -1, 0, key)
                    answer = await other.call(fence)
                    assert isinstance(answer, ErrorResponse)
                    assert answer.status is StatusCode.UNAUTHORIZED_ACCESS
                    assert "registered on this bookie by principal 'writer'" in answer.message
                    add = other.add_request(current, 1, b"forged", key=key)
                    assert isinstance(add, AddRequest)
                    answer = await other.call(add)
                    assert isinstance(answer, ErrorResponse)
                    assert answer.status is StatusCode.UNAUTHORIZED_ACCESS
                for i in range(10):
                    payload = b"record-%d" % i
                    acked.append((await w.append(payload), payload))
            md = await client.ledger_metadata(current)
            assert md.current_ensemble == ensemble  # no ensemble change was needed
            records = [(r.position, r.payload) async for r in log.reader(follow=False)]
            assert records == acked
    assert all(b.running for b in token_cluster.bookies)
