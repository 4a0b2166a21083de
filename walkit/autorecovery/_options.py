"""Autorecovery's options (the auditor's and the replication worker's)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, final

import attrs

from walkit._core.options import (
    BYTE_RATE_LIMIT,
    NON_NEGATIVE,
    POSITIVE,
    RATE_LIMIT,
    SWITCH,
    Kind,
    count,
    rate_limit,
)
from walkit.errors import ConfigurationError

__all__ = ["AutorecoveryOptions"]


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


PASSWORDS = Kind(convert=_passwords, secret=True)


@final
@attrs.frozen(kw_only=True)
class AutorecoveryOptions:
    """How the auditor and the replication workers behave (each option's help says what it
    does)."""

    option_noun: ClassVar[str] = "autorecovery option "

    grace_period: float = NON_NEGATIVE.field(
        60.0,
        "seconds an OPEN ledger is left to its writer before a worker fences and recovers "
        "it to rereplicate it",
    )
    poll_interval: float = POSITIVE.field(
        10.0,
        "a worker looks at the markers at least this often, in seconds (it also wakes up "
        "when one is added)",
    )
    check_interval: float = POSITIVE.field(
        3600.0,
        "seconds between the auditor's periodic checks of every ledger (its fragments' "
        "bookies, and the entries check_entries asks for)",
    )
    check_entries: bool = SWITCH.field(
        True,
        "the periodic check also asks live bookies for the first and last entry of each "
        "fragment they should hold (BookKeeper's LedgerChecker), and check_samples more "
        "entries picked at random",
    )
    check_samples: int = count(0).field(2, "entries sampled per fragment by the periodic check")
    entries_per_second: float | None = attrs.field(
        default=5_000,
        converter=rate_limit,
        **RATE_LIMIT.option("copy rate limit per worker, entries/s (None or 0: no limit)"),
    )
    bytes_per_second: float | None = attrs.field(
        default=16 * 1024 * 1024,
        converter=rate_limit,
        **BYTE_RATE_LIMIT.option(
            "copy rate limit per worker, bytes/s, e.g. 64MiB/s (None or 0: no limit)"
        ),
    )
    window: int = count(1).field(64, "entries copied at once")
    election_lease: float = POSITIVE.field(
        5.0, "the auditor election's lease, in seconds (a dead auditor is replaced after it)"
    )
    passwords: tuple[bytes, ...] = attrs.field(
        default=(),
        converter=_passwords,
        **PASSWORDS.option('ledger passwords to try besides b"" and the ones stored with logs'),
    )
    copies_by_replacement: bool = SWITCH.field(
        True,
        "with no rate limit, a replacement other than this process's own bookie is asked "
        "to copy each fragment from the replicas itself (the bytes do not pass through "
        "this process); False, or a bookie that does not, and they do",
    )
