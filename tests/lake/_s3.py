"""An S3-compatible server process on loopback (moto's server mode) for the lake's tests, and
the log options of a lake on it or on local files."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: The test credentials, given through the standard AWS chain (environment variables).
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def s3_server(*, authenticate: bool = False) -> Iterator[str]:
    """``python -m moto.server`` on 127.0.0.1; yields its endpoint URL. With ``authenticate``
    it checks credentials as S3 does (moto's ``INITIAL_NO_AUTH_ACTION_COUNT=0``): keys it
    does not know are refused."""
    port = _free_port()
    env = dict(os.environ, INITIAL_NO_AUTH_ACTION_COUNT="0") if authenticate else None
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("moto's S3 server did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def make_bucket(endpoint: str, bucket: str) -> None:
    from pyarrow import fs

    s3 = fs.S3FileSystem(
        endpoint_override=endpoint, scheme="http", region="us-east-1", allow_bucket_creation=True
    )
    s3.create_dir(bucket)


def lake_options(kind: str, tmp_path: Path, endpoint: str | None) -> dict[str, Any]:
    """``offload_to`` (and ``offload_catalog``) of a lake of ``kind`` (file or s3)."""
    if kind == "file":
        return {"offload_to": f"file://{tmp_path / 'lake'}"}
    assert endpoint is not None
    bucket = f"b{tmp_path.name.lower().replace('_', '-')[-40:]}".strip("-")
    make_bucket(endpoint, bucket)
    return {
        "offload_to": f"s3://{bucket}/lake",
        "offload_catalog": {
            "type": "sql",
            "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
            "warehouse": f"s3://{bucket}/lake",
            "s3.endpoint": endpoint,
            "s3.region": "us-east-1",
        },
    }
