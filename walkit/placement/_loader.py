"""Choosing a policy by name, ``module:Class`` path, entry point, class or instance."""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any

from walkit.errors import ConfigurationError
from walkit.placement._default import DefaultEnsemblePlacementPolicy
from walkit.placement._policy import EnsemblePlacementPolicy
from walkit.placement._rackaware import RackawareEnsemblePlacementPolicy
from walkit.placement._regionaware import RegionAwareEnsemblePlacementPolicy

#: The entry point group third-party policies register under.
ENTRY_POINT_GROUP = "walkit.placement_policies"

#: Short names of the built-in policies.
BUILTIN_POLICIES: dict[str, type[EnsemblePlacementPolicy]] = {
    "default": DefaultEnsemblePlacementPolicy,
    "rackaware": RackawareEnsemblePlacementPolicy,
    "regionaware": RegionAwareEnsemblePlacementPolicy,
}


def available_policies() -> list[str]:
    """Short names and entry point names that :func:`load_policy` accepts."""
    names = set(BUILTIN_POLICIES)
    names.update(ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
    return sorted(names)


def load_policy(spec: Any) -> EnsemblePlacementPolicy:
    """Return a new (not yet initialized) policy for ``spec``.

    ``spec`` is a short name (``default``, ``rackaware``, ``regionaware``), the name of an entry
    point in the ``walkit.placement_policies`` group, a ``"package.module:Class"`` path, an
    EnsemblePlacementPolicy subclass, or an instance (returned as is). Anything else raises
    ConfigurationError saying what was wrong.
    """
    if isinstance(spec, EnsemblePlacementPolicy):
        return spec
    if isinstance(spec, type):
        return _instantiate(spec, repr(spec))
    if not isinstance(spec, str):
        raise ConfigurationError(
            f"placement policy must be a name, 'module:Class', a policy class or instance; "
            f"got {type(spec).__name__}: {spec!r}"
        )
    name = spec.strip()
    if not name:
        raise ConfigurationError("placement policy name is empty")
    builtin = BUILTIN_POLICIES.get(name.lower())
    if builtin is not None:
        return builtin()
    if ":" in name:
        return _instantiate(_import_path(name), repr(name))
    matches = [
        ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == name
    ]
    if not matches:
        raise ConfigurationError(
            f"unknown placement policy {name!r}: expected one of {available_policies()} "
            f"(short names or entry points in {ENTRY_POINT_GROUP!r}) or 'package.module:Class'"
        )
    ep = matches[0]
    try:
        obj = ep.load()
    except Exception as exc:
        raise ConfigurationError(
            f"placement policy entry point {name!r} ({ep.value}) failed to load: {exc!r}"
        ) from exc
    if isinstance(obj, EnsemblePlacementPolicy):
        return obj
    return _instantiate(obj, f"entry point {name!r} ({ep.value})")


def _import_path(path: str) -> Any:
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigurationError(
            f"bad placement policy path {path!r}: expected 'package.module:Class'"
        )
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"placement policy {path!r}: cannot import module {module_name!r}: {exc}"
        ) from exc
    except Exception as exc:  # the module itself raised while importing
        raise ConfigurationError(
            f"placement policy {path!r}: importing {module_name!r} failed: {exc!r}"
        ) from exc
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ConfigurationError(
                f"placement policy {path!r}: module {module_name!r} has no attribute {attr!r}"
            ) from None
    return obj


def _instantiate(obj: Any, what: str) -> EnsemblePlacementPolicy:
    if not (isinstance(obj, type) and issubclass(obj, EnsemblePlacementPolicy)):
        raise ConfigurationError(
            f"placement policy {what} is not an EnsemblePlacementPolicy subclass: {obj!r}"
        )
    try:
        return obj()
    except Exception as exc:
        raise ConfigurationError(
            f"placement policy {what} could not be constructed with no arguments: {exc!r}"
        ) from exc
