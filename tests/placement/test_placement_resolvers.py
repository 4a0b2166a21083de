"""Location resolvers: static (dict, file), script (real scripts in tmp_path), custom ones."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from trio.testing import MockClock

from tests.placement._placement_util import bookie, cluster
from walkit.errors import ConfigurationError
from walkit.placement import (
    DEFAULT_RACK,
    BookieInfo,
    PlacementResources,
    RackawareEnsemblePlacementPolicy,
    ScriptLocationResolver,
    StaticLocationResolver,
)


def make_script(tmp_path: Path, body: str, name: str = "resolve.py") -> Path:
    """An executable Python script; each run appends its arguments to calls.log."""
    script = tmp_path / name
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys, time, pathlib\n"
        f"pathlib.Path({str(tmp_path / 'calls.log')!r}).open('a').write(' '.join(sys.argv[1:]) + '\\n')\n"
        + body
    )
    script.chmod(0o755)
    return script


RACK_BY_NAME = "for h in sys.argv[1:]:\n    print('/dc/rack-' + h[-1])\n"


def calls(tmp_path: Path) -> list[list[str]]:
    log = tmp_path / "calls.log"
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


def test_static_from_dict_and_files(tmp_path: Path) -> None:
    r = StaticLocationResolver({"h1": "/a/r1", "h2": "/r2"})
    assert r.resolve(["h1", "h2", "h3"]) == ["/a/r1", "/default-region/r2", None]
    text = tmp_path / "racks.txt"
    text.write_text("# host location\nh1 /a/r1\n\nh2   /b/r2  # trailing comment\n")
    assert StaticLocationResolver.from_file(text).mapping == {"h1": "/a/r1", "h2": "/b/r2"}
    js = tmp_path / "racks.json"
    js.write_text(json.dumps({"h1": "/a/r1"}))
    assert StaticLocationResolver.from_file(js).resolve(["h1"]) == ["/a/r1"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("h1\n", "expected 'host /region/rack'"),
        ("h1 /a/b/c\n", "expected /region/rack"),
        ("{not json", "bad JSON"),
        ("[1]", "expected"),
    ],
)
def test_static_bad_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "racks"
    path.write_text(content)
    with pytest.raises(ConfigurationError, match=message):
        StaticLocationResolver.from_file(path)


def test_static_missing_file_and_bad_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="cannot read"):
        StaticLocationResolver.from_file(tmp_path / "nope")
    with pytest.raises(ConfigurationError):
        StaticLocationResolver(["h1"])  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="h1"):
        StaticLocationResolver({"h1": "rack"})


def test_policy_uses_static_options(tmp_path: Path) -> None:
    path = tmp_path / "racks.txt"
    path.write_text("h2 /b/r2\n")
    policy = RackawareEnsemblePlacementPolicy()
    cluster(policy, {}, config={"locations": {"h1": "/a/r1"}, "locations_file": str(path)})
    policy.on_cluster_changed({bookie("h1"), bookie("h2"), bookie("h3")}, set())
    assert [policy.location_of(bookie(h)) for h in ("h1", "h2", "h3")] == [
        "/a/r1",
        "/b/r2",
        DEFAULT_RACK,
    ]


def test_registered_location_wins_over_resolvers() -> None:
    policy = RackawareEnsemblePlacementPolicy()
    cluster(policy, {}, config={"locations": {"h1": "/a/r1"}})
    policy.on_cluster_changed({BookieInfo(bookie("h1"), "/z/r9")}, set())
    assert policy.location_of(bookie("h1")) == "/z/r9"
    # The bookie re-registers elsewhere: the topology follows.
    policy.on_cluster_changed({BookieInfo(bookie("h1"), "/z/r8")}, set())
    assert policy.location_of(bookie("h1")) == "/z/r8"
    # ...and without a registered location, the static mapping applies.
    policy.on_cluster_changed({BookieInfo(bookie("h1"))}, set())
    assert policy.location_of(bookie("h1")) == "/a/r1"


def test_script_resolver_batches_and_caches(tmp_path: Path) -> None:
    script = make_script(tmp_path, RACK_BY_NAME)
    r = ScriptLocationResolver(script, max_args=2)
    hosts = ["h1", "h2", "h3", "h4", "h5"]
    assert r.resolve(hosts) == [f"/dc/rack-{i}" for i in range(1, 6)]
    assert calls(tmp_path) == [["h1", "h2"], ["h3", "h4"], ["h5"]]
    assert r.resolve(["h2", "h2"]) == ["/dc/rack-2", "/dc/rack-2"]
    assert len(calls(tmp_path)) == 3  # cached
    r.reload()
    r.resolve(["h2"])
    assert calls(tmp_path)[-1] == ["h2"]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("sys.exit(3)\n", [None, None]),  # failing script
        ("print('/dc/only-one')\n", [None, None]),  # wrong number of lines
        ("print('/dc/r1')\nprint('garbage')\n", ["/dc/r1", None]),  # one bad line
        ("print('/dc/r1')\nprint('/a/b/c/d')\n", ["/dc/r1", None]),
        ("sys.stdout.buffer.write(b'\\xff\\xfe\\n\\n')\n", [None, None]),
    ],
)
def test_script_resolver_bad_output(tmp_path: Path, body: str, expected: list[str | None]) -> None:
    r = ScriptLocationResolver(make_script(tmp_path, body))
    assert r.resolve(["h1", "h2"]) == expected


def test_script_resolver_timeout_kills_the_script(tmp_path: Path) -> None:
    marker = tmp_path / "finished"
    body = f"time.sleep(30)\nopen({str(marker)!r}, 'w').write('x')\n"
    r = ScriptLocationResolver(make_script(tmp_path, body), timeout=0.2)
    assert r.resolve(["h1"]) == [None]
    assert not marker.exists()


def test_script_resolver_refuses_bad_configuration(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="does not exist"):
        ScriptLocationResolver(tmp_path / "missing.sh")
    plain = tmp_path / "plain.sh"
    plain.write_text("echo /a/b\n")
    with pytest.raises(ConfigurationError, match="not executable"):
        ScriptLocationResolver(plain)
    script = make_script(tmp_path, RACK_BY_NAME)
    with pytest.raises(ConfigurationError, match="timeout"):
        ScriptLocationResolver(script, timeout=0)
    with pytest.raises(ConfigurationError, match="max_args"):
        ScriptLocationResolver(script, max_args=0)


def test_script_vanishing_later_falls_back(tmp_path: Path) -> None:
    script = make_script(tmp_path, RACK_BY_NAME)
    r = ScriptLocationResolver(script)
    script.unlink()
    assert r.resolve(["h1"]) == [None]


def test_policy_with_script_falls_back_then_recovers(tmp_path: Path) -> None:
    script = make_script(tmp_path, "sys.exit(1)\n")
    policy = RackawareEnsemblePlacementPolicy()
    cluster(policy, {}, config={"location_script": str(script), "location_script_timeout": "2"})
    h1, h2 = bookie("h1"), bookie("h2")
    policy.on_cluster_changed({h1, h2}, set())
    assert policy.location_of(h1) == DEFAULT_RACK == policy.location_of(h2)
    assert len(policy.new_ensemble(2, 2, 2)) == 2  # still usable on the default rack
    # The script is fixed; the next cluster change resolves the fallen-back bookies again.
    make_script(tmp_path, RACK_BY_NAME)
    policy.on_cluster_changed({h1, h2}, set())
    assert policy.location_of(h1) == "/dc/rack-1"
    assert policy.location_of(h2) == "/dc/rack-2"
    n = len(calls(tmp_path))
    policy.on_cluster_changed({h1, h2}, set())
    assert len(calls(tmp_path)) == n  # resolved bookies are not asked again


def test_reload_locations_resolves_everyone_again(tmp_path: Path) -> None:
    mapping = tmp_path / "map"
    mapping.write_text("h1 /a/r1\n")
    body = f"m = dict(l.split() for l in open({str(mapping)!r}))\nfor h in sys.argv[1:]:\n    print(m[h])\n"
    policy = RackawareEnsemblePlacementPolicy()
    cluster(policy, {}, config={"location_script": make_script(tmp_path, body)})
    policy.on_cluster_changed({bookie("h1")}, set())
    assert policy.location_of(bookie("h1")) == "/a/r1"
    mapping.write_text("h1 /a/r7\n")
    policy.on_cluster_changed({bookie("h1")}, set())
    assert policy.location_of(bookie("h1")) == "/a/r1"
    policy.reload_locations()
    policy.on_cluster_changed({bookie("h1")}, set())
    assert policy.location_of(bookie("h1")) == "/a/r7"


def test_custom_resolver_in_resources() -> None:
    asked: list[list[str]] = []

    def resolver(names: list[str]) -> list[str | None]:
        asked.append(names)
        return ["/fn/r1" if n == "h1" else None for n in names]

    policy = RackawareEnsemblePlacementPolicy()
    cluster(
        policy,
        {},
        config={"locations": {"h2": "/static/r2"}},
        resources=PlacementResources(resolver=resolver),
    )
    policy.on_cluster_changed({bookie("h1"), bookie("h2"), bookie("h3")}, set())
    assert policy.location_of(bookie("h1")) == "/fn/r1"
    assert policy.location_of(bookie("h2")) == "/static/r2"
    assert policy.location_of(bookie("h3")) == DEFAULT_RACK
    assert asked[0] == ["h1", "h2", "h3"]


@pytest.mark.parametrize(
    "resolver",
    [
        lambda names: 1 / 0,
        lambda names: ["/a/r1"],  # wrong length
        lambda names: ["bad location"] * len(names),
    ],
)
def test_broken_custom_resolvers_fall_back(resolver: object) -> None:
    policy = RackawareEnsemblePlacementPolicy()
    cluster(policy, {}, resources=PlacementResources(resolver=resolver))
    policy.on_cluster_changed({bookie("h1"), bookie("h2")}, set())
    assert policy.location_of(bookie("h1")) == DEFAULT_RACK


def test_resolver_object_with_resolve_method() -> None:
    policy = RackawareEnsemblePlacementPolicy()
    cluster(
        policy, {}, resources=PlacementResources(resolver=StaticLocationResolver({"h1": "/x/y"}))
    )
    policy.on_cluster_changed({bookie("h1")}, set())
    assert policy.location_of(bookie("h1")) == "/x/y"
    with pytest.raises(ConfigurationError, match="resolver"):
        RackawareEnsemblePlacementPolicy().initialize({}, PlacementResources(resolver=42))


async def test_apply_cluster_change_resolves_in_a_thread(
    tmp_path: Path, mock_clock: MockClock
) -> None:
    """With a location script, trio callers resolve off the event loop; the stabilize period
    still runs on trio's clock."""
    import threading

    from walkit.placement import apply_cluster_change

    script = make_script(tmp_path, RACK_BY_NAME)
    policy = RackawareEnsemblePlacementPolicy()
    policy.initialize({"location_script": str(script), "stabilize_period": 5})
    assert policy.resolution_may_block
    seen_threads: list[str] = []

    def resolver(names: list[str]) -> list[str | None]:
        seen_threads.append(threading.current_thread().name)
        return [None] * len(names)

    h1, h2 = bookie("h1"), bookie("h2")
    assert await apply_cluster_change(policy, {h1, h2}, set()) == set()
    assert policy.location_of(h2) == "/dc/rack-2"
    assert len(calls(tmp_path)) == 1  # resolved once, in the worker thread
    assert await apply_cluster_change(policy, {h1}, set()) == set()
    mock_clock.jump(5)
    assert await apply_cluster_change(policy, {h1}, set()) == {h2}
    # A policy without a blocking resolver stays on the trio thread.
    plain = RackawareEnsemblePlacementPolicy()
    plain.initialize({}, PlacementResources(resolver=resolver))
    assert not plain.resolution_may_block
    await apply_cluster_change(plain, {h1}, set())
    assert seen_threads == [threading.current_thread().name]
