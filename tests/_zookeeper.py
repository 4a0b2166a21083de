"""A real standalone ZooKeeper for tests: started on a free loopback port, always stopped.

The command is the one in /work/shared/notes.md (no config file; admin server off so it does
not take port 8080). Readiness is a kazoo connection, since ``ruok`` can answer too early.

``ZooKeeperServer(dir, tls=ServerTls(...))`` serves TLS only, on a ``secureClientPort`` with
Netty (a config file; Debian's netty jars on the class path; PEM key stores), certificates
from ``make_pki`` (trustme).
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
from dataclasses import dataclass
from pathlib import Path

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
SLF4J_JAR = Path("/usr/share/java/slf4j-simple.jar")
NETTY_JARS = [
    Path(f"/usr/share/java/netty-{name}.jar")
    for name in (
        "buffer",
        "codec",
        "common",
        "handler",
        "resolver",
        "transport",
        "transport-native-epoll",
        "transport-native-unix-common",
    )
]
INSTALL_HINT = (
    "run scripts/install-zookeeper.sh (installs Debian's zookeeper package and a Java runtime)"
)

_roots = itertools.count(1)


def missing_zookeeper(netty: bool = False) -> str | None:
    """Why ZooKeeper (with TLS: ``netty``) cannot be started here, or None if it can."""
    jars = [ZOOKEEPER_JAR, SLF4J_JAR, *(NETTY_JARS if netty else [])]
    missing = [str(p) for p in jars if not p.exists()]
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


@dataclass(frozen=True)
class ZkPki:
    """Certificates for a TLS ZooKeeper and its clients (all PEM files)."""

    ca: Path
    keystore: Path  # the server's PKCS#8 key and certificate chain, as ZooKeeper reads them
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing here


def make_pki(directory: Path) -> ZkPki:
    import trustme
    from cryptography.hazmat.primitives import serialization

    directory.mkdir(parents=True, exist_ok=True)
    ca, other = trustme.CA(), trustme.CA()
    ca.cert_pem.write_to_path(str(directory / "zk-ca.pem"))
    other.cert_pem.write_to_path(str(directory / "zk-other-ca.pem"))
    server = ca.issue_cert("127.0.0.1", "localhost")
    key = serialization.load_pem_private_key(server.private_key_pem.bytes(), None)
    pkcs8 = key.private_bytes(  # ZooKeeper's PEM reader wants "BEGIN PRIVATE KEY"
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    keystore = directory / "zk-server.pem"
    keystore.write_bytes(pkcs8 + b"".join(blob.bytes() for blob in server.cert_chain_pems))
    client = ca.issue_cert("zk-client.walkit.test", common_name="zk-client")
    client_cert, client_key = directory / "zk-client.pem", directory / "zk-client.key"
    client_cert.write_bytes(b"".join(blob.bytes() for blob in client.cert_chain_pems))
    client.private_key_pem.write_to_path(str(client_key))
    return ZkPki(
        directory / "zk-ca.pem", keystore, client_cert, client_key, directory / "zk-other-ca.pem"
    )


@dataclass(frozen=True)
class ServerTls:
    pki: ZkPki
    client_auth: str = "need"  # ZooKeeper's ssl.clientAuth: none, want or need

    def config_lines(self) -> list[str]:
        return [
            "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory",
            f"ssl.keyStore.location={self.pki.keystore}",
            "ssl.keyStore.type=PEM",
            f"ssl.trustStore.location={self.pki.ca}",
            "ssl.trustStore.type=PEM",
            f"ssl.clientAuth={self.client_auth}",
        ]

    def url_query(self, cert: bool = True) -> str:
        query = f"tls_ca={self.pki.ca}"
        if cert:
            query += f"&tls_cert={self.pki.client_cert}&tls_key={self.pki.client_key}"
        return query

    def kazoo_options(self) -> dict[str, object]:
        return {
            "use_ssl": True,
            "ca": str(self.pki.ca),
            "certfile": str(self.pki.client_cert),
            "keyfile": str(self.pki.client_key),
            "check_hostname": True,
        }


class ZooKeeperServer:
    def __init__(self, base_dir: Path, tls: ServerTls | None = None) -> None:
        self.base_dir = base_dir
        self.tls = tls
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = base_dir / "zookeeper.log"

    @property
    def hosts(self) -> str:
        return f"127.0.0.1:{self.port}"

    def url(self, root: str) -> str:
        """The URL of ``root``; with TLS, the query names the CA and a client certificate."""
        if self.tls is None:
            return f"zk://{self.hosts}{root}"
        return f"zk://{self.hosts}{root}?{self.tls.url_query()}"

    def start(self, timeout: float = 30.0) -> None:
        problem = missing_zookeeper(netty=self.tls is not None)
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
        jars = [ZOOKEEPER_JAR, SLF4J_JAR]
        args = [str(self.port), str(data_dir)]
        if self.tls is not None:
            config = self.base_dir / f"zoo-{self.port}.cfg"
            lines = [f"dataDir={data_dir}", f"secureClientPort={self.port}"]
            lines += ["secureClientPortAddress=127.0.0.1", *self.tls.config_lines()]
            config.write_text("\n".join(lines) + "\n")
            jars += NETTY_JARS
            args = [str(config)]
        command = [
            "java",
            "-Xms64m",
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-Dzookeeper.admin.enableServer=false",
            "-Dzookeeper.4lw.commands.whitelist=*",
            "-cp",
            ":".join(map(str, jars)),
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            *args,
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
            options = {} if self.tls is None else self.tls.kazoo_options()
            client = KazooClient(hosts=self.hosts, timeout=10.0, **options)
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
def running_zookeeper(base_dir: Path, tls: ServerTls | None = None) -> Iterator[ZooKeeperServer]:
    server = ZooKeeperServer(base_dir, tls)
    try:
        server.start()
        yield server
    finally:
        server.stop()
