"""Real bookie processes on loopback for tests: start, SIGKILL, pause, restart.

Each bookie keeps its port across restarts (a bookie's identity is its address) and its data
dir, so a restarted bookie comes back as the same member of its ensembles.
"""

from __future__ import annotations

import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from walkit import BookieId

READY = "listening on"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ChildProcess:
    """A subprocess that prints a line containing ``ready_text`` once it serves; its output
    is kept in ``output``. Subclasses give ``command()``."""

    ready_text = READY
    kind = "process"

    def __init__(self, port: int) -> None:
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None
        self.output: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()

    def command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 30.0) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        self._lines = queue.Queue()
        self.process = subprocess.Popen(
            self.command(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        threading.Thread(target=self._read, args=(self.process, self._lines), daemon=True).start()
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise RuntimeError(
                    f"{self.kind} {self.port} not ready in {timeout}s:\n" + "\n".join(self.output)
                )
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(
                    f"{self.kind} {self.port} exited at start:\n" + "\n".join(self.output)
                )
            if self.ready_text in line:
                return

    def _read(self, process: subprocess.Popen[bytes], lines: queue.Queue[str | None]) -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            text = raw.decode(errors="replace").rstrip("\n")
            self.output.append(text)
            lines.put(text)
        lines.put(None)

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL: no flush, no goodbye."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def stop(self) -> None:
        """SIGTERM: a clean shutdown (a paused process is resumed first, to handle it)."""
        if self.process is not None and self.process.poll() is None:
            try:
                os.kill(self.process.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)

    def pause(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)

    def restart(self) -> None:
        self.kill()
        self.start()


class BookieProcess(ChildProcess):
    """One `walkit-bookie` subprocess."""

    kind = "bookie"

    def __init__(
        self,
        metadata_url: str,
        data_dir: Path,
        port: int,
        network_location: str | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        super().__init__(port)
        self.metadata_url = metadata_url
        self.extra_args = list(extra_args or [])
        self.data_dir = data_dir
        self.network_location = network_location

    @property
    def address(self) -> BookieId:
        return BookieId("127.0.0.1", self.port)

    def command(self) -> list[str]:
        cmd = [
            sys.executable,
            "-c",
            "from walkit_bookie.cli import main; main()",
            "--data-dir",
            str(self.data_dir),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--metadata",
            self.metadata_url,
        ]
        if self.network_location:
            cmd += ["--network-location", self.network_location]
        return cmd + self.extra_args


class ProcessCluster:
    """N bookie processes sharing one metadata URL."""

    def __init__(
        self,
        metadata_url: str,
        root: Path,
        count: int,
        locations: list[str] | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.metadata_url = metadata_url
        self.bookies = [
            BookieProcess(
                metadata_url,
                root / f"bookie-{i}",
                free_port(),
                locations[i] if locations else None,
                extra_args,
            )
            for i in range(count)
        ]

    def start(self) -> None:
        for bookie in self.bookies:
            bookie.start()

    def close(self) -> None:
        for bookie in self.bookies:
            if bookie.process is not None:
                try:
                    bookie.resume()  # a paused process cannot handle SIGTERM
                except ProcessLookupError:
                    pass
            bookie.stop()

    def by_address(self, address: BookieId) -> BookieProcess:
        for bookie in self.bookies:
            if bookie.address == address:
                return bookie
        raise KeyError(str(address))


@contextmanager
def process_cluster(
    metadata_url: str,
    root: Path,
    count: int,
    locations: list[str] | None = None,
    extra_args: list[str] | None = None,
) -> Iterator[ProcessCluster]:
    """``extra_args``: more ``walkit-bookie`` arguments for every bookie (e.g. TLS files)."""
    cluster = ProcessCluster(metadata_url, root, count, locations, extra_args)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()
