"""``walkit sandbox --tls``: a CA and certificates made and kept, bookies that serve TLS only and
require client certificates, exports that the `walkit` command and `Client.connect` use, and a
clear error without them. Real sandbox and bookie processes on loopback."""

from __future__ import annotations

import os
import shlex
import ssl
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import walkit
from tests._sandbox import running_sandbox

pytestmark = pytest.mark.processes


def _exports(line: str) -> dict[str, str]:
    assert line.startswith("export ")
    return dict(item.split("=", 1) for item in shlex.split(line[len("export ") :]))


def _walkit(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "walkit.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


async def test_tls_sandbox_serves_tls_clients_only(tmp_path: Path) -> None:
    data = tmp_path / "sandbox"
    with running_sandbox(data, bookies=3, extra=["--tls"]) as sandbox:
        exports = _exports(sandbox.wait_for_line("export WALKIT_METADATA="))
        assert set(exports) == {
            "WALKIT_METADATA",
            "WALKIT_TLS_CA",
            "WALKIT_TLS_CERT",
            "WALKIT_TLS_KEY",
        }
        tls_dir = data / "tls"
        assert stat.S_IMODE(tls_dir.stat().st_mode) == 0o700
        for path in tls_dir.iterdir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        assert not any("ca-key" in p.name for p in tls_dir.iterdir())  # the CA's key is not kept

        # The command picks TLS up from the printed exports...
        env = dict(os.environ, **exports)
        ok = _walkit(env, "simpletest", "--entries", "50")
        assert ok.returncode == 0, ok.stdout + ok.stderr
        # ... and from options.
        opts = [f"--tls-{k}={exports[f'WALKIT_TLS_{k.upper()}']}" for k in ("ca", "cert", "key")]
        plain_env = dict(os.environ, WALKIT_METADATA=exports["WALKIT_METADATA"])
        for name in ("WALKIT_TLS_CA", "WALKIT_TLS_CERT", "WALKIT_TLS_KEY"):
            plain_env.pop(name, None)
        ok = _walkit(plain_env, "simpletest", "--entries", "10", *opts)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        # Without TLS, or without a client certificate: a clear error, not a hang.
        refused = _walkit(plain_env, "simpletest", "--entries", "10")
        assert refused.returncode == 1
        assert "TLS" in refused.stderr, refused.stderr
        no_cert = _walkit(plain_env, "simpletest", "--entries", "10", opts[0])
        assert no_cert.returncode == 1 and "TLSError" in no_cert.stderr, no_cert.stderr

        # The library, with the same files.
        tls = walkit.TLSConfig(
            ca=exports["WALKIT_TLS_CA"],
            cert=exports["WALKIT_TLS_CERT"],
            key=exports["WALKIT_TLS_KEY"],
        )
        async with (
            walkit.Client.connect(exports["WALKIT_METADATA"], tls=tls) as client,
            walkit.Log.open(client, "tls-log") as log,
        ):
            async with log.writer() as w:
                pos = await w.append(b"over TLS")
            assert [r.payload async for r in log.reader(pos, follow=False)] == [b"over TLS"]
        ca_before = (tls_dir / "ca.pem").read_bytes()

    # A restart keeps the certificates (clients keep working with the files they have).
    with running_sandbox(data, bookies=3, extra=["--tls"]) as sandbox:
        sandbox.wait_for_line("export WALKIT_METADATA=")
        assert (tls_dir / "ca.pem").read_bytes() == ca_before
        ctx = ssl.create_default_context(cafile=str(tls_dir / "ca.pem"))
        assert ctx.get_ca_certs()[0]["subject"][-1][0][1] == "walkit sandbox CA"


async def test_auth_sandbox_requires_its_token(tmp_path: Path) -> None:
    data = tmp_path / "sandbox"
    with running_sandbox(data, bookies=3, extra=["--auth"]) as sandbox:
        exports = _exports(sandbox.wait_for_line("export WALKIT_METADATA="))
        assert set(exports) == {"WALKIT_METADATA", "WALKIT_AUTH_TOKEN_FILE"}
        auth_dir = data / "auth"
        assert stat.S_IMODE(auth_dir.stat().st_mode) == 0o700
        assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in auth_dir.iterdir())
        ok = _walkit(dict(os.environ, **exports), "simpletest", "--entries", "20")
        assert ok.returncode == 0, ok.stdout + ok.stderr
        plain_env = dict(os.environ, WALKIT_METADATA=exports["WALKIT_METADATA"])
        plain_env.pop("WALKIT_AUTH_TOKEN_FILE", None)
        refused = _walkit(plain_env, "simpletest", "--entries", "20")
        assert refused.returncode == 1 and "AuthenticationError" in refused.stderr, refused.stderr
        # The library with the same token file.
        from walkit.net._auth import read_token_file

        auth = read_token_file(exports["WALKIT_AUTH_TOKEN_FILE"])
        async with walkit.Client.connect(exports["WALKIT_METADATA"], auth=auth) as client:
            lw = await client.create_ledger(3, 3, 2, password=b"pw")
            await lw.append(b"with a token")
            await lw.close()
        token = (auth_dir / "client-token").read_text()
    with running_sandbox(data, bookies=3, extra=["--auth"]) as sandbox:
        sandbox.wait_for_line("export WALKIT_METADATA=")
        assert (auth_dir / "client-token").read_text() == token  # kept across restarts
