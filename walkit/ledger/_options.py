"""The client's options (``Client.connect(url, **options)`` or ``options=ClientOptions(...)``).

Each option is declared once (``walkit._core.options``); :class:`ClientOptionsDict` is the
same list for type checkers (``**options: Unpack[ClientOptionsDict]``), and a test keeps the
two in step.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypedDict, final

import attrs

from walkit._core.add_tracker import EnsembleChangeMode
from walkit._core.options import (
    FRAME_OVERHEAD,
    FRAME_SIZE,
    POSITIVE,
    Kind,
    count,
    optional,
    options_from_kwargs,
)
from walkit._core.wire import DEFAULT_MAX_FRAME_SIZE
from walkit.errors import ConfigurationError, WalkitError

__all__ = ["ClientOptions", "ClientOptionsDict"]


def _mode(value: Any) -> EnsembleChangeMode:
    try:
        return EnsembleChangeMode.parse(value)
    except WalkitError as exc:
        raise ConfigurationError(str(exc)) from None


def _mapping(value: Any) -> str | None:
    return None if isinstance(value, Mapping) else "must be a mapping"


def _clock(value: Any) -> str | None:
    return None if value is None or callable(value) else "must be a function or None"


def _registry(value: Any) -> str | None:
    if value is None or callable(getattr(value, "register", None)):
        return None
    return "must be a prometheus_client CollectorRegistry or None"


ENSEMBLE_CHANGE = Kind(convert=_mode, metavar="MODE")
REGISTRY = Kind(problem=_registry)
MAPPING = Kind(problem=_mapping)
CLOCK = Kind(problem=_clock)


@final
@attrs.frozen
class ClientOptions:
    """Every option of a client, with its default. Times are in seconds."""

    option_noun: ClassVar[str] = "option "

    add_timeout: float = POSITIVE.field(
        10.0, "a write a bookie has not acked within this is a failed write (ensemble change)"
    )
    read_timeout: float = POSITIVE.field(
        5.0, "a read (entry or LAC) a bookie has not answered within this goes to the next replica"
    )
    connect_timeout: float = POSITIVE.field(5.0, "opening a TCP connection to a bookie")
    speculative_read_timeout: float | None = optional(POSITIVE).field(
        0.5, "after this long without an answer, a read also asks the next replica (None: never)"
    )
    ensemble_change: EnsembleChangeMode = attrs.field(
        default=EnsembleChangeMode.IMMEDIATE,
        converter=_mode,
        **ENSEMBLE_CHANGE.option(
            '"immediate" (replace a bookie at its first failed write) or "when_ack_quorum_lost"'
        ),
    )
    explicit_lac_interval: float | None = optional(POSITIVE).field(
        0.005,
        "a writer idle this long after its LAC moved sends the LAC to its bookies, so "
        "tailing readers see the last entries (None: never)",
    )
    max_pending_adds: int = count(1).field(
        10_000, "appends beyond this many unacknowledged entries wait (backpressure)"
    )
    read_window: int = count(1).field(512, "entries asked for at once by one read")
    long_poll_round: float = POSITIVE.field(
        2.0,
        "longest wait of one long-poll request; wait_for_entry re-checks the ledger's "
        "metadata (is it closed?) between rounds",
    )
    timeout_check_interval: float = POSITIVE.field(0.05, "how often request deadlines are checked")
    metadata_retries: int = count(1).field(
        5, "retries of a metadata update that fails because the store is unreachable"
    )
    max_frame_size: int = FRAME_SIZE.field(
        DEFAULT_MAX_FRAME_SIZE, "largest frame sent to or accepted from a bookie"
    )
    metadata_options: Mapping[str, Any] = MAPPING.field(
        attrs.Factory(dict),
        'options passed to open_metadata_store (for example {"session_timeout": 10})',
    )
    placement_options: Mapping[str, Any] = MAPPING.field(
        attrs.Factory(dict), "options passed to the placement policy's initialize"
    )
    wall_clock: Callable[[], float] | None = CLOCK.field(  # noqa: RUF009  (an attrs field)
        time.time,
        "wall clock (seconds since the epoch) that stamps records and ledgers' creation time "
        "(the system's, time.time, unless given; the simulation gives its MockClock's); None: "
        "stamp nothing (records have no timestamp, retain_age and orphan collection refuse)",
    )
    metrics_registry: Any = REGISTRY.field(  # noqa: RUF009  (an attrs field)
        None,
        "a prometheus_client CollectorRegistry to record the client's metrics in (append "
        "latency, records and bytes appended, ensemble changes, recoveries, reader and "
        "consumer lags; docs/log.md); None: none",
        repr=False,
    )

    @classmethod
    def from_kwargs(
        cls, options: Mapping[str, Any], base: ClientOptions | None = None
    ) -> ClientOptions:
        """The options given as keywords (over ``base``'s, an options object given too)."""
        return options_from_kwargs(cls, options, "client", base)

    @property
    def max_entry_size(self) -> int:
        """Largest payload one entry may carry (a frame minus headers and digest)."""
        return self.max_frame_size - FRAME_OVERHEAD


class ClientOptionsDict(TypedDict, total=False):
    """``ClientOptions`` as keywords, for type checkers (``Client.connect(url, **options)``);
    a test keeps it the same list as the class's."""

    add_timeout: float
    read_timeout: float
    connect_timeout: float
    speculative_read_timeout: float | None
    ensemble_change: EnsembleChangeMode | str
    explicit_lac_interval: float | None
    max_pending_adds: int
    read_window: int
    long_poll_round: float
    timeout_check_interval: float
    metadata_retries: int
    max_frame_size: int
    metadata_options: Mapping[str, Any]
    placement_options: Mapping[str, Any]
    wall_clock: Callable[[], float] | None
    metrics_registry: Any
