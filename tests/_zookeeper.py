"""A real standalone ZooKeeper for tests: started on a free loopback port, always stopped.

The command is the one in /work/shared/notes.md (no config file; admin server off so it does
not take port 8080). Readiness is a kazoo connection, since ``ruok`` can answer too early.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_JAR = Path("/usr/share/java/slf4j-simple.jar")
INSTALL_HINT = (
    "run scripts/install-zookeeper.sh (installs Debian's zookeeper package and a Java runtime)"
)

_roots = itertools.count(1)


def missing_zookeeper() -> str | None:
    """Why ZooKeeper cannot be started here, or None if it can."""
    missing = [str(p) for p in (ZOOKEEPER_JAR, SLF4J_JAR) if not p.exists()]
    if shutil.which("java") is None:
        missing.append("java")
    if missing:
        return f"ZooKeeper is not installed (missing {', '.join(missing)}): {INSTALL_HINT}"
    return None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def unique_root(test_name: str) -> str:
    """A fresh ZooKeeper root for one test: /t<n>-<test name>."""
    clean = re.sub(r"[^A-Za-z0-9_.-]+", "_", test_name)[:60]
    return f"/t{next(_roots)}-{os.getpid()}-{clean}"


class ZooKeeperServer:
    def __init__(self, base_dir: Path) -> None:
        self.base_dir = base_dir
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = base_dir / "zookeeper.log"

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, root: str) -> str:
        return f"zk://{self.hosts}{root}"

    def start(self, timeout: float = 30.0) -> None:
        problem = missing_zookeeper()
        if problem:
            raise RuntimeError(problem)
        last_error = ""
        for _ in range(3):  # a free port can be taken by someone else before Java binds it
            self.port = free_port()
            self._launch()
            if self._wait_ready(timeout):
                return
            last_error = self._log_tail()
            self.stop()
        raise RuntimeError(f"ZooKeeper did not start; log tail:\n{last_error}")

    def restart(self, timeout: float = 30.0) -> None:
        """Stop and start again on the same port with the same data (sessions survive)."""
        self.stop()
        self._launch()
        if not self._wait_ready(timeout):
            tail = self._log_tail()
            self.stop()
            raise RuntimeError(f"ZooKeeper did not restart; log tail:\n{tail}")

    def _launch(self) -> None:
        data_dir = self.base_dir / f"data-{self.port}"
        data_dir.mkdir(parents=True, exist_ok=True)
        command = [
            "java",
            "-Xms64m",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.4lw.commands.whitelist=*",
            "-cp",
            f"{ZOOKEEPER_JAR}:{SLF4J_JAR}",
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            str(self.port),
            str(data_dir),
        ]
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def _wait_ready(self, timeout: float) -> bool:
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                return False
            client = KazooClient(hosts=self.hosts, timeout=10.0)
            try:
                client.start(timeout=1.0)
            except KazooTimeoutError:
                continue
            try:
                client.get("/")
                return True
            finally:
                client.stop()
                client.close()
        return False

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-2000:]
        return ""

    def stop(self) -> None:
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@contextlib.contextmanager
def running_zookeeper(base_dir: Path) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(base_dir)
    try:
        server.start()
        yield server
    finally:
        server.stop()
