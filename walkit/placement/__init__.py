"""Ensemble placement policies (BookKeeper's placement-policy guide): where a ledger's copies go and
how to read them.

See docs/placement.md. Choose a policy with :func:`load_policy`, then call ``initialize`` with
the configuration and :class:`PlacementResources`, and ``on_cluster_changed`` whenever the
registered bookies change.
"""

from walkit._core.types import BookieInfo
from walkit.placement._base import BasePlacementPolicy, apply_cluster_change
from walkit.placement._config import PlacementConfig
from walkit.placement._default import DefaultEnsemblePlacementPolicy
from walkit.placement._loader import (
    BUILTIN_POLICIES,
    ENTRY_POINT_GROUP,
    available_policies,
    load_policy,
)
from walkit.placement._policy import EnsemblePlacementPolicy, PlacementResources
from walkit.placement._rackaware import RackawareEnsemblePlacementPolicy
from walkit.placement._regionaware import RegionAwareEnsemblePlacementPolicy
from walkit.placement._resolvers import (
    LocationResolver,
    ScriptLocationResolver,
    StaticLocationResolver,
)
from walkit.placement._topology import (
    DEFAULT_RACK,
    DEFAULT_REGION,
    NetworkTopology,
    normalize_location,
)

__all__ = [
    "BUILTIN_POLICIES",
    "DEFAULT_RACK",
    "DEFAULT_REGION",
    "ENTRY_POINT_GROUP",
    "BasePlacementPolicy",
    "BookieInfo",
    "DefaultEnsemblePlacementPolicy",
    "EnsemblePlacementPolicy",
    "LocationResolver",
    "NetworkTopology",
    "PlacementConfig",
    "PlacementResources",
    "RackawareEnsemblePlacementPolicy",
    "RegionAwareEnsemblePlacementPolicy",
    "ScriptLocationResolver",
    "StaticLocationResolver",
    "apply_cluster_change",
    "available_policies",
    "load_policy",
    "normalize_location",
]
