"""Wake-ups when a file is written, from Linux inotify: what lets sqlite watches sleep.

Every write to a sqlite database in WAL mode, from any process, is a ``write()`` to its
``-wal`` file (or, at a checkpoint, to the database file), which inotify reports on the
directory. So a watch poller can sleep until the file changes instead of polling it 20 times a
second. One inotify instance and one system task per database file and event loop, shared by all
the stores of the process (the kernel allows a user only a few instances); each store
subscribes and gets a level-triggered "something changed" flag.

Where inotify is not there (not Linux, no instance left) :func:`subscribe` returns None and the
store polls on its timer as before. Events can be lost (the queue overflows: reported as a
change) and a watched directory can vanish (the subscription turns ``broken``), so the pollers
also look on a slow timer; see ``_sqlite.py``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys
from typing import Final, final

import anyio
from anyio.lowlevel import RunVar

from walkit._logging import get_logger
from walkit._loop import current_loop

__all__ = ["FileChanges", "subscribe"]

logger = get_logger(__name__)

_IN_NONBLOCK: Final = os.O_NONBLOCK
_IN_CLOEXEC: Final = 0o2000000
_IN_MODIFY: Final = 0x2
_IN_MOVED_TO: Final = 0x80
_IN_CREATE: Final = 0x100
_IN_DELETE: Final = 0x200
_IN_Q_OVERFLOW: Final = 0x4000
_IN_IGNORED: Final = 0x8000
_MASK: Final = _IN_MODIFY | _IN_MOVED_TO | _IN_CREATE | _IN_DELETE
_EVENT: Final = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.inotify_init1  # noqa: B018 (present?)
    except (OSError, AttributeError):
        return None
    return libc


_LIBC: Final = _libc()


def changed_names(buffer: bytes, prefix: bytes) -> tuple[bool, bool]:
    """Parse inotify events: (a file named ``prefix...`` changed or events were lost, the
    watch is gone)."""
    changed = gone = False
    at = 0
    while at + _EVENT.size <= len(buffer):
        _wd, mask, _cookie, length = _EVENT.unpack_from(buffer, at)
        name = buffer[at + _EVENT.size : at + _EVENT.size + length].rstrip(b"\0")
        at += _EVENT.size + length
        if mask & _IN_Q_OVERFLOW:
            changed = True
        elif mask & _IN_IGNORED:
            gone = changed = True
        elif name.startswith(prefix):
            changed = True
    return changed, gone


@final
class FileChanges:
    """One store's subscription: :meth:`wait` returns once the file changed since the last
    :meth:`wait` returned (at once if it did meanwhile)."""

    def __init__(self, hub: _Hub) -> None:
        self._hub = hub
        self._changed = anyio.Event()

    @property
    def broken(self) -> bool:
        """The watch is gone (the directory was removed, or reading it failed): poll instead."""
        return self._hub.broken

    def notify(self) -> None:
        self._changed.set()

    async def wait(self) -> None:
        await self._changed.wait()
        self._changed = anyio.Event()  # no checkpoint since the wake: nothing is missed

    def seen(self) -> None:
        """The caller looks now, and will look again later: the changes so far need not wake
        its next :meth:`wait` (one write is several inotify events, which would each start
        another round of looks)."""
        if self._changed.is_set():
            self._changed = anyio.Event()

    def close(self) -> None:
        self._hub.unsubscribe(self)


@final
class _Hub:
    """The inotify instance of one file in one event loop, and the task that reads it."""

    def __init__(self, key: str, fd: int, prefix: bytes) -> None:
        self.key = key
        self.fd = fd
        self.prefix = prefix
        self.subscribers: set[FileChanges] = set()
        self.broken = False

    def unsubscribe(self, sub: FileChanges) -> None:
        self.subscribers.discard(sub)
        if not self.subscribers and self.fd >= 0:
            try:
                hubs = _HUBS.get()
            except LookupError:
                hubs = {}
            if hubs.get(self.key) is self:
                del hubs[self.key]
            fd, self.fd = self.fd, -1
            anyio.notify_closing(fd)
            os.close(fd)

    async def run(self) -> None:
        while self.fd >= 0:
            try:
                await anyio.wait_readable(self.fd)
                changed, gone = changed_names(self._drain(), self.prefix)
            except (anyio.ClosedResourceError, OSError) as exc:
                if self.fd < 0:
                    return  # closed by the last unsubscribe
                logger.warning("metadata_file_watch_failed", file=self.key, error=repr(exc))
                changed, gone = True, True
            if gone:
                self.broken = True
            if changed:
                for sub in list(self.subscribers):
                    sub.notify()
            if gone:
                return

    def _drain(self) -> bytes:
        chunks = []
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


_HUBS: RunVar[dict[str, _Hub]] = RunVar("walkit_file_changes")


def subscribe(path: str) -> FileChanges | None:
    """Changes to the file ``path`` (and its ``-wal``/``-journal`` companions), or None where
    inotify cannot tell (then poll)."""
    try:
        hubs = _HUBS.get()
    except LookupError:
        hubs = {}
        _HUBS.set(hubs)
    key = os.path.abspath(path)
    hub = hubs.get(key)
    if hub is None or hub.broken:
        hub = _open_hub(key)
        if hub is None:
            return None
        hubs[key] = hub
        current_loop().spawn_system_task(hub.run, name=f"walkit-file-changes {key}")
    sub = FileChanges(hub)
    hub.subscribers.add(sub)
    return sub


def _open_hub(key: str) -> _Hub | None:
    if _LIBC is None:
        return None
    fd = _LIBC.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
    if fd < 0:
        err = ctypes.get_errno()
        logger.debug("metadata_file_watch_unavailable", file=key, error=errno.errorcode.get(err))
        return None
    directory, name = os.path.split(key)
    if _LIBC.inotify_add_watch(fd, os.fsencode(directory or "."), _MASK) < 0:
        err = ctypes.get_errno()
        os.close(fd)
        logger.debug("metadata_file_watch_unavailable", file=key, error=errno.errorcode.get(err))
        return None
    return _Hub(key, fd, os.fsencode(name))
