"""A real ``walkit sandbox`` process for tests: started, watched line by line, stopped.

Its output (stdout and stderr merged) is collected by a reader thread, so a test can wait for a
line without the pipe ever filling up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path


def children(pid: int) -> list[int]:
    """Pids of the live (not zombie) children of ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(stat.parent.name))
    return sorted(found)


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


class Sandbox:
    """One ``walkit sandbox`` subprocess."""

    def __init__(self, data_dir: Path, bookies: int = 3, extra: Sequence[str] = ()) -> None:
        self.data_dir = data_dir
        self.command = [
            sys.executable,
            "-m",
            "walkit.cli",
            "sandbox",
            "--bookies",
            str(bookies),
            "--data-dir",
            str(data_dir),
            *extra,
        ]
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.metadata_url = ""
        self.process: subprocess.Popen[str] | None = None

    def start(self, timeout: float = 60) -> str:
        """Start it; the metadata URL once it serves."""
        self.process = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        threading.Thread(target=self._read, args=(self.process,), daemon=True).start()
        line = self.wait_for_line("metadata URL: ", timeout=timeout)
        self.metadata_url = line.split(": ", 1)[1].strip()
        return self.metadata_url

    def _read(self, process: subprocess.Popen[str]) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self.lines.append("<EOF>")
            self._changed.notify_all()

    def wait_for_line(self, prefix: str, *, after: int = 0, timeout: float = 60) -> str:
        """The first output line from index ``after`` on that contains ``prefix``."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines[after:]:
                    if prefix in line:
                        return line
                if "<EOF>" in self.lines[after:]:
                    raise AssertionError(
                        f"sandbox ended without printing {prefix!r}:\n" + self.output
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(f"no {prefix!r} within {timeout} s:\n" + self.output)
                self._changed.wait(remaining)

    @property
    def output(self) -> str:
        with self._changed:
            return "\n".join(self.lines)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def bookie_pids(self) -> list[int]:
        return children(self.pid)

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 60) -> int:
        """Send ``signum`` and wait; the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signum)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=timeout)
            raise


@contextmanager
def running_sandbox(
    data_dir: Path, bookies: int = 3, extra: Sequence[str] = ()
) -> Iterator[Sandbox]:
    """A started sandbox, stopped with SIGTERM (and its bookies with it) at the end."""
    sandbox = Sandbox(data_dir, bookies, extra)
    try:
        sandbox.start()
        yield sandbox
    finally:
        if sandbox.process is not None and sandbox.process.poll() is None:
            bookies_left = sandbox.bookie_pids()
            sandbox.stop()
            for pid in bookies_left:
                if alive(pid):
                    os.kill(pid, signal.SIGKILL)
