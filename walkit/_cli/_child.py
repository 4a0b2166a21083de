"""Child processes that die with their parent, for ``walkit sandbox``.

Linux's parent-death signal (``PR_SET_PDEATHSIG``) is tied to the *thread* that forked the
child, not to the parent process: the child gets the signal when that thread exits, wherever the
signal was set (before or after ``exec``). ``anyio.open_process`` on trio's backend forks from a
worker thread of trio's thread cache, and an idle worker exits after 10 s, so a bookie started
that way is killed 10 s later. Children here are therefore forked with :class:`subprocess.Popen`
from the thread that runs the event loop (the main thread, which lives as long as the process),
on any backend, and set the signal themselves first thing (:data:`PARENT_GUARD`), then check
that their parent is still the one that started them, since the parent may have died between
the fork and that point. Their output is read and their exit awaited through the loop
(``anyio.wait_readable`` on the pipe and on a pidfd), so no thread is involved at all: asyncio's
own subprocesses would spend a waiting thread per child on Python 3.11.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncGenerator, Mapping, Sequence
from typing import final

import anyio
from anyio.lowlevel import checkpoint

#: Python code a child runs before anything else, formatted with ``parent`` (the parent's pid):
#: SIGTERM when the forking thread of the parent dies; exit at once if the parent is already gone.
PARENT_GUARD = (
    "import os, sys\n"
    "if sys.platform == 'linux':\n"
    "    import ctypes, signal\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "if os.getppid() != {parent}:\n"
    "    sys.exit('walkit: the parent process {parent} is gone; not starting')\n"
)


def guarded_python(code: str, parent: int | None = None) -> list[str]:
    """``python -c CODE`` whose process dies with ``parent`` (default: this process)."""
    guard = PARENT_GUARD.format(parent=os.getpid() if parent is None else parent)
    return [sys.executable, "-c", guard + code]


@final
class Child:
    """A child process with its stdout and stderr merged into one pipe, read line by line."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        assert popen.stdout is not None
        self._popen = popen
        self._fd: int | None = os.dup(popen.stdout.fileno())
        os.set_blocking(self._fd, False)
        popen.stdout.close()

    @classmethod
    def spawn(cls, command: Sequence[str], env: Mapping[str, str]) -> Child:
        """Start ``command`` from the calling thread (the event loop's thread: see above).

        The child gets its own process group, so a Ctrl-C in the terminal reaches only the
        parent, which then stops its children in order.
        """
        popen = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(env),
            process_group=0,
        )
        return cls(popen)

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    def send_signal(self, signum: int) -> None:
        if self._popen.poll() is None:
            self._popen.send_signal(signum)

    async def lines(self) -> AsyncGenerator[str, None]:
        """The child's output, line by line, until it closes its end of the pipe."""
        buffer = b""
        while True:
            chunk = await self._read()
            if not chunk:
                if buffer:
                    yield buffer.decode(errors="replace")
                return
            buffer += chunk
            *complete, buffer = buffer.split(b"\n")
            for line in complete:
                yield line.decode(errors="replace")

    async def _read(self) -> bytes:
        """The next bytes of the pipe; b"" at its end."""
        while True:
            if self._fd is None:
                raise anyio.ClosedResourceError
            await anyio.wait_readable(self._fd)  # always: a checkpoint, however busy the child
            try:
                return os.read(self._fd, 65536)
            except BlockingIOError:
                continue

    async def wait(self) -> int:
        """Wait for the child to exit and reap it; its exit code (negative: killed by a signal)."""
        code = self._popen.poll()
        if code is not None:
            return code
        if sys.platform == "linux":
            try:
                pidfd = os.pidfd_open(self._popen.pid)
            except ProcessLookupError:
                return self._popen.wait()
            try:
                await anyio.wait_readable(pidfd)
            finally:
                anyio.notify_closing(pidfd)
                os.close(pidfd)
            return self._popen.wait()
        return await anyio.to_thread.run_sync(  # type: ignore[unreachable,unused-ignore]
            self._popen.wait, abandon_on_cancel=True
        )

    async def aclose(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            anyio.notify_closing(fd)
            os.close(fd)
        await checkpoint()
