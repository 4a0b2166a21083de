"""LogPosition: total order, hashing, str/parse round trips, sentinels, bad input."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from walkit import LogPosition
from walkit._core.log_position import MAX_COMPONENT, position
from walkit.errors import InvalidArgumentError

components = st.integers(0, MAX_COMPONENT)
positions = st.builds(LogPosition, components, components, components)


@given(positions)
def test_str_parse_round_trip(pos: LogPosition) -> None:
    assert LogPosition.parse(str(pos)) == pos
    assert position(str(pos)) == pos
    assert hash(LogPosition.parse(str(pos))) == hash(pos)


@given(positions, positions)
def test_order_is_by_ledger_then_entry_then_slot(a: LogPosition, b: LogPosition) -> None:
    def key(p: LogPosition) -> tuple[int, int, int]:
        return (p.ledger_seq, p.entry_id, p.slot)

    assert (a < b) == (key(a) < key(b))
    assert (a == b) == (key(a) == key(b))
    assert LogPosition.EARLIEST <= a <= LogPosition.LATEST


@given(st.lists(positions, max_size=30))
def test_sorting_and_sets(items: list[LogPosition]) -> None:
    ordered = sorted(items)
    assert all(x <= y for x, y in itertools.pairwise(ordered))
    assert len(set(items)) == len({(p.ledger_seq, p.entry_id, p.slot) for p in items})


def test_examples() -> None:
    assert str(LogPosition(3, 17, 2)) == "3:17:2"
    assert str(LogPosition(3, 17)) == "3:17:0"
    assert LogPosition.parse("3:17:2") == LogPosition(3, 17, 2)
    assert LogPosition.parse("3:17") == LogPosition(3, 17, 0)  # written before record sets
    assert LogPosition(2, 999) < LogPosition(3, 0) < LogPosition(3, 0, 1) < LogPosition(3, 1)
    assert str(LogPosition.EARLIEST) == "earliest"
    assert str(LogPosition.LATEST) == "latest"
    assert LogPosition.parse("earliest") is LogPosition.EARLIEST
    assert LogPosition.parse("latest") is LogPosition.LATEST
    assert LogPosition.parse("0:0") == LogPosition.EARLIEST
    assert LogPosition(1, 0) > LogPosition.EARLIEST
    assert LogPosition(3, 4).next() == LogPosition(3, 4, 1)
    assert LogPosition(3, 4, 7).entry_start() == LogPosition(3, 4)
    assert repr(LogPosition(3, 4)) == "LogPosition('3:4:0')"
    assert {LogPosition(1, 2): "x"}[LogPosition.parse("1:2:0")] == "x"


@pytest.mark.parametrize(
    "text",
    [
        "",
        "3",
        "3:",
        ":3",
        "3:4:5:6",
        "3:4:",
        "3::5",
        "1:2:-1",
        "-1:0",
        "1:-1",
        "+1:2",
        " 1:2",
        "1:2 ",
        "1.0:2",
        "a:b",
        "EARLIEST",
        "Latest",
        "0x1:2",
        "\u0661:\u0662",  # non-ASCII digits
        "99999999999999999999:0",
        f"{MAX_COMPONENT + 1}:0",
        f"0:{MAX_COMPONENT + 1}",
        f"0:0:{MAX_COMPONENT + 1}",
    ],
)
def test_bad_strings_raise_invalid_argument(text: str) -> None:
    with pytest.raises(InvalidArgumentError):
        LogPosition.parse(text)


@pytest.mark.parametrize("value", [None, 3, b"1:2", 1.5, ["1:2"]])
def test_parse_refuses_non_strings(value: object) -> None:
    with pytest.raises(InvalidArgumentError):
        LogPosition.parse(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "args",
    [(-1, 0), (0, -1), (MAX_COMPONENT + 1, 0), (True, 0), (1.0, 2), (1, 2, -1), (1, 2, None)],
)
def test_bad_components(args: tuple[object, ...]) -> None:
    with pytest.raises(InvalidArgumentError):
        LogPosition(*args)  # type: ignore[arg-type]


def test_not_comparable_with_other_types() -> None:
    with pytest.raises(TypeError):
        assert LogPosition(1, 2) < (1, 3)  # type: ignore[operator]
    assert LogPosition(1, 2) != (1, 2)  # type: ignore[comparison-overlap]


def test_no_position_after_the_largest_slot() -> None:
    with pytest.raises(InvalidArgumentError):
        LogPosition(1, 2, MAX_COMPONENT).next()
