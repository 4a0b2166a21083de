"""Path rules shared by every driver (ZooKeeper's, minus what we never need)."""

from __future__ import annotations

from walkit.errors import InvalidArgumentError
from walkit.metadata._store import MAX_VALUE_SIZE

ROOT = "/"
#: The largest id a counter hands out (ids are positive 64-bit signed integers).
MAX_ID = 2**63 - 1


def check_path(path: object) -> str:
    """Return ``path`` if it is absolute, ``/``-separated, without empty, ``.`` or ``..`` parts."""
    if not isinstance(path, str):
        raise InvalidArgumentError(f"metadata path must be a string, not {type(path).__name__}")
    if path == ROOT:
        return path
    if not path.startswith("/") or path.endswith("/"):
        raise InvalidArgumentError(
            f"bad metadata path {path!r}: must start with '/' and not end with '/'"
        )
    for part in path[1:].split("/"):
        check_name(part, what=f"path {path!r}")
    return path


def check_name(name: object, *, what: str = "node name") -> str:
    """Return ``name`` if it is a valid single path component."""
    if not isinstance(name, str):
        raise InvalidArgumentError(f"{what}: name must be a string, not {type(name).__name__}")
    if name in ("", ".", "..") or "/" in name or "\x00" in name:
        raise InvalidArgumentError(f"bad metadata {what}: component {name!r} is not allowed")
    return name


def check_value(value: object) -> bytes:
    """Return ``value`` as bytes if it is bytes-like and small enough."""
    if not isinstance(value, bytes | bytearray | memoryview):
        raise InvalidArgumentError(f"metadata value must be bytes, not {type(value).__name__}")
    data = bytes(value)
    if len(data) > MAX_VALUE_SIZE:
        raise InvalidArgumentError(
            f"metadata value of {len(data)} bytes is over the limit of {MAX_VALUE_SIZE}"
        )
    return data


def check_version(version: object, *, allow_none: bool = False) -> int | None:
    if version is None and allow_none:
        return None
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        raise InvalidArgumentError(f"version must be a non-negative int, not {version!r}")
    return version


def parent_of(path: str) -> str:
    head, _, _ = path.rpartition("/")
    return head or ROOT


def name_of(path: str) -> str:
    return path.rpartition("/")[2]


def join(parent: str, name: str) -> str:
    return f"/{name}" if parent == ROOT else f"{parent}/{name}"


def ancestors(path: str) -> list[str]:
    """Proper ancestors of ``path`` from the top down, without the root."""
    out: list[str] = []
    current = parent_of(path)
    while current != ROOT:
        out.append(current)
        current = parent_of(current)
    out.reverse()
    return out


def check_id_value(value: object) -> int:
    """Return ``value`` if it is a value an id counter can hold (0 to :data:`MAX_ID`)."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_ID:
        raise InvalidArgumentError(f"an id counter holds an int from 0 to 2**63-1, not {value!r}")
    return value
