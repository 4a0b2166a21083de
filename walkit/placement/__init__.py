"""Ensemble placement policies (seed 004)."""

from walkit.placement._policy import BookieInfo, EnsemblePlacementPolicy, PlacementResources

__all__ = ["BookieInfo", "EnsemblePlacementPolicy", "PlacementResources"]
