"""The network topology: a tree of ``/region/rack/bookie`` (BookKeeper's placement-policy guide).

Locations are strings ``/region/rack``. A one-level location ``/rack`` is read as a rack of the
default region, so a cluster that only knows racks still works with the region-aware policy.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import final

from walkit._core.types import BookieId
from walkit.errors import InvalidArgumentError

#: The region of bookies whose region is not known.
DEFAULT_REGION = "/default-region"
#: Where a bookie goes when its location cannot be resolved.
DEFAULT_RACK = "/default-region/default-rack"


def normalize_location(location: object) -> str:
    """Return ``location`` as ``/region/rack``; raise InvalidArgumentError if it is not one.

    Accepts ``/region/rack`` and ``/rack`` (placed in :data:`DEFAULT_REGION`); a trailing ``/``
    is ignored. Names may not be empty or contain whitespace.
    """
    if not isinstance(location, str):
        raise InvalidArgumentError(
            f"network location must be a string, not {type(location).__name__}"
        )
    text = location.strip()
    if not text.startswith("/"):
        raise InvalidArgumentError(f"bad network location {location!r}: must start with '/'")
    parts = text.rstrip("/").split("/")[1:]
    if not parts or len(parts) > 2:
        raise InvalidArgumentError(
            f"bad network location {location!r}: expected /region/rack or /rack"
        )
    for part in parts:
        if not part or any(ch.isspace() for ch in part) or part in (".", ".."):
            raise InvalidArgumentError(f"bad network location {location!r}: bad name {part!r}")
    if len(parts) == 1:
        return f"{DEFAULT_REGION}/{parts[0]}"
    return f"/{parts[0]}/{parts[1]}"


def region_of(location: str) -> str:
    """``/region`` of a normalized ``/region/rack`` location."""
    return location.rsplit("/", 1)[0]


@final
class NetworkTopology:
    """Bookies as leaves under their region and rack.

    Iteration and listings are sorted, so two topologies with the same content behave the same
    (placement randomness comes only from the policy's injected random generator).
    """

    def __init__(self) -> None:
        self._location: dict[BookieId, str] = {}
        self._racks: dict[str, set[BookieId]] = {}

    def add(self, bookie: BookieId, location: str) -> None:
        """Put ``bookie`` at ``location`` (normalized); moves it if it was elsewhere."""
        loc = normalize_location(location)
        old = self._location.get(bookie)
        if old == loc:
            return
        if old is not None:
            self._discard(bookie, old)
        self._location[bookie] = loc
        self._racks.setdefault(loc, set()).add(bookie)

    def remove(self, bookie: BookieId) -> str | None:
        """Take ``bookie`` out; return the location it had (None if it was not there)."""
        loc = self._location.pop(bookie, None)
        if loc is not None:
            self._discard(bookie, loc)
        return loc

    def _discard(self, bookie: BookieId, loc: str) -> None:
        members = self._racks[loc]
        members.discard(bookie)
        if not members:
            del self._racks[loc]

    def __contains__(self, bookie: object) -> bool:
        return bookie in self._location

    def __len__(self) -> int:
        return len(self._location)

    def __iter__(self) -> Iterator[BookieId]:
        return iter(sorted(self._location))

    def location_of(self, bookie: BookieId) -> str | None:
        """``/region/rack`` of ``bookie``, or None if it is not in the topology."""
        return self._location.get(bookie)

    def region_of(self, bookie: BookieId) -> str | None:
        """``/region`` of ``bookie``, or None if it is not in the topology."""
        loc = self._location.get(bookie)
        return None if loc is None else region_of(loc)

    def regions(self) -> list[str]:
        """Every region that has a bookie, as ``/region``."""
        return sorted({region_of(loc) for loc in self._racks})

    def racks(self, region: str | None = None) -> list[str]:
        """Every rack (``/region/rack``) that has a bookie, optionally only in ``region``."""
        if region is None:
            return sorted(self._racks)
        prefix = region.rstrip("/") + "/"
        return sorted(loc for loc in self._racks if loc.startswith(prefix))

    def bookies(self, path: str = "/") -> list[BookieId]:
        """Bookies under ``path``: ``/`` (all), ``/region`` or ``/region/rack``."""
        path = path.rstrip("/")
        if not path:
            return sorted(self._location)
        return sorted(
            b for b, loc in self._location.items() if loc == path or loc.startswith(path + "/")
        )

    def to_dict(self) -> dict[str, dict[str, list[str]]]:
        """``{region: {rack: ["host:port", ...]}}`` with bare names, for display."""
        tree: dict[str, dict[str, list[str]]] = {}
        for loc in sorted(self._racks):
            region, rack = loc[1:].split("/")
            tree.setdefault(region, {})[rack] = [str(b) for b in sorted(self._racks[loc])]
        return tree

    def render(self) -> str:
        """A readable indented tree (regions, racks, bookies)."""
        lines = ["/"]
        for region, racks in self.to_dict().items():
            lines.append(f"  {region}")
            for rack, bookies in racks.items():
                lines.append(f"    {rack}")
                lines.extend(f"      {b}" for b in bookies)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"NetworkTopology({self.to_dict()!r})"
