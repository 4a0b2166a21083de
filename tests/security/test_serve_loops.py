"""The server side of the Network seam on every event loop: plain TCP, and TLS with its
refusal of plain clients and its client principal."""

from __future__ import annotations

import functools
from pathlib import Path

import anyio
import anyio.abc
import pytest
import trustme

from tests._event_loops import EVENT_LOOPS, run_on
from walkit import TLSConfig
from walkit._core.types import BookieId
from walkit._core.wire import ErrorResponse, StatusCode, decode_message
from walkit.net import Network, StreamHandler, TcpNetwork, TlsNetwork, principal_of
from walkit.shared import direct_fd

#: Long enough for a loaded machine; a hang would blow it.
NO_HANG = 30.0


async def _serving(server: Network, handler: StreamHandler, tasks: anyio.abc.TaskGroup) -> BookieId:
    address: BookieId = await tasks.start(functools.partial(server.serve, "127.0.0.1", 0, handler))
    return address


async def _echo_many(connections: int) -> tuple[list[bytes], list[int]]:
    fds: list[int] = []

    async def echo(stream: anyio.abc.ByteStream) -> None:
        fds.append(direct_fd(stream))
        try:
            while True:
                await stream.send(await stream.receive())
        except anyio.EndOfStream:
            pass

    client = TcpNetwork()
    answers: list[bytes] = []
    with anyio.fail_after(NO_HANG):
        async with anyio.create_task_group() as tasks:
            address = await _serving(TcpNetwork(), echo, tasks)

            async def one(i: int) -> None:
                stream = await client.connect(address)
                async with stream:
                    message = f"hello {i} ".encode() * 1000
                    await stream.send(message)
                    got = b""
                    while len(got) < len(message):
                        got += await stream.receive()
                    answers.append(got)

            async with anyio.create_task_group() as clients:
                for i in range(connections):
                    clients.start_soon(one, i)
            tasks.cancel_scope.cancel()
    return answers, fds


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_tcp_serves_each_connection_on_a_raw_socket(loop: str) -> None:
    answers, fds = run_on(loop, _echo_many, 20)
    assert sorted(answers) == sorted(f"hello {i} ".encode() * 1000 for i in range(20))
    # The handler gets walkit's own socket stream: the bookie's fast paths read and write it.
    assert len(fds) == 20 and all(fd >= 0 for fd in fds)


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("pki")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "ca.pem"))
    files = {"ca": directory / "ca.pem"}
    for name, cert in (
        ("bookie", ca.issue_cert("127.0.0.1")),
        ("client", ca.issue_cert("client-1.walkit.test", common_name="client-1")),
    ):
        files[name] = directory / f"{name}.pem"
        files[f"{name}_key"] = directory / f"{name}.key"
        files[name].write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))
        cert.private_key_pem.write_to_path(str(files[f"{name}_key"]))
    return files


async def _tls_scenario(files: dict[str, Path]) -> tuple[list[str | None], bytes]:
    server = TlsNetwork(
        TcpNetwork(),
        server_context=TLSConfig(files["bookie"], files["bookie_key"], files["ca"]).server_context(
            "optional"
        ),
    )
    seen: list[str | None] = []

    async def handler(stream: anyio.abc.ByteStream) -> None:
        seen.append(principal_of(stream))
        await stream.send(await stream.receive())

    with anyio.fail_after(NO_HANG):
        async with anyio.create_task_group() as tasks:
            address = await _serving(server, handler, tasks)
            for tls in (
                TLSConfig(files["client"], files["client_key"], files["ca"]),
                TLSConfig(ca=files["ca"]),
            ):
                client = TlsNetwork(TcpNetwork(), client_context=tls.client_context())
                async with await client.connect(address) as stream:
                    await stream.send(b"ping")
                    assert await stream.receive() == b"ping"
            # A plain client is told, in plain framing, that this bookie serves TLS only.
            async with await TcpNetwork().connect(address) as plain:
                await plain.send(b"\x00\x00\x00\x04junk")
                refusal = b""
                try:
                    while True:
                        refusal += await plain.receive()
                except anyio.EndOfStream:
                    pass
            tasks.cancel_scope.cancel()
    return seen, refusal


@pytest.mark.parametrize("loop", EVENT_LOOPS)
def test_tls_serves_with_principals_and_refuses_plain_clients(
    loop: str, tls_files: dict[str, Path]
) -> None:
    seen, refusal = run_on(loop, _tls_scenario, tls_files)
    assert seen[0] is not None and seen[0].startswith("CN=client-1")
    assert seen[1] is None
    answer = decode_message(refusal[4:])
    assert isinstance(answer, ErrorResponse) and answer.status is StatusCode.TLS_REQUIRED
