"""The KV state machine: a map of key -> (value, position of its last write), and its commands.

Commands are JSON; ``apply`` is deterministic, so every replica that applies the same log ends
with the same map. A compare-and-set (``expect``) is decided here, at apply time, against the
position of the key's last write, so concurrent writers cannot both win.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable, Iterator
from typing import Any, final

import walkit


def encode_value(value: bytes) -> str:
    """Any bytes as a JSON-able str (UTF-8, with undecodable bytes as lone surrogates)."""
    return value.decode("utf-8", "surrogateescape")


def decode_value(value: str) -> bytes:
    return value.encode("utf-8", "surrogateescape")


#: What the map costs per key beyond its key and value bytes (CPython: the dict slot, the
#: tuple, the position and the str headers; measured at ~218 bytes). Counted against the
#: quota, so that many tiny keys cannot pass it by their number.
KEY_OVERHEAD = 200


def stored_bytes(text: str) -> int:
    """The bytes a key or value stands for (exact for what :func:`encode_value` made)."""
    if text.isascii():  # (most values: no encoding needed to count them)
        return len(text)
    try:
        return len(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:  # a lone surrogate that no request body can make
        return len(text.encode("utf-8", "surrogatepass"))


#: A str as ``json.dumps`` writes it (quoted, escaped to ASCII), in C.
_json_str: Callable[[str], str] = json.encoder.encode_basestring_ascii


def command(op: str, key: str, value: str | None = None, expect: str | None = None) -> bytes:
    """The command, as JSON: the bytes of ``json.dumps({"op": op, "key": key, ...})``, put
    together directly (one command per write: the encoder's generality costs more than the
    rest of a small write's handling)."""
    parts = ['{"op": ', _json_str(op), ', "key": ', _json_str(key)]
    if value is not None:
        parts += [', "value": ', _json_str(value)]
    if expect is not None:
        parts += [', "expect": ', _json_str(expect)]
    parts.append("}")
    return "".join(parts).encode()


@final
class KVState:
    """The state machine. ``apply`` returns ``(outcome, detail, position)``:

    - set: ``("ok", previous value or None)``, or ``("mismatch", current position or None)``
      when ``expect`` is not the position of the key's last write;
    - delete: ``("ok", previous value)`` or ``("absent", None)``;

    and the position of the command (as a str).
    """

    def __init__(self) -> None:
        self.data: dict[str, tuple[str, str]] = {}
        #: Bytes of all keys and values, plus KEY_OVERHEAD per key (what the quota bounds).
        self.size = 0

    def get(self, key: str) -> tuple[str, str] | None:
        return self.data.get(key)

    def apply(self, cmd: bytes, position: walkit.LogPosition) -> Any:
        op = json.loads(cmd)
        kind = op["op"]
        key = op["key"]
        data = self.data
        current = data.get(key)
        at = str(position)
        if kind == "set":
            expect = op.get("expect")
            if expect is not None and (current is None or not _same_version(current[1], expect)):
                return ("mismatch", None if current is None else current[1], at)
            value = op["value"]
            data[key] = (value, at)
            if current is None:
                self.size += _key_cost(key) + stored_bytes(value)
                return ("ok", None, at)
            self.size += stored_bytes(value) - stored_bytes(current[0])
            return ("ok", current[0], at)
        if kind == "delete":
            if current is None:
                return ("absent", None, at)
            del data[key]
            self.size -= _key_cost(key) + stored_bytes(current[0])
            return ("ok", current[0], at)
        raise ValueError(f"unknown operation at {position}: {op!r}")

    def snapshot(self) -> Iterator[bytes]:
        """The map as one JSON object, in chunks of ``SNAPSHOT_KEYS`` keys, encoded from a copy
        of its items taken now: the leader encodes it a chunk at a time between its other work
        (50,000 keys at once held its event loop ~50 ms, the service's p99)."""
        return _json_object_chunks(list(self.data.items()))

    def snapshot_bytes(self) -> bytes:
        """:meth:`snapshot`, whole."""
        return b"".join(self.snapshot())

    def restore(self, data: bytes) -> None:
        loaded = json.loads(data)
        self.data = {
            # Snapshots of the first version of this example held plain values.
            k: (v, "earliest") if isinstance(v, str) else (v[0], v[1])
            for k, v in loaded.items()
        }
        self.size = sum(_key_cost(k) + stored_bytes(v[0]) for k, v in self.data.items())

    def growth(self, key: str, value: str) -> int:
        """How many bytes setting ``key`` to ``value`` adds (negative: it frees some)."""
        current = self.data.get(key)
        if current is None:
            return _key_cost(key) + stored_bytes(value)
        return stored_bytes(value) - stored_bytes(current[0])


#: Keys per snapshot chunk (~270 KB of JSON at 100 B values).
SNAPSHOT_KEYS = 2000


def _json_object_chunks(items: list[tuple[str, tuple[str, str]]]) -> Iterator[bytes]:
    yield b"{"
    for start in range(0, len(items), SNAPSHOT_KEYS):
        part = json.dumps(dict(items[start : start + SNAPSHOT_KEYS]))[1:-1]
        yield (part if start == 0 else "," + part).encode()
    yield b"}"


def _key_cost(key: str) -> int:
    return stored_bytes(key) + KEY_OVERHEAD


def _same_version(stored: str, expect: object) -> bool:
    """Whether ``expect`` names the version ``stored`` (positions compare by value, so
    "3:17" from a log written before record sets equals "3:17:0")."""
    if not isinstance(expect, str):
        return False
    try:
        return walkit.LogPosition.parse(stored) == walkit.LogPosition.parse(expect)
    except walkit.errors.InvalidArgumentError:
        return False
