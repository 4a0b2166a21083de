"""Placement configuration keys, checked at the edge."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, final

import attrs

from walkit._logging import get_logger
from walkit.errors import ConfigurationError, InvalidArgumentError
from walkit.placement._topology import DEFAULT_RACK, normalize_location

log = get_logger(__name__)

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _bool(key: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigurationError(f"placement option {key!r} must be a boolean, got {value!r}")


def _number(key: str, value: object, *, minimum: float) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= minimum:
        raise ConfigurationError(
            f"placement option {key!r} must be a number >= {minimum}, got {value!r}"
        )
    return float(value)


def _int(key: str, value: object, *, minimum: int) -> int:
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(
            f"placement option {key!r} must be an int >= {minimum}, got {value!r}"
        )
    return value


def _opt_str(key: str, value: object) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) and value:
        return value
    if hasattr(value, "__fspath__"):
        return str(value)
    raise ConfigurationError(f"placement option {key!r} must be a non-empty string, got {value!r}")


def _location(key: str, value: object) -> str:
    try:
        return normalize_location(value)
    except InvalidArgumentError as exc:
        raise ConfigurationError(f"placement option {key!r}: {exc}") from None


@final
@attrs.frozen
class PlacementConfig:
    """The options the built-in policies read (see docs/placement.md for each key)."""

    random_seed: int | None = None
    stabilize_period: float = 0.0
    default_rack: str = DEFAULT_RACK
    min_racks_per_write_quorum: int = 2
    enforce_min_racks: bool = False
    locations: Mapping[str, str] | None = None
    locations_file: str | None = None
    location_script: str | None = None
    location_script_timeout: float = 5.0
    location_script_max_args: int = 100
    local_region: str | None = None
    local_host: str | None = None
    reorder_reads: bool = True

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any] | None) -> PlacementConfig:
        """Check and convert ``config``; unknown keys are logged and ignored."""
        if config is None:
            return cls()
        if not isinstance(config, Mapping):
            raise ConfigurationError(
                f"placement configuration must be a mapping, not {type(config).__name__}"
            )
        known = {f.name for f in attrs.fields(cls)}
        unknown = sorted(str(k) for k in config if k not in known)
        if unknown:
            log.warning("placement.unknown_options", options=unknown, known=sorted(known))
        kw: dict[str, Any] = {}
        for key, value in config.items():
            if key not in known:
                continue
            if key == "random_seed":
                kw[key] = None if value is None else _int(key, value, minimum=-(2**63))
            elif key in ("stabilize_period",):
                kw[key] = _number(key, value, minimum=0.0)
            elif key == "location_script_timeout":
                kw[key] = _number(key, value, minimum=0.001)
            elif key == "default_rack":
                kw[key] = _location(key, value)
            elif key == "min_racks_per_write_quorum" or key == "location_script_max_args":
                kw[key] = _int(key, value, minimum=1)
            elif key in ("enforce_min_racks", "reorder_reads"):
                kw[key] = _bool(key, value)
            elif key == "locations":
                if value is not None and not isinstance(value, Mapping):
                    raise ConfigurationError(
                        f"placement option 'locations' must be a mapping host -> location, got {value!r}"
                    )
                kw[key] = None if value is None else dict(value)
            elif key == "local_region":
                kw[key] = None if value is None else _region(value)
            else:  # locations_file, location_script, local_host
                kw[key] = _opt_str(key, value)
        return cls(**kw)


def _region(value: object) -> str:
    if not isinstance(value, str) or not value.strip("/") or "/" in value.strip("/"):
        raise ConfigurationError(
            f"placement option 'local_region' must be a region like '/region-a', got {value!r}"
        )
    return "/" + value.strip("/")
