"""`walkit sandbox`: an embedded cluster on this host.

sqlite metadata (by default) and N `walkit-bookie` processes on loopback. Ports are chosen once
and remembered in ``sandbox.json`` in the data dir, because a bookie's identity is its address:
a restarted sandbox must come back on the same ports to find its ledgers.

The sandbox supervises its bookies: they die with it (even when it is SIGKILLed, see
:mod:`walkit._cli._child`), and one that exits on its own is restarted on the same data dir and
port after a backoff (:func:`restart_delay`), or, with ``exit_on_bookie_failure``, the sandbox
stops and exits 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import TextIO, final

import anyio
import attrs
from anyio.abc import TaskStatus

from walkit._cli._certs import sandbox_certificates
from walkit._cli._child import Child, guarded_python
from walkit._cli._tokens import sandbox_tokens
from walkit._groups import leaves as group_leaves
from walkit._logging import get_logger
from walkit.errors import ConfigurationError, WalkitError

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


#: Seconds a bookie must have served for its next failure to count as the first again.
STABLE_AFTER = 60.0
#: Seconds a bookie has to say it listens, at start and after a restart.
START_TIMEOUT = 60.0


def restart_delay(failures: int, *, first: float = 0.5, cap: float = 30.0) -> float:
    """Seconds to wait before restart number ``failures + 1`` of a bookie: 0.5, 1, 2 ... 30."""
    return float(min(cap, first * 2 ** min(failures, 16)))


def bookie_command(
    layout: SandboxLayout, index: int, host: str, extra_args: Sequence[str] = ()
) -> list[str]:
    """The command line of bookie ``index``: it dies with this process (the sandbox)."""
    code = "from walkit_bookie.cli import main\nsys.exit(main())\n"
    return [
        *guarded_python(code),
        "--data-dir",
        str(layout.bookie_dir(index)),
        "--host",
        host,
        "--port",
        str(layout.ports[index]),
        "--metadata",
        layout.metadata_url,
        *extra_args,
    ]


class BookieFailedError(ConfigurationError):
    """A bookie of the sandbox exited on its own, and the sandbox was told to stop then."""


@attrs.define
class _Supervisor:
    """Runs bookie ``index`` and restarts it whenever it exits on its own."""

    name: str
    command: list[str]
    env: dict[str, str]
    out: TextIO
    exit_on_failure: bool
    child: Child | None = None
    restarts: int = 0

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        failures = 0
        first = True
        while True:
            child = self.child = Child.spawn(self.command, self.env)
            async with contextlib.aclosing(child.lines()) as lines:
                with anyio.move_on_after(START_TIMEOUT) as timeout:
                    ready = await self._echo_until_ready(lines)
                if timeout.cancelled_caught:
                    print(
                        f"walkit sandbox: {self.name} did not say it listens within "
                        f"{START_TIMEOUT:g} s; killing it",
                        file=self.out,
                        flush=True,
                    )
                    child.send_signal(signal.SIGKILL)
                if ready:
                    if first:
                        first = False
                        task_status.started()
                    else:
                        print(f"walkit sandbox: {self.name} is back", file=self.out, flush=True)
                    started = anyio.current_time()
                    async for line in lines:
                        print(f"[{self.name}] {line}", file=self.out, flush=True)
                    if anyio.current_time() - started >= STABLE_AFTER:
                        failures = 0
            code = await child.wait()
            await child.aclose()
            if first:
                raise ConfigurationError(
                    f"{self.name} failed to start (exit code {code}); its output is above"
                )
            if self.exit_on_failure:
                log.error("bookie_exited", bookie=self.name, code=code, action="stop")
                raise BookieFailedError(
                    f"{self.name} exited unexpectedly with code {code}; stopping the sandbox "
                    "(--exit-on-bookie-failure)"
                )
            delay = restart_delay(failures)
            failures += 1
            self.restarts += 1
            log.warning("bookie_exited", bookie=self.name, code=code, action="restart", delay=delay)
            print(
                f"walkit sandbox: {self.name} exited unexpectedly with code {code}; "
                f"restarting it in {delay:g} s on the same data dir",
                file=self.out,
                flush=True,
            )
            await anyio.sleep(delay)

    async def _echo_until_ready(self, lines: AsyncIterator[str]) -> bool:
        async for line in lines:
            print(f"[{self.name}] {line}", file=self.out, flush=True)
            if READY_MARKER in line:
                return True
        return False


async def run_sandbox(
    data_dir: Path,
    bookies: int,
    metadata_url: str | None,
    host: str = "127.0.0.1",
    out: TextIO = sys.stdout,
    ready: anyio.Event | None = None,
    *,
    exit_on_bookie_failure: bool = False,
    bookie_args: Sequence[str] = (),
    tls: bool = False,
    auth: bool = False,
) -> int:
    """Run the sandbox until SIGTERM or SIGINT (0), or until a bookie fails with
    ``exit_on_bookie_failure`` (1). ``bookie_args`` go to every ``walkit-bookie``. With
    ``tls``, the bookies serve TLS only and require client certificates signed by the
    sandbox's CA (made in ``DATA_DIR/tls``). With ``auth``, they require a token (made in
    ``DATA_DIR/auth``) from every client."""
    if bookies < 1:
        raise ConfigurationError("--bookies must be at least 1")
    layout = SandboxLayout.load_or_create(data_dir, bookies, metadata_url)
    exports = {"WALKIT_METADATA": layout.metadata_url}
    if tls:
        certs = sandbox_certificates(layout.data_dir / "tls", host)
        bookie_args = [
            *bookie_args,
            "--tls-cert", str(certs.bookie_cert.resolve()),
            "--tls-key", str(certs.bookie_key.resolve()),
            "--tls-ca", str(certs.ca.resolve()),
            "--tls-client-auth", "require",
        ]  # fmt: skip
        exports.update(
            WALKIT_TLS_CA=str(certs.ca.resolve()),
            WALKIT_TLS_CERT=str(certs.client_cert.resolve()),
            WALKIT_TLS_KEY=str(certs.client_key.resolve()),
        )
    if auth:
        tokens = sandbox_tokens(layout.data_dir / "auth")
        bookie_args = [
            *bookie_args,
            "--auth", "token",
            "--auth-token-file", str(tokens.bookie_file.resolve()),
            "--autorecovery-token-file", str(tokens.autorecovery_file.resolve()),
        ]  # fmt: skip
        exports["WALKIT_AUTH_TOKEN_FILE"] = str(tokens.client_file.resolve())
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    supervisors = [
        _Supervisor(
            name=f"bookie-{index}",
            command=bookie_command(layout, index, host, bookie_args),
            env=env,
            out=out,
            exit_on_failure=exit_on_bookie_failure,
        )
        for index in range(bookies)
    ]
    # Ctrl-C and SIGTERM are both a clean stop, at any moment (also while bookies start):
    # received here rather than as KeyboardInterrupt, so the shutdown below always runs.
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        try:
            async with anyio.create_task_group() as nursery:
                nursery.start_soon(_stop_on_signal, signals, nursery.cancel_scope, out)
                async with anyio.create_task_group() as starting:  # all at once: 1/N of the wait
                    for supervisor in supervisors:
                        starting.start_soon(nursery.start, supervisor.run)
                print(
                    f"walkit sandbox: {bookies} bookies on {host} ports {layout.ports[:bookies]}",
                    file=out,
                )
                print(f"metadata URL: {layout.metadata_url}", file=out)
                if tls:
                    print("TLS: bookies require client certificates of the sandbox's CA", file=out)
                if auth:
                    print("auth: bookies require the token in WALKIT_AUTH_TOKEN_FILE", file=out)
                export = "export " + " ".join(f"{k}={shlex.quote(v)}" for k, v in exports.items())
                print(export, file=out, flush=True)  # ready to paste into a shell
                if ready is not None:
                    ready.set()
        except BaseExceptionGroup as group:
            leaves = group_leaves(group)
            failed = [leaf for leaf in leaves if isinstance(leaf, BookieFailedError)]
            if failed:
                print(f"walkit sandbox: {failed[0]}", file=out, flush=True)
                return 1
            if all(isinstance(leaf, WalkitError) for leaf in leaves):
                raise leaves[0] from None  # one clear error, not a group
            raise
        finally:
            with anyio.CancelScope(shield=True):
                await _stop_all([s.child for s in supervisors if s.child is not None])
    return 0


async def _stop_on_signal(
    signals: AsyncIterator[int], scope: anyio.CancelScope, out: TextIO
) -> None:
    async for _ in signals:
        print("walkit sandbox: stopping", file=out, flush=True)
        scope.cancel()
        return


async def _stop_all(children: list[Child]) -> None:
    for child in children:
        child.send_signal(signal.SIGTERM)
    with anyio.move_on_after(15):
        for child in children:
            await child.wait()
    for child in children:
        if child.returncode is None:
            child.send_signal(signal.SIGKILL)
            await child.wait()
        await child.aclose()
