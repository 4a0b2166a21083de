"""Autorecovery's options (the auditor's and the replication worker's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, final

import attrs

from walkit._core.rate_limit import check_rate
from walkit.errors import ConfigurationError, WalkitError

__all__ = ["AutorecoveryOptions"]


def _positive(_instance: Any, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ConfigurationError(
            f"autorecovery option {attribute.name} must be a positive number, not {value!r}"
        )


def _non_negative(_instance: Any, attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise ConfigurationError(
            f"autorecovery option {attribute.name} must be a number >= 0, not {value!r}"
        )


def _rate(value: Any) -> float | None:
    try:
        return check_rate(value, "autorecovery rate limit")
    except WalkitError as exc:
        raise ConfigurationError(str(exc)) from None


def _passwords(value: Any) -> tuple[bytes, ...]:
    if isinstance(value, bytes | str) or not isinstance(value, Sequence):
        raise ConfigurationError("autorecovery option passwords must be a list of bytes")
    out = []
    for item in value:
        if not isinstance(item, bytes | bytearray):
            raise ConfigurationError(
                f"autorecovery option passwords must hold bytes, not {type(item).__name__}"
            )
        out.append(bytes(item))
    return tuple(out)


@final
@attrs.frozen(kw_only=True)
class AutorecoveryOptions:
    """How the auditor and the replication workers behave.

    - ``grace_period``: seconds an OPEN ledger is left to its writer before a worker fences and
      recovers it to heal it.
    - ``poll_interval``: a worker looks at the markers at least this often (it also wakes up
      when one is added).
    - ``check_interval``: the auditor's periodic check of every ledger (seconds).
    - ``check_entries``: the periodic check also asks live bookies for the first and last entry
      of each fragment they should hold (BookKeeper's LedgerChecker), and ``check_samples``
      more entries picked at random.
    - ``entries_per_second`` / ``bytes_per_second``: copy rate limits per worker (None or 0:
      no limit).
    - ``window``: entries copied at once.
    - ``election_lease``: the auditor election's lease (a dead auditor is replaced after it).
    - ``passwords``: ledger passwords to try besides b"" and the ones stored with logs.
    - ``copies_by_replacement``: with no rate limit, a replacement other than this process's
      own bookie is asked to copy each fragment from the replicas itself (the bytes do not
      pass through this process); False, or a bookie that does not, and they do.
    """

    grace_period: float = attrs.field(default=60.0, validator=_non_negative)
    poll_interval: float = attrs.field(default=10.0, validator=_positive)
    check_interval: float = attrs.field(default=3600.0, validator=_positive)
    check_entries: bool = True
    check_samples: int = attrs.field(default=2, validator=_non_negative)
    entries_per_second: float | None = attrs.field(default=5_000, converter=_rate)
    bytes_per_second: float | None = attrs.field(default=16 * 1024 * 1024, converter=_rate)
    window: int = attrs.field(default=64, validator=_positive)
    election_lease: float = attrs.field(default=5.0, validator=_positive)
    passwords: tuple[bytes, ...] = attrs.field(default=(), converter=_passwords)
    copies_by_replacement: bool = True
