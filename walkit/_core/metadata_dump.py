"""Metadata dumps: the whole metadata tree of a cluster in one checksummed, versioned file.

What ``walkit metadata export`` writes and ``walkit metadata import`` reads: every persistent
node of a metadata store (bookies' cookies, ledgers, logs, under-replication markers and
settings, the cluster's instance id and layout, whatever later versions add) and the id
counters, independent of the driver it came from, so that a cluster moves from one store to
another (sqlite to ZooKeeper) or is backed up and restored. UTF-8 JSON lines, one object per
line, in this order (version 1)::

    {"format": "walkit-metadata-dump", "version": 1, "walkit": "0.2.0", "source": "sqlite"}
    {"path": "/bookies/cookies/127.0.0.1:3181", "value": "<base64>"}    one per node
    {"counter": "ledger", "value": 17}                                   one per id counter
    {"end": {"nodes": 1234, "counters": 1, "sha256": "<hex>"}}

Nodes come in path order, parents before their children (the root is not a node of the dump;
its children are). ``source`` is the driver the dump was taken from and ``walkit`` the version
that wrote it, for people; neither changes how it is read. ``sha256`` is the digest of every
byte before the end line: a dump that was cut short has no end line, and one whose bytes
changed fails the digest, before anything of it is used.

Pure code: the metadata layer walks and fills stores (``walkit.metadata``); this only encodes
and decodes.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any, Final, final

import attrs

from walkit.errors import InvalidArgumentError

__all__ = ["DUMP_FORMAT", "DUMP_VERSION", "MetadataDump", "decode_dump", "encode_dump"]

#: The ``format`` of a dump's first line: what says a file is a dump at all.
DUMP_FORMAT: Final = "walkit-metadata-dump"
#: The version this walkit writes.
DUMP_VERSION: Final = 1


@final
@attrs.frozen
class MetadataDump:
    """A decoded dump: the persistent nodes (path, value) in path order, and the id counters
    (name -> the last id handed out)."""

    nodes: tuple[tuple[str, bytes], ...]
    counters: Mapping[str, int]
    #: The driver the dump was taken from ("sqlite", "zk", "memory").
    source: str
    #: The walkit version that wrote it.
    walkit_version: str
    version: int = DUMP_VERSION


def _sort_key(path: str) -> list[str]:
    # By component, so that a parent comes right before its children ("/a", "/a/b", "/a-b").
    return path.split("/")


def encode_dump(dump: MetadataDump) -> bytes:
    """The file of ``dump`` (written in :data:`DUMP_VERSION` whatever ``dump.version`` says)."""
    lines = [
        _line(
            {
                "format": DUMP_FORMAT,
                "version": DUMP_VERSION,
                "walkit": dump.walkit_version,
                "source": dump.source,
            }
        )
    ]
    for path, value in sorted(dump.nodes, key=lambda node: _sort_key(node[0])):
        lines.append(_line({"path": path, "value": base64.b64encode(value).decode("ascii")}))
    for name, last in sorted(dump.counters.items()):
        lines.append(_line({"counter": name, "value": last}))
    body = b"".join(lines)
    end = {
        "nodes": len(dump.nodes),
        "counters": len(dump.counters),
        "sha256": hashlib.sha256(body).hexdigest(),
    }
    return body + _line({"end": end})


def _line(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


def decode_dump(data: bytes, *, name: str = "dump") -> MetadataDump:
    """Decode a dump file's bytes; InvalidArgumentError, naming ``name`` and what is wrong,
    for anything that is not a whole, intact dump of a version this walkit reads."""
    first, _, _ = data.partition(b"\n")
    header = _header(first, name)
    version = header["version"]
    reader = _READERS.get(version) if isinstance(version, int) else None
    if reader is None:
        known = ", ".join(str(v) for v in sorted(_READERS))
        raise InvalidArgumentError(
            f"{name}: metadata dump version {version!r} is not one this walkit reads "
            f"({known}); a newer walkit wrote it: import it with that version"
        )
    return reader(data, header, name)


def _header(first: bytes, name: str) -> dict[str, Any]:
    try:
        header = json.loads(first.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        header = None
    if not isinstance(header, dict) or header.get("format") != DUMP_FORMAT:
        raise InvalidArgumentError(
            f"{name} is not a walkit metadata dump (its first line is not a "
            f"{DUMP_FORMAT} header; write one with `walkit metadata export`)"
        )
    return header


def _read_v1(data: bytes, header: dict[str, Any], name: str) -> MetadataDump:
    if not data.endswith(b"\n"):
        raise InvalidArgumentError(f"{name} is truncated: it does not end with a whole line")
    lines = data.split(b"\n")[:-1]
    try:
        end = json.loads(lines[-1].decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        end = None
    if len(lines) < 2 or not isinstance(end, dict) or not isinstance(end.get("end"), dict):
        raise InvalidArgumentError(
            f"{name} is truncated: it has no end line (after {len(lines)} lines)"
        )
    body = data[: len(data) - len(lines[-1]) - 1]
    summary = end["end"]
    if summary.get("sha256") != hashlib.sha256(body).hexdigest():
        raise InvalidArgumentError(
            f"{name} is corrupt: its sha256 does not match its content (changed or damaged "
            "since it was written)"
        )
    nodes: list[tuple[str, bytes]] = []
    counters: dict[str, int] = {}
    for number, raw in enumerate(lines[1:-1], start=2):
        _read_line(raw, number, name, nodes, counters)
    if summary.get("nodes") != len(nodes) or summary.get("counters") != len(counters):
        raise InvalidArgumentError(
            f"{name}: the end line counts {summary.get('nodes')!r} nodes and "
            f"{summary.get('counters')!r} counters, the dump holds {len(nodes)} and "
            f"{len(counters)}"
        )
    return MetadataDump(
        nodes=tuple(nodes),
        counters=counters,
        source=_text(header.get("source", ""), "source", name),
        walkit_version=_text(header.get("walkit", ""), "walkit", name),
        version=1,
    )


def _read_line(
    raw: bytes, number: int, name: str, nodes: list[tuple[str, bytes]], counters: dict[str, int]
) -> None:
    where = f"{name}, line {number}"
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidArgumentError(f"{where}: not JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise InvalidArgumentError(f"{where}: not a JSON object")
    if set(doc) == {"path", "value"}:
        path = _text(doc["path"], "path", where)
        try:
            value = base64.b64decode(_text(doc["value"], "value", where), validate=True)
        except binascii.Error:
            raise InvalidArgumentError(f"{where}: the value of {path} is not base64") from None
        nodes.append((path, value))
        return
    if set(doc) == {"counter", "value"}:
        counter = _text(doc["counter"], "counter", where)
        value = doc["value"]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise InvalidArgumentError(f"{where}: counter {counter} has value {value!r}")
        if counter in counters:
            raise InvalidArgumentError(f"{where}: counter {counter} appears twice")
        counters[counter] = value
        return
    raise InvalidArgumentError(f"{where}: neither a node nor a counter ({sorted(doc)})")


def _text(value: object, what: str, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidArgumentError(f"{where}: {what} is not a string ({value!r})")
    return value


#: A reader for every dump version this walkit reads (a new version adds one; see
#: docs/formats.md).
_READERS: Final[dict[int, Callable[[bytes, dict[str, Any], str], MetadataDump]]] = {1: _read_v1}
