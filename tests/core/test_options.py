"""Options declared once (``walkit._core.options``): the declarations, the typed keywords of
``Client.connect`` and ``Log.open`` that mirror them, and the checks made from them."""

from __future__ import annotations

import os
import subprocess
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

import walkit
from tests._zookeeper import unique_root
from walkit._core.options import (
    FRACTION,
    PORT,
    SIZE,
    SWITCH,
    Kind,
    count,
    declared,
    optional,
    read_size,
    show_size,
)
from walkit.autorecovery import AutorecoveryOptions
from walkit.errors import ConfigurationError
from walkit.ledger._options import ClientOptions, ClientOptionsDict
from walkit.log._options import LogOptions, LogOptionsDict
from walkit.metadata import forget_memory_tree
from walkit_bookie import BookieConfig

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def memory_url(request: pytest.FixtureRequest) -> Iterator[str]:
    name = unique_root(request.node.name).lstrip("/")
    yield f"memory://{name}"
    forget_memory_tree(name)


CLASSES = [BookieConfig, ClientOptions, LogOptions, AutorecoveryOptions]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_option_is_declared_with_a_kind_and_help(cls: type) -> None:
    fields = [f.name for f in attrs.fields(cls)]
    options = [(f.name, o) for f, o in declared(cls)]
    assert [name for name, _ in options] == fields
    for name, option in options:
        assert option.help and not option.help.endswith("."), name


@pytest.mark.parametrize(
    ("cls", "kwargs"),
    [(ClientOptions, ClientOptionsDict), (LogOptions, LogOptionsDict)],
    ids=["client", "log"],
)
def test_the_typed_keywords_are_the_declared_options(cls: type, kwargs: type) -> None:
    """``**options: Unpack[...Dict]`` lists the same names, each with the field's type (or,
    for an option that converts, a union that holds it: what the converter takes)."""
    fields = typing.get_type_hints(cls)
    fields.pop("option_noun")
    keywords = typing.get_type_hints(kwargs)
    assert list(keywords) == list(fields)
    assert not kwargs.__required_keys__  # type: ignore[attr-defined]  # a TypedDict's
    converting = {f.name for f in attrs.fields(cls) if f.converter is not None}
    for name, hint in fields.items():
        if name in converting:
            assert hint in typing.get_args(keywords[name]), name
        else:
            assert keywords[name] == hint, name


async def test_connect_takes_an_options_object_and_keywords(memory_url: str) -> None:
    base = ClientOptions(add_timeout=3.0, read_window=64)
    async with walkit.Client.connect(memory_url, options=base, read_window=32) as client:
        assert client.options.add_timeout == 3.0
        assert client.options.read_window == 32  # the keyword wins
    async with walkit.Client.connect(memory_url, options=base) as client:
        assert client.options == base
    with pytest.raises(ConfigurationError, match=r"unknown client option.*add_timout"):
        async with walkit.Client.connect(memory_url, add_timout=3):  # type: ignore[call-arg]
            pass  # pragma: no cover
    with pytest.raises(ConfigurationError, match="must be a ClientOptions, not LogOptions"):
        async with walkit.Client.connect(memory_url, options=LogOptions()):  # type: ignore[arg-type]
            pass  # pragma: no cover


async def test_log_open_takes_an_options_object_and_keywords(memory_url: str) -> None:
    async with walkit.Client.connect(memory_url) as client:
        base = LogOptions(roll_entries=5, password=b"pw", read_batch=8)
        async with walkit.Log.open(client, "typed", options=base, read_batch=16) as log:
            assert log.options.roll_entries == 5
            assert log.options.read_batch == 16
            assert log.options.password == b"pw"  # given in the object: not the stored one
        async with walkit.Log.open(client, "typed") as log:
            assert log.options.password != b"pw"  # the stored (random) one
        with pytest.raises(ConfigurationError, match=r"unknown log option.*roll_entrys"):
            walkit.Log.open(client, "typed", roll_entrys=3)  # type: ignore[call-arg]
        with pytest.raises(ConfigurationError, match="log option roll_entries must be an int"):
            walkit.Log.open(client, "typed", options=base, roll_entries=0)


def test_mypy_refuses_a_misspelled_or_mistyped_option(tmp_path: Path) -> None:
    program = tmp_path / "uses_walkit.py"
    program.write_text(
        "import walkit\n"
        "async def main(client: walkit.Client) -> None:\n"
        "    walkit.Client.connect('memory://x', add_timeout=2.0, ensemble_change='immediate')\n"
        "    walkit.Client.connect('memory://x', add_timout=2.0)\n"
        "    walkit.Log.open(client, 'x', roll_entries='many')\n"
        "    walkit.Log.open(client, 'x', options=walkit.LogOptions(), compression='zstd')\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(program)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(REPO)},
    )
    # (walkit's own imports of untyped libraries are the repository config's business)
    lines = [line for line in done.stdout.splitlines() if line.startswith("uses_walkit.py:")]
    lines = [line for line in lines if ": error:" in line]
    assert len(lines) == 2, done.stdout
    assert ':4: error: Unexpected keyword argument "add_timout"' in lines[0]
    assert ':5: error: Argument "roll_entries"' in lines[1]


# --- the kinds' checks, and their words --------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "good", "bad", "says"),
    [
        (PORT, [0, 3181, 65535], [-1, 65536, 1.5, True, "80"], "must be in 0..65535"),
        (FRACTION, [0.5, 1, 1.0], [0, 1.01, float("nan"), "1"], "must be in (0, 1]"),
        (count(1), [1, 10**9], [0, 1.0, False], "must be an int >= 1"),
        (optional(count(0)), [None, 0], [-1], "must be an int >= 0 or None"),
        (SIZE, [1, 4096], [0, -5, 2.5], "must be a positive whole number of bytes"),
        (SWITCH, [True, False], [0, "yes"], "must be true or false"),
    ],
)
def test_a_kind_takes_its_values_and_names_what_it_needs(
    kind: Kind, good: list[Any], bad: list[Any], says: str
) -> None:
    for value in good:
        kind.check(value, "x")
    for value in bad:
        with pytest.raises(ConfigurationError, match=rf"^x {_escaped(says)}, not "):
            kind.check(value, "x")


def _escaped(text: str) -> str:
    import re

    return re.escape(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [("4096", 4096), ("512k", 512 << 10), ("5MiB", 5 << 20), ("1.5g", 3 << 29), ("2TB", 2 << 40)],
)
def test_sizes_read_as_people_write_them(text: str, size: int) -> None:
    assert read_size(text) == size
    assert SIZE.from_text(text) == size


@pytest.mark.parametrize("text", ["lots", "", "inf", "nan", "5 MiB MiB"])
def test_a_size_that_is_none_says_so(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        SIZE.from_text(text)


def test_sizes_show_in_whole_units() -> None:
    assert [show_size(n) for n in (256 << 20, 1 << 30, 4096, 1000)] == [
        "256MiB",
        "1GiB",
        "4KiB",
        "1000",
    ]


def test_an_option_whose_kind_converts_must_name_the_converter() -> None:
    converting = Kind(convert=str)

    @attrs.frozen
    class Careless:
        x: str = attrs.field(default="", **converting.option("something"))

    with pytest.raises(TypeError, match=r"Careless\.x: name its kind's converter"):
        list(declared(Careless))
