"""load_policy by every form (short name, module:Class, entry point, class, instance), the
example policy, configuration checks, and bad specs."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest

from tests.placement._placement_util import bookie
from walkit import BookieId
from walkit.errors import ConfigurationError
from walkit.placement import (
    BUILTIN_POLICIES,
    ENTRY_POINT_GROUP,
    DefaultEnsemblePlacementPolicy,
    EnsemblePlacementPolicy,
    PlacementConfig,
    PlacementResources,
    RackawareEnsemblePlacementPolicy,
    RegionAwareEnsemblePlacementPolicy,
    available_policies,
    load_policy,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    ("spec", "cls"),
    [
        ("default", DefaultEnsemblePlacementPolicy),
        ("rackaware", RackawareEnsemblePlacementPolicy),
        ("RegionAware", RegionAwareEnsemblePlacementPolicy),
        (" regionaware ", RegionAwareEnsemblePlacementPolicy),
        ("walkit.placement:RackawareEnsemblePlacementPolicy", RackawareEnsemblePlacementPolicy),
        (
            "walkit.placement._default:DefaultEnsemblePlacementPolicy",
            DefaultEnsemblePlacementPolicy,
        ),
        (RegionAwareEnsemblePlacementPolicy, RegionAwareEnsemblePlacementPolicy),
    ],
)
def test_load_by_name_path_and_class(spec: object, cls: type) -> None:
    policy = load_policy(spec)
    assert type(policy) is cls
    assert load_policy(spec) is not policy  # a new one each time


def test_load_instance_is_returned_as_is() -> None:
    policy = RackawareEnsemblePlacementPolicy()
    assert load_policy(policy) is policy


def test_builtins_are_declared_as_entry_points() -> None:
    from importlib.metadata import entry_points

    declared = {ep.name: ep.load() for ep in entry_points(group=ENTRY_POINT_GROUP)}
    for name, cls in BUILTIN_POLICIES.items():
        assert declared[name] is cls
    assert set(BUILTIN_POLICIES) <= set(available_policies())


def _install_plugin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str, module_source: str
) -> None:
    """A real installed distribution on sys.path: a module and a dist-info with entry points."""
    monkeypatch.delitem(sys.modules, "myplacement", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "myplacement.py").write_text(module_source)
    dist = tmp_path / "myplacement-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myplacement\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{entry}\n")


PLUGIN = """
from walkit.placement import DefaultEnsemblePlacementPolicy

class MyPolicy(DefaultEnsemblePlacementPolicy):
    pass

INSTANCE = MyPolicy()

def not_a_policy():
    return 1
"""


def test_load_by_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_plugin(tmp_path, monkeypatch, "mine = myplacement:MyPolicy", PLUGIN)
    assert "mine" in available_policies()
    policy = load_policy("mine")
    assert type(policy).__name__ == "MyPolicy"
    assert isinstance(policy, DefaultEnsemblePlacementPolicy)


def test_entry_point_to_an_instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_plugin(tmp_path, monkeypatch, "mine = myplacement:INSTANCE", PLUGIN)
    import myplacement  # type: ignore[import-not-found]

    assert load_policy("mine") is myplacement.INSTANCE


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("broken = myplacement:Missing", "failed to load"),
        ("broken = nosuchmodule_xyz:Policy", "failed to load"),
        ("broken = myplacement:not_a_policy", "not an EnsemblePlacementPolicy"),
    ],
)
def test_bad_entry_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, entry: str, message: str
) -> None:
    _install_plugin(tmp_path, monkeypatch, entry, PLUGIN)
    with pytest.raises(ConfigurationError, match=message):
        load_policy("broken")


def test_example_policy_plugs_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLES))
    policy = load_policy("placement_policy:DistinctHostPolicy")
    assert isinstance(policy, EnsemblePlacementPolicy)
    policy.initialize({}, PlacementResources(random=random.Random(3)))
    hosts = [bookie(h, p) for h in ("a", "b", "c") for p in (1, 2)]
    policy.on_cluster_changed(set(hosts), set())
    for _ in range(20):
        ensemble = policy.new_ensemble(3, 2, 2)
        assert len({b.host for b in ensemble}) == 3
        six = policy.new_ensemble(6, 3, 2)
        assert sorted(six) == sorted(hosts)
        replacement = policy.replace_bookie(3, 2, 2, ensemble, ensemble[0], exclude={ensemble[0]})
        assert replacement.host == ensemble[0].host  # the only host left with no copy
    with pytest.raises(Exception, match=r"need 7 bookie\(s\), 6 available"):
        policy.new_ensemble(7, 2, 2)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("nope", "unknown placement policy 'nope'.*default.*rackaware"),
        ("", "empty"),
        ("no_such_module_xyz:Policy", "cannot import module"),
        ("walkit.placement:NoSuchPolicy", "has no attribute"),
        ("walkit.errors:WalkitError", "not an EnsemblePlacementPolicy"),
        ("walkit.placement:EnsemblePlacementPolicy", "could not be constructed"),
        (":Policy", "expected 'package.module:Class'"),
        ("walkit.placement:", "expected 'package.module:Class'"),
        (42, "got int"),
        (None, "got NoneType"),
        (dict, "not an EnsemblePlacementPolicy"),
    ],
)
def test_bad_specs(spec: object, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        load_policy(spec)


def test_module_that_raises_on_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "explodes_on_import.py").write_text("raise RuntimeError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigurationError, match="boom"):
        load_policy("explodes_on_import:Policy")


# --- configuration ----------------------------------------------------------------------


def test_config_accepts_strings_from_files_and_the_cli() -> None:
    cfg = PlacementConfig.from_mapping(
        {
            "stabilize_period": "10",
            "min_racks_per_write_quorum": "3",
            "enforce_min_racks": "yes",
            "random_seed": "7",
            "local_region": "east",
            "some_future_option": 1,  # unknown keys are logged and ignored
        }
    )
    assert cfg.stabilize_period == 10.0
    assert cfg.min_racks_per_write_quorum == 3
    assert cfg.enforce_min_racks is True
    assert cfg.random_seed == 7
    assert cfg.local_region == "/east"


@pytest.mark.parametrize(
    "config",
    [
        {"stabilize_period": -1},
        {"stabilize_period": "soon"},
        {"min_racks_per_write_quorum": 0},
        {"min_racks_per_write_quorum": 2.5},
        {"enforce_min_racks": "maybe"},
        {"locations": ["h1"]},
        {"locations": {"h1": "not-a-location"}},
        {"location_script": "/no/such/script"},
        {"location_script_timeout": 0},
        {"local_region": "/a/b"},
        {"random_seed": "x"},
        {"default_rack": 5},
    ],
)
def test_bad_config_is_a_configuration_error(config: dict[str, object]) -> None:
    with pytest.raises(ConfigurationError):
        RackawareEnsemblePlacementPolicy().initialize(config)


def test_bad_resources_are_refused() -> None:
    policy = RackawareEnsemblePlacementPolicy()
    with pytest.raises(ConfigurationError):
        policy.initialize({}, {"clock": None})  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="clock"):
        policy.initialize({}, PlacementResources(clock=5))
    with pytest.raises(ConfigurationError, match="random"):
        policy.initialize({}, PlacementResources(random=5))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="mapping"):
        policy.initialize(["x"])  # type: ignore[arg-type]


def test_metrics_on_an_injected_registry() -> None:
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    policy = RackawareEnsemblePlacementPolicy()
    policy.initialize({}, PlacementResources(metrics_registry=registry))
    policy.on_cluster_changed({bookie("a"), bookie("b")}, {bookie("c")})
    policy.new_ensemble(2, 2, 2)
    with pytest.raises(Exception, match="need 3"):
        policy.new_ensemble(3, 2, 2)
    value = registry.get_sample_value
    assert value("walkit_placement_bookies", {"state": "writable"}) == 2
    assert value("walkit_placement_bookies", {"state": "readonly"}) == 1
    assert value("walkit_placement_location_fallbacks_total") == 3
    assert (
        value(
            "walkit_placement_decisions_total",
            {"operation": "new_ensemble", "result": "best_effort"},
        )
        == 1
    )
    assert (
        value(
            "walkit_placement_decisions_total",
            {"operation": "new_ensemble", "result": "not_enough_bookies"},
        )
        == 1
    )
    # A second policy on the same registry works (without metrics) rather than failing.
    other = RackawareEnsemblePlacementPolicy()
    other.initialize({}, PlacementResources(metrics_registry=registry))
    # Closing unregisters, so the registry can be reused.
    policy.close()
    assert value("walkit_placement_bookies", {"state": "writable"}) is None


def test_seed_option_wins_over_the_clients_generator() -> None:
    def ensembles(config: dict[str, object], rng_seed: int) -> list[list[BookieId]]:
        policy = RackawareEnsemblePlacementPolicy()
        policy.initialize(config, PlacementResources(random=random.Random(rng_seed)))
        policy.on_cluster_changed({bookie(f"h{i}") for i in range(12)}, set())
        return [policy.new_ensemble(3, 2, 2) for _ in range(5)]

    assert ensembles({"random_seed": 5}, 1) == ensembles({"random_seed": 5}, 2)
    assert ensembles({}, 1) == ensembles({}, 1)
    assert ensembles({}, 1) != ensembles({}, 2)
