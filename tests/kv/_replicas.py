"""KV service replicas (``examples/kv_store.py serve``) as real processes on loopback."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "kv_store.py"
READY = "kv: serving http://"


class ReplicaProcess:
    """One replica; keeps its HTTP port across restarts."""

    def __init__(self, metadata_url: str, port: int, *extra: str, log: str = "kv") -> None:
        self.metadata_url = metadata_url
        self.port = port
        self.extra = list(extra)
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None
        self.output: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def base(self) -> str:
        return f"http://{self.address}"

    def start(self, timeout: float = 60.0) -> None:
        assert self.process is None or self.process.poll() is not None, "already running"
        self._lines = queue.Queue()
        cmd = [
            sys.executable,
            str(EXAMPLE),
            "serve",
            "--metadata",
            self.metadata_url,
            "--http",
            self.address,
            "--log",
            self.log,
            *self.extra,
        ]
        self.process = subprocess.Popen(
            cmd,
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
                raise RuntimeError(f"replica {self.port} not ready:\n" + "\n".join(self.output))
            try:
                line = self._lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError(f"replica {self.port} exited:\n" + "\n".join(self.output))
            if READY in line:
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
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.kill(self.process.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)

    def pause(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)
