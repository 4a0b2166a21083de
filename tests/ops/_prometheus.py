"""A real Prometheus server for tests (Debian's ``prometheus``): started on a free loopback port
with a data dir of its own, asked through its HTTP API, always stopped.

``scripts/install-prometheus.sh`` installs it (CI does); without it the tests skip and say so.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._cluster import free_port

REPO = Path(__file__).resolve().parents[2]
OPERATIONS = REPO / "docs" / "operations"
INSTALL_HINT = "run scripts/install-prometheus.sh (Debian's prometheus package, with promtool)"


def need(tool: str) -> str:
    """The path of ``prometheus`` or ``promtool``; skips the test, saying why, without it."""
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not installed: {INSTALL_HINT}")
    return path


class PrometheusServer:
    def __init__(self, config: Path, data_dir: Path) -> None:
        self.config = config
        self.data_dir = data_dir
        self.port = 0
        self.log_path = data_dir.parent / "prometheus.log"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> None:
        binary = need("prometheus")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={self.data_dir}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited at start:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.base}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)  # its port: no event to wait for but an answer
        raise RuntimeError(f"prometheus not ready in {timeout} s:\n{self.log_tail()}")

    def log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-3000:]
        return ""

    def api(self, path: str, **params: str) -> Any:
        """GET ``/api/v1/PATH`` with ``params``; its ``data`` (a failed call raises)."""
        query = urllib.parse.urlencode(params)
        url = f"{self.base}/api/v1/{path}" + (f"?{query}" if query else "")
        with urllib.request.urlopen(url, timeout=30) as answer:
            doc = json.loads(answer.read())
        if doc.get("status") != "success":
            raise AssertionError(f"{url}: {doc}")
        return doc["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's result (a vector, or a scalar as one sample)."""
        data = self.api("query", query=expr)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)


@contextlib.contextmanager
def running_prometheus(config: Path, data_dir: Path) -> Iterator[PrometheusServer]:
    server = PrometheusServer(config, data_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()
