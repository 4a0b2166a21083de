"""The KV state machine of examples/kv_state.py: deterministic apply, compare-and-set on the
position of a key's last write, snapshots that round-trip (no I/O)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walkit import LogPosition

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from kv_state import KEY_OVERHEAD, KVState, command, decode_value, encode_value


def pos(seq: int, entry: int, slot: int = 0) -> LogPosition:
    return LogPosition(seq, entry, slot)


def test_set_get_delete() -> None:
    s = KVState()
    assert s.apply(command("set", "a", "1"), pos(1, 0)) == ("ok", None, "1:0:0")
    assert s.apply(command("set", "a", "2"), pos(1, 0, 1)) == ("ok", "1", "1:0:1")
    assert s.get("a") == ("2", "1:0:1")
    assert s.apply(command("delete", "a"), pos(1, 2)) == ("ok", "2", "1:2:0")
    assert s.apply(command("delete", "a"), pos(1, 3)) == ("absent", None, "1:3:0")
    assert s.get("a") is None


def test_compare_and_set_is_decided_at_apply() -> None:
    s = KVState()
    s.apply(command("set", "k", "v1"), pos(1, 0))
    # Two writers read position 1:0:0; the first to be applied wins, the second is refused.
    assert s.apply(command("set", "k", "a", expect="1:0:0"), pos(1, 1))[0] == "ok"
    assert s.apply(command("set", "k", "b", expect="1:0:0"), pos(1, 2)) == (
        "mismatch",
        "1:1:0",
        "1:2:0",
    )
    assert s.get("k") == ("a", "1:1:0")
    # A version written before record sets ("1:1") names the same position.
    assert s.apply(command("set", "k", "c", expect="1:1"), pos(1, 2, 1))[0] == "ok"
    assert s.apply(command("set", "k", "d", expect="junk"), pos(1, 2, 2))[0] == "mismatch"
    # An absent key never matches.
    assert s.apply(command("set", "x", "v", expect="1:0"), pos(1, 3)) == (
        "mismatch",
        None,
        "1:3:0",
    )
    assert s.get("x") is None


def test_replicas_applying_the_same_log_agree_and_snapshots_round_trip() -> None:
    log = [
        command("set", f"k{i % 7}", f"v{i}", expect=None if i % 3 else f"1:{i - 3}")
        for i in range(50)
    ] + [command("delete", "k3")]
    a, b = KVState(), KVState()
    for i, cmd in enumerate(log):
        assert a.apply(cmd, pos(1, i)) == b.apply(cmd, pos(1, i))
    assert a.data == b.data
    c = KVState()
    c.restore(a.snapshot_bytes())
    assert c.data == a.data
    # A snapshot of the first version of the example (plain values) still restores.
    c.restore(b'{"old": "value"}')
    assert c.get("old") == ("value", "earliest")


def test_any_bytes_round_trip_through_a_command() -> None:
    value = bytes(range(256)) + "é".encode()
    s = KVState()
    s.apply(command("set", "b", encode_value(value)), pos(1, 0))
    found = s.get("b")
    assert found is not None and decode_value(found[0]) == value


@given(
    key=st.text(min_size=1),
    value=st.one_of(st.none(), st.text(), st.binary().map(encode_value)),
    expect=st.one_of(st.none(), st.text()),
)
def test_commands_are_the_bytes_json_dumps_gives(
    key: str, value: str | None, expect: str | None
) -> None:
    """Commands are put together by hand, for speed: they stay byte for byte what the log
    has always held (json.dumps of the command), lone surrogates and all."""
    obj = {"op": "set", "key": key}
    if value is not None:
        obj["value"] = value
    if expect is not None:
        obj["expect"] = expect
    assert command("set", key, value, expect) == json.dumps(obj).encode()
    assert command("delete", key) == json.dumps({"op": "delete", "key": key}).encode()


def test_unknown_operation() -> None:
    with pytest.raises(ValueError, match="unknown operation"):
        KVState().apply(command("frobnicate", "k"), pos(1, 0))


def test_the_size_counts_the_bytes_of_keys_and_values() -> None:
    """What the service's quota bounds: exact through sets, overwrites, deletes and restores,
    for binary and UTF-8 values alike, with a fixed cost per key (tiny keys are not free)."""
    s = KVState()
    o = KEY_OVERHEAD
    binary = encode_value(bytes(range(256)))
    text = encode_value("é€".encode())  # 5 bytes, 2 characters
    assert s.growth("ké", binary) == 3 + 256 + o
    s.apply(command("set", "ké", binary), pos(1, 0))
    s.apply(command("set", "t", text), pos(1, 1))
    assert s.size == 3 + 256 + 1 + 5 + 2 * o
    assert s.growth("t", encode_value(b"xy")) == -3
    s.apply(command("set", "t", encode_value(b"xy")), pos(1, 2))
    assert s.size == 3 + 256 + 1 + 2 + 2 * o
    s.apply(command("set", "t", "never", expect="9:9"), pos(1, 3))  # refused: no change
    assert s.size == 3 + 256 + 1 + 2 + 2 * o
    restored = KVState()
    restored.restore(s.snapshot_bytes())
    assert restored.size == s.size
    s.apply(command("delete", "ké"), pos(1, 4))
    s.apply(command("delete", "gone"), pos(1, 5))
    assert s.size == 1 + 2 + o
    s.apply(command("delete", "t"), pos(1, 6))
    assert s.size == 0 and not s.data


def test_a_snapshot_is_the_state_when_it_was_taken_in_chunks() -> None:
    """The chunks are encoded later, while applies go on: they hold the state as it was when
    ``snapshot`` was called, and join into one JSON object that restores it."""
    import kv_state

    s = KVState()
    n = 2 * kv_state.SNAPSHOT_KEYS + 7
    for i in range(n):
        s.apply(command("set", f"k{i}", f"v{i}"), pos(1, i))
    taken = dict(s.data)
    chunks = s.snapshot()
    s.apply(command("set", "k0", "changed"), pos(2, 0))
    s.apply(command("delete", "k1"), pos(2, 1))
    s.apply(command("set", "new", "x"), pos(2, 2))
    parts = list(chunks)
    assert len(parts) == 3 + 2  # the braces, and three chunks of keys
    restored = KVState()
    restored.restore(b"".join(parts))
    assert restored.data == taken
    empty = KVState()
    assert json.loads(empty.snapshot_bytes()) == {}
