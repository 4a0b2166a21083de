"""Autorecovery between bookies that serve TLS only and authenticate clients by token.

The bookies' own workers (or, with ``--no-autorecovery``, the client that answers
COPY_FRAGMENT requests of ``rereplicate_bookie``) connect to their peers as clients: over TLS (the bookie's
certificate as theirs, its CA to check the peers) and with the token of
``--autorecovery-token-file``. 4 real `walkit-bookie` processes, E=Qw=3 Qa=2: one bookie of
the ensemble is SIGKILLed and its data dir wiped; the survivors rereplicate every ledger. Then two more
of the original ensemble are SIGKILLed, and every entry must read back, byte for byte, from the
one bookie left (possible only if the first loss was rereplicated).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import walkit
from tests._cluster import ProcessCluster, process_cluster
from tests.autorecovery.test_processes import read_back, write_wipe_one_rereplicate_lose_two
from tests.security.test_tls import Pki, pki
from walkit.client import Client
from walkit.errors import AuthenticationError

__all__ = ["pki"]  # the certificates fixture of the TLS tests, reused here

pytestmark = pytest.mark.processes

HANG_GUARD = 180
WRITER_TOKEN = "secure-writer-token"
WORKER_TOKEN = "secure-autorecovery-token"
LEDGERS = 4
ENTRIES = 100


@pytest.fixture(params=["require", "none", "require, --no-autorecovery"])
def secure_cluster(
    pki: Pki, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[ProcessCluster]:
    """4 bookies: TLS (client certificates required, or not asked for), token
    authentication, autorecovery with its own token (or only the client that answers
    COPY_FRAGMENT, with ``--no-autorecovery``)."""
    mode, _, no_workers = request.param.partition(", ")
    tokens = tmp_path / "tokens"
    tokens.write_text(f"writer:{WRITER_TOKEN}\nautorecovery:{WORKER_TOKEN}\n")
    tokens.chmod(0o600)
    worker = tmp_path / "autorecovery-token"
    worker.write_text(WORKER_TOKEN + "\n")
    worker.chmod(0o600)
    args = [
        *pki.bookie_args(mode),
        # Without client certificates the CA only serves the worker, to check its peers.
        *([] if mode == "require" else ["--tls-ca", str(pki.ca)]),
        *([no_workers] if no_workers else []),
        "--auth", "token", "--auth-token-file", str(tokens),
        "--autorecovery-token-file", str(worker),
        "--lost-bookie-delay", "1",
    ]  # fmt: skip
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 4, extra_args=args) as cluster:
        yield cluster


def test_tls_and_token_bookies_rereplicate_a_lost_bookie(
    secure_cluster: ProcessCluster, pki: Pki
) -> None:
    cluster = secure_cluster
    url = cluster.metadata_url
    workerless = "--no-autorecovery" in cluster.bookies[0].extra_args
    tls = pki.client()
    auth = walkit.TokenAuth(token=WRITER_TOKEN)

    async def main() -> None:
        with trio.fail_after(HANG_GUARD):
            # The bookies really do refuse a client without the token.
            with pytest.raises(AuthenticationError):
                async with Client.connect(url, tls=tls) as stranger:
                    await stranger.create_ledger(3, 3, 2)
            async with Client.connect(url, tls=tls, auth=auth) as client:
                # Without workers the ledgers' writer rereplicates them with `rereplicate_bookie`: the
                # replacement copies every entry itself, over TLS, with its own token.
                # Each ledger has a password of its own, which the bookies take from its
                # metadata (the replacement too, for COPY_FRAGMENT).
                written = await write_wipe_one_rereplicate_lose_two(
                    client,
                    cluster,
                    LEDGERS,
                    ENTRIES,
                    recover=workerless,
                    passwords=[b"secure ledger %d" % n for n in range(LEDGERS)],
                    digests=("mac", "crc32c"),
                )
            async with Client.connect(url, tls=tls, auth=auth) as reader:
                await read_back(reader, written)

    trio.run(main)
    logs = "\n".join(line for b in cluster.bookies for line in b.output)
    assert workerless or "ledger_rereplicated" in logs
    assert "autorecovery_without_credentials" not in logs
    assert "autorecovery_tls_without_ca" not in logs


def test_a_tls_bookie_without_a_ca_warns_its_worker_cannot_check_peers(
    pki: Pki, tmp_path: Path
) -> None:
    """A private CA and no --tls-ca: the worker would fail every TLS handshake with its peers
    (CERTIFICATE_VERIFY_FAILED); the bookie says so when it starts, not per ledger."""
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 1, extra_args=pki.bookie_args("none")) as cluster:
        (bookie,) = cluster.bookies
        warning = [line for line in bookie.output if "autorecovery_tls_without_ca" in line]
        assert warning and "give --tls-ca" in warning[0]
