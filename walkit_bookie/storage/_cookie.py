"""Cookies: which bookie and which cluster a set of data directories belongs to.

Every data directory holds the same ``COOKIE`` (JSON: bookie id, cluster instance id, the list
of data directories). At start the bookie compares them with its configuration, so a wiped,
swapped, foreign or half-missing directory is refused instead of silently serving a ledger
with holes in it. A brand-new set of empty directories is initialized.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import final

import attrs

from walkit.errors import BookieIOError, CookieError
from walkit.shared import get_logger

log = get_logger(__name__)

COOKIE_FILE = "COOKIE"
LAYOUT_VERSION = 1


@final
@attrs.frozen
class Cookie:
    bookie_id: str
    instance_id: str
    data_dirs: tuple[str, ...]
    layout_version: int = LAYOUT_VERSION

    def to_bytes(self) -> bytes:
        return json.dumps(
            {
                "layout_version": self.layout_version,
                "bookie_id": self.bookie_id,
                "instance_id": self.instance_id,
                "data_dirs": list(self.data_dirs),
            },
            indent=1,
        ).encode()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Cookie:
        try:
            obj = json.loads(data)
            cookie = cls(
                str(obj["bookie_id"]),
                str(obj["instance_id"]),
                tuple(str(d) for d in obj["data_dirs"]),
                int(obj["layout_version"]),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise CookieError(f"cookie {where} is unreadable: {exc}") from exc
        if cookie.layout_version != LAYOUT_VERSION:
            raise CookieError(
                f"cookie {where} has layout version {cookie.layout_version}; "
                f"this bookie knows {LAYOUT_VERSION}"
            )
        return cookie


#: A bookie's data (entries, ledger keys, cookies) is for its own user only.
DIR_MODE = 0o700
FILE_MODE = 0o600


def make_private(path: Path) -> None:
    """Take group and other permissions off a data dir the bookie's user owns (it holds
    every ledger's entries and master keys)."""
    st = path.stat()
    if st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(path, stat.S_IMODE(st.st_mode) & 0o700)
        log.info("data_dir_made_private", path=str(path))


def write_durably(path: Path, data: bytes) -> None:
    """Write a small file atomically: temp file, fsync, rename, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def prepare_dir(path: Path) -> None:
    """Create a data dir if missing and check it is a writable directory (clear error if not)."""
    try:
        if path.exists() and not path.is_dir():
            raise BookieIOError(f"data dir {path} exists and is not a directory")
        path.mkdir(parents=True, exist_ok=True, mode=DIR_MODE)
        make_private(path)
        probe = path / ".write-probe"
        fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            os.write(fd, b"probe")
            os.fsync(fd)
        finally:
            os.close(fd)
        probe.unlink()
    except BookieIOError:
        raise
    except OSError as exc:
        raise BookieIOError(f"data dir {path} is not a writable directory: {exc}") from exc


def read_cookie(path: Path) -> Cookie | None:
    file = path / COOKIE_FILE
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None
    except OSError as exc:
        raise BookieIOError(f"cannot read cookie {file}: {exc}") from exc
    return Cookie.from_bytes(data, str(file))


def recorded_cookie(dirs: Sequence[Path]) -> Cookie | None:
    """The cookie of the first data dir that has one (None when none has)."""
    for d in dirs:
        try:
            cookie = read_cookie(d)
        except (CookieError, BookieIOError):
            continue
        if cookie is not None:
            return cookie
    return None


def _has_content(path: Path, layout: Sequence[str]) -> bool:
    """Anything in ``path`` besides the (empty) layout directories a fresh start creates."""
    try:
        for p in path.iterdir():
            if p.name == ".write-probe" or p.name.endswith(".tmp"):
                continue
            if p.name in layout and p.is_dir() and not any(p.iterdir()):
                continue
            return True
    except OSError:
        return False
    return False


def check_or_create(
    dirs: Sequence[Path],
    bookie_id: str,
    instance_id: str,
    *,
    instance_id_is_known: bool,
    required: dict[Path, Sequence[str]],
) -> Cookie:
    """Verify the cookies of ``dirs`` against this bookie, or initialize brand-new dirs.

    ``instance_id_is_known``: the id comes from the metadata store and must match; otherwise
    ``instance_id`` is only used to initialize new dirs. ``required`` names, per directory,
    the subdirectories an initialized directory must contain (created for new dirs; a missing
    one later means the directory was wiped).
    Raises CookieError saying what is wrong.
    """
    for d in dirs:
        prepare_dir(d)
    names = tuple(str(d) for d in dirs)
    cookies = {d: read_cookie(d) for d in dirs}
    present = {d: c for d, c in cookies.items() if c is not None}
    if not present:
        busy = [str(d) for d in dirs if _has_content(d, required.get(d, ()))]
        if busy:
            raise CookieError(
                f"data dir {busy[0]} is not empty but has no cookie: it is not a walkit bookie "
                "directory, or its cookie was removed; refusing to use it"
            )
        cookie = Cookie(bookie_id, instance_id, names)
        for d, needed in required.items():
            for name in needed:
                (d / name).mkdir(exist_ok=True, mode=DIR_MODE)
        for d in dirs:
            write_durably(d / COOKIE_FILE, cookie.to_bytes())
        log.info("cookie_created", bookie_id=bookie_id, instance_id=instance_id, dirs=names)
        return cookie
    missing = [str(d) for d in dirs if cookies[d] is None]
    first_dir, first = next(iter(present.items()))
    if missing:
        raise CookieError(
            f"data dir {missing[0]} has no cookie while {first_dir} belongs to bookie "
            f"{first.bookie_id}: {missing[0]} was wiped or replaced; refusing to start "
            "(restore the directory, or wipe all data dirs to start this bookie afresh)"
        )
    for d, c in present.items():
        if c != first:
            raise CookieError(
                f"data dirs {first_dir} and {d} have different cookies "
                f"({first.bookie_id}/{first.instance_id} vs {c.bookie_id}/{c.instance_id}): "
                "a directory from another bookie was mounted here"
            )
    if first.bookie_id != bookie_id:
        raise CookieError(
            f"data dirs belong to bookie {first.bookie_id}, not to {bookie_id}: "
            "start it with that address, or point this bookie at its own dirs"
        )
    if first.data_dirs != names:
        raise CookieError(
            f"the cookie lists data dirs {list(first.data_dirs)} but the bookie was started "
            f"with {list(names)}: a directory was added, removed or reordered"
        )
    if instance_id_is_known and first.instance_id != instance_id:
        raise CookieError(
            f"data dirs belong to cluster {first.instance_id}, but the metadata store is "
            f"cluster {instance_id}: these dirs come from another cluster"
        )
    for d, needed in required.items():
        for name in needed:
            if not (d / name).exists():
                raise CookieError(
                    f"data dir {d} has a cookie but no {name!r}: its contents were wiped or "
                    "partly restored; refusing to start"
                )
    return first
