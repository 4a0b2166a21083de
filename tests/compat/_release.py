"""A released walkit, built from the repository's own history, for tests that run it beside the
working tree: bookies and clients of two versions in one cluster.

:func:`release_python` checks the release's commit out of the repository (``git archive``),
builds a wheel of it and installs it, without dependencies, into a virtualenv of its own. The
dependencies are this interpreter's: a ``.pth`` file appends its site-packages to the old
virtualenv's path, after the old walkit, and site-packages listed that way do not run their
own ``.pth`` files, so the working tree's editable install stays out. Old processes run with
``-E -P`` (no PYTHON* variables, no current directory on the path): the old walkit is the one
they import, and :func:`check_release_python` proves it.

The virtualenv is cached (``WALKIT_COMPAT_CACHE``, default ``~/.cache/walkit/compat``) under a
key made of the commit, the Python version and this interpreter's site-packages, and built once.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import os
import queue
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import threading
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests._cluster import BookieProcess

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
#: Runs a module of this directory under an old walkit: no PYTHON* variables, no current
#: directory on the path, unbuffered output.
OLD_FLAGS = ("-E", "-P", "-u")


def releases() -> dict[str, str]:
    with open(HERE / "releases.toml", "rb") as file:
        table: dict[str, Any] = tomllib.load(file)
    return {str(version): str(commit) for version, commit in table["releases"].items()}


def latest_release() -> tuple[str, str]:
    """(version, commit) of the newest release."""
    found = releases()
    version = max(found, key=lambda v: tuple(int(p) for p in v.split(".")))
    return version, found[version]


def _cache_root() -> Path:
    configured = os.environ.get("WALKIT_COMPAT_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "walkit" / "compat"


def _site_packages() -> list[str]:
    paths = sysconfig.get_paths()
    return list(dict.fromkeys([paths["purelib"], paths["platlib"]]))


def release_python(version: str, commit: str) -> Path:
    """The interpreter of a virtualenv holding walkit ``version`` (built from ``commit``)."""
    try:
        subprocess.run(
            ["git", "-C", str(REPO), "cat-file", "-e", f"{commit}^{{commit}}"],
            check=True,
            capture_output=True,
        )
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(
            f"release {version}'s commit {commit[:12]} is not in this repository's history "
            "(a shallow clone? git fetch --unshallow)"
        )
    deps = _site_packages()
    key = hashlib.sha256("\n".join([commit, sys.version, *deps]).encode()).hexdigest()[:12]
    root = _cache_root()
    root.mkdir(parents=True, exist_ok=True)
    home = root / f"{version}-{commit[:12]}-{key}"
    python = home / "venv" / "bin" / "python"
    with open(root / f".{home.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; the others wait and reuse it
        if not (home / "built").exists():
            _build(home, commit, deps)
    return python


def _build(home: Path, commit: str, deps: list[str]) -> None:
    """Build into ``home`` (a venv must be made where it lives); ``built`` marks it done, so
    a build cut short is made again."""
    shutil.rmtree(home, ignore_errors=True)
    (home / "src").mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(home / "src", filter="data")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    wheels = home / "wheels"
    subprocess.run([*pip, "wheel", "--no-deps", "-w", str(wheels), str(home / "src")], check=True)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(home / "venv")], check=True)
    (wheel,) = wheels.glob("walkit-*.whl")
    python = home / "venv" / "bin" / "python"
    subprocess.run(
        [*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
        check=True,
    )
    purelib = subprocess.run(
        [str(python), "-E", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # Appended after the old walkit's own site-packages: its dependencies, not its walkit.
    (Path(purelib) / "_walkit_dependencies.pth").write_text("\n".join(deps) + "\n")
    shutil.rmtree(home / "src")
    shutil.rmtree(wheels)
    (home / "built").write_text(commit + "\n")


def check_release_python(python: Path, version: str) -> None:
    """Fail unless ``python`` imports walkit ``version`` from its own virtualenv."""
    code = (
        "import walkit, walkit_bookie, walkit._version as v; "
        "print(v.__version__); print(walkit.__file__); print(walkit_bookie.__file__)"
    )
    out = subprocess.run(
        [str(python), *OLD_FLAGS, "-c", code],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,  # (the working tree: -P keeps it off the path)
    ).stdout.split()
    venv = str(python.parent.parent)
    assert out[0] == version, f"{python} imports walkit {out[0]}, not {version}"
    assert out[1].startswith(venv) and out[2].startswith(venv), out


class OldBookieProcess(BookieProcess):
    """A bookie of a released version."""

    kind = "old bookie"

    def __init__(self, python: Path, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.python = python

    def command(self) -> list[str]:
        cmd = super().command()
        assert cmd[0] == sys.executable and cmd[1] == "-c"
        return [str(self.python), *OLD_FLAGS, *cmd[1:]]


class LogClient:
    """``_log_client.py`` (write or read a log) under some interpreter: its output lines are
    read by a thread into a queue, and ``stop()`` asks a writer to finish cleanly."""

    def __init__(self, python: Path | str, *args: str) -> None:
        env = None
        if str(python) == sys.executable:  # the working tree's walkit, whatever is installed
            flags: tuple[str, ...] = ("-u",)
            env = dict(os.environ, PYTHONPATH=str(REPO))
        else:
            flags = OLD_FLAGS
        self.process = subprocess.Popen(
            [str(python), *flags, str(HERE / "_log_client.py"), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=HERE,
            env=env,
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def next_line(self, timeout: float = 60.0) -> str:
        """The next line (AssertionError if the process ends or says nothing in time)."""
        deadline = time.monotonic() + timeout
        try:
            line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise AssertionError(f"no output in {timeout} s:\n" + "\n".join(self.lines)) from None
        if line is None:
            raise AssertionError("the client exited:\n" + "\n".join(self.lines))
        self.lines.append(line)
        return line

    def wait_for(self, prefix: str, count: int = 1, timeout: float = 60.0) -> list[str]:
        """Read lines until ``count`` more of them start with ``prefix``; those lines."""
        found: list[str] = []
        while len(found) < count:
            line = self.next_line(timeout)
            if line.startswith(prefix):
                found.append(line)
        return found

    def rest(self, timeout: float = 60.0) -> list[str]:
        """Every line until the process exits (it must exit 0)."""
        out = []
        while True:
            try:
                line = self._queue.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"still running after {timeout} s") from None
            if line is None:
                break
            self.lines.append(line)
            out.append(line)
        assert self.process.wait(timeout=timeout) == 0, "\n".join(self.lines)
        return out

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("stop\n")
        self.process.stdin.flush()

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=30)
