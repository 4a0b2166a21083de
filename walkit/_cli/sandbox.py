"""`walkit sandbox`: an embedded cluster on this host.

sqlite metadata (by default) and N `walkit-bookie` processes on loopback. Ports are chosen once
and remembered in ``sandbox.json`` in the data dir, because a bookie's identity is its address:
a restarted sandbox must come back on the same ports to find its ledgers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TextIO, final

import attrs
import trio

from walkit._logging import get_logger
from walkit.errors import ConfigurationError

log = get_logger(__name__)

STATE_FILE = "sandbox.json"
READY_MARKER = "listening on"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@final
@attrs.define
class SandboxLayout:
    """What the sandbox keeps in its data dir between runs."""

    data_dir: Path
    metadata_url: str
    ports: list[int]

    @classmethod
    def load_or_create(
        cls, data_dir: Path, bookies: int, metadata_url: str | None
    ) -> SandboxLayout:
        data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # metadata and data inside
        state_path = data_dir / STATE_FILE
        state: dict[str, object] = {}
        if state_path.exists():
            try:
                loaded = json.loads(state_path.read_text())
                if not isinstance(loaded, dict):
                    raise ValueError("not an object")
                state = loaded
            except (ValueError, OSError) as exc:
                raise ConfigurationError(
                    f"{state_path} is unreadable ({exc}); move it away to start afresh"
                ) from exc
        url = metadata_url or str(
            state.get("metadata_url") or f"sqlite:///{(data_dir / 'metadata.db').resolve()}"
        )
        raw_ports = state.get("ports", [])
        ports = [int(p) for p in raw_ports] if isinstance(raw_ports, list) else []
        while len(ports) < bookies:
            port = free_port()
            if port not in ports:
                ports.append(port)
        layout = cls(data_dir=data_dir, metadata_url=url, ports=ports)
        state_path.write_text(json.dumps({"metadata_url": url, "ports": ports}, indent=2) + "\n")
        return layout

    def bookie_dir(self, index: int) -> Path:
        return self.data_dir / f"bookie-{index}"


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """Linux: the bookie gets SIGTERM if the sandbox dies, even by SIGKILL (no orphans)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def bookie_command(layout: SandboxLayout, index: int, host: str) -> list[str]:
    return [
        sys.executable,
        "-c",
        "from walkit_bookie.cli import main; main()",
        "--data-dir",
        str(layout.bookie_dir(index)),
        "--host",
        host,
        "--port",
        str(layout.ports[index]),
        "--metadata",
        layout.metadata_url,
    ]


async def _wait_ready(process: trio.Process, name: str, out: TextIO) -> None:
    """Echo the bookie's output, prefixed, and return once it says it listens."""
    assert process.stdout is not None
    buffer = b""
    async for chunk in process.stdout:
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            text = line.decode(errors="replace")
            print(f"[{name}] {text}", file=out, flush=True)
            if READY_MARKER in text:
                return
    raise ConfigurationError(f"{name} exited before it was ready (exit code {process.returncode})")


async def _pump(process: trio.Process, name: str, out: TextIO) -> None:
    assert process.stdout is not None
    async for chunk in process.stdout:
        for line in chunk.decode(errors="replace").splitlines():
            print(f"[{name}] {line}", file=out, flush=True)


async def run_sandbox(
    data_dir: Path,
    bookies: int,
    metadata_url: str | None,
    host: str = "127.0.0.1",
    out: TextIO = sys.stdout,
    ready: trio.Event | None = None,
) -> int:
    if bookies < 1:
        raise ConfigurationError("--bookies must be at least 1")
    layout = SandboxLayout.load_or_create(data_dir, bookies, metadata_url)
    processes: list[trio.Process] = []
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    # Ctrl-C and SIGTERM are both a clean stop, at any moment (also while bookies start):
    # received here rather than as KeyboardInterrupt, so the shutdown below always runs.
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_stop_on_signal, signals, nursery.cancel_scope, out)
                for index in range(bookies):
                    process = await trio.lowlevel.open_process(
                        bookie_command(layout, index, host),
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        env=env,
                        preexec_fn=_die_with_parent if sys.platform == "linux" else None,
                    )
                    processes.append(process)
                    with trio.fail_after(60):
                        await _wait_ready(process, f"bookie-{index}", out)
                    nursery.start_soon(_pump, process, f"bookie-{index}", out)
                    nursery.start_soon(_watch_exit, process, out)
                print(
                    f"walkit sandbox: {bookies} bookies on {host} ports {layout.ports[:bookies]}",
                    file=out,
                )
                print(f"metadata URL: {layout.metadata_url}", file=out)
                print(f"export WALKIT_METADATA={layout.metadata_url}", file=out, flush=True)
                if ready is not None:
                    ready.set()
        finally:
            with trio.CancelScope(shield=True):
                await _stop_all(processes)
    return 0


async def _stop_on_signal(
    signals: AsyncIterator[int], scope: trio.CancelScope, out: TextIO
) -> None:
    async for _ in signals:
        print("walkit sandbox: stopping", file=out, flush=True)
        scope.cancel()
        return


async def _watch_exit(process: trio.Process, out: TextIO) -> None:
    code = await process.wait()
    print(f"walkit sandbox: a bookie exited with code {code}", file=out, flush=True)


async def _stop_all(processes: list[trio.Process]) -> None:
    for process in processes:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
    with trio.move_on_after(15):
        for process in processes:
            await process.wait()
    for process in processes:
        if process.returncode is None:
            process.kill()
            await process.wait()
