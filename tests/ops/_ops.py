"""What the operations tests share: bookie processes with their admin endpoint, HTTP probes,
waiting for a process's log line, and file systems to fill or freeze.

Probes are plain blocking HTTP (``urllib``) with a timeout, as an orchestrator's are; a probe
that gets no answer within it says so (``Probe.status`` is None).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

from tests._cluster import BookieProcess, ChildProcess, free_port


class AdminBookie(BookieProcess):
    """A ``walkit-bookie`` process serving its admin endpoint on a free port (taken by the
    bookie itself and read from its output: a port chosen ahead could be taken meanwhile by
    another process's outgoing connection)."""

    ready_text = "walkit-bookie admin on "

    def __init__(
        self,
        metadata_url: str,
        data_dir: Path,
        *,
        data_dirs: list[Path] | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.admin_port = 0
        args = ["--admin-port", "0", *(extra_args or [])]
        for extra_dir in data_dirs or []:
            args += ["--data-dir", str(extra_dir)]
        super().__init__(metadata_url, data_dir, free_port(), extra_args=args)

    def start(self, timeout: float = 30.0) -> None:
        mark = len(self.output)
        super().start(timeout)
        line = next(line for line in self.output[mark:] if self.ready_text in line)
        self.admin_port = int(line.rsplit(":", 1)[1].split("/")[0])

    @property
    def admin(self) -> tuple[str, int]:
        return ("127.0.0.1", self.admin_port)


@attrs.frozen
class Probe:
    """An HTTP answer: its status and JSON body (``status`` None: no answer in time)."""

    status: int | None
    body: dict[str, Any]

    @property
    def reasons(self) -> str:
        return " | ".join(self.body.get("reasons", []))


def probe(address: tuple[str, int], path: str, timeout: float = 5.0) -> Probe:
    """GET ``path``; its status and JSON body, or status None when there is no answer."""
    url = f"http://{address[0]}:{address[1]}{path}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            return Probe(answer.status, json.loads(answer.read()))
    except urllib.error.HTTPError as exc:
        body = exc.read()
        try:
            return Probe(exc.code, json.loads(body))
        except ValueError:
            return Probe(exc.code, {"text": body.decode(errors="replace")})
    except (TimeoutError, urllib.error.URLError) as exc:
        return Probe(None, {"error": str(exc)})


def wait_for(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``predicate()`` until it returns something true (and return it). Used where there
    is no event to wait for: a probe's answer changes when a condition it measures does
    (a stall passing its limit, a metadata read timing out)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last: {last!r}")


def wait_for_line(process: ChildProcess, text: str, *, after: int = 0, timeout: float = 30) -> str:
    """The first output line of ``process`` from index ``after`` on containing ``text``."""

    def found() -> str | None:
        return next((line for line in process.output[after:] if text in line), None)

    line: str = wait_for(found, timeout, f"{text!r} in the output of {process.kind}")
    return line


def _root_problem(tool: str) -> str | None:
    import os

    if os.geteuid() != 0:
        return f"needs root to mount file systems ({tool})"
    if shutil.which(tool) is None:
        return f"needs {tool}"
    return None


def _run(*args: str) -> None:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {done.stderr.strip()}")


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (a real disk that fills up)."""
    problem = _root_problem("mount")
    if problem:
        pytest.skip(problem)
    path.mkdir()
    try:
        _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    except RuntimeError as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


@contextlib.contextmanager
def freezable_disk(path: Path, size_mib: int = 64) -> Iterator[Path]:
    """An ext4 file system in a file, loop-mounted at ``path`` (put data dirs below it: ext4
    has ``lost+found``), that ``frozen`` can stop (``fsfreeze``: writes block until thawed,
    as on a disk that stopped answering)."""
    for tool in ("mount", "losetup", "mkfs.ext4", "fsfreeze"):
        problem = _root_problem(tool)
        if problem:
            pytest.skip(problem)
    image = path.with_name(path.name + ".img")
    with open(image, "wb") as f:
        f.truncate(size_mib << 20)
    path.mkdir()
    device = ""
    try:
        _run("mkfs.ext4", "-q", "-F", str(image))
        found = subprocess.run(
            ["losetup", "--find", "--show", str(image)], capture_output=True, text=True
        )
        if found.returncode != 0:
            raise RuntimeError(f"losetup failed: {found.stderr.strip()}")
        device = found.stdout.strip()
        _run("mount", device, str(path))
    except RuntimeError as exc:
        if device:
            subprocess.run(["losetup", "-d", device], check=False, capture_output=True)
        image.unlink(missing_ok=True)
        pytest.skip(f"cannot loop-mount an ext4 image here: {exc}")
    try:
        yield path
    finally:
        thaw(path)  # a frozen file system cannot be unmounted
        subprocess.run(["umount", str(path)], check=False, capture_output=True)
        subprocess.run(["losetup", "-d", device], check=False, capture_output=True)
        image.unlink(missing_ok=True)


def freeze(path: Path) -> None:
    _run("fsfreeze", "--freeze", str(path))


def thaw(path: Path) -> None:
    subprocess.run(["fsfreeze", "--unfreeze", str(path)], check=False, capture_output=True)


@contextlib.contextmanager
def frozen(path: Path) -> Iterator[None]:
    """``path``'s file system frozen for the block, thawed after whatever happens (a process
    blocked in a write cannot even be killed until then)."""
    freeze(path)
    try:
        yield
    finally:
        thaw(path)
