"""The client's options (``Client.connect(url, **options)``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, final

import attrs

from walkit._core.add_tracker import EnsembleChangeMode
from walkit._core.options import options_from_kwargs
from walkit._core.wire import DEFAULT_MAX_FRAME_SIZE
from walkit.errors import ConfigurationError, WalkitError

__all__ = ["ClientOptions"]


def _positive(name: str) -> Callable[[Any, Any, Any], None]:
    def check(_instance: Any, _attribute: Any, value: Any) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ConfigurationError(f"option {name} must be a positive number, not {value!r}")

    return check


def _optional_positive(name: str) -> Callable[[Any, Any, Any], None]:
    inner = _positive(name)

    def check(instance: Any, attribute: Any, value: Any) -> None:
        if value is not None:
            inner(instance, attribute, value)

    return check


#: Bytes of a frame that are not payload, at most: length, message header, ids, flags, the
#: master key, the entry header and the digest (the largest, HMAC-SHA256), with room to spare.
FRAME_OVERHEAD = 1024
#: The smallest ``max_frame_size`` allowed: the overhead plus 1 KiB of payload.
MIN_FRAME_SIZE = FRAME_OVERHEAD + 1024
#: Frame lengths are 32-bit on the wire.
MAX_FRAME_SIZE = 2**32 - 1


def _frame_size(_instance: Any, _attribute: Any, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigurationError(f"option max_frame_size must be an int, not {value!r}")
    if not MIN_FRAME_SIZE <= value <= MAX_FRAME_SIZE:
        raise ConfigurationError(
            f"option max_frame_size must be between {MIN_FRAME_SIZE} (a frame's headers, key "
            f"and digest take up to {FRAME_OVERHEAD} bytes, plus a payload) and "
            f"{MAX_FRAME_SIZE} (frame lengths are 32-bit), not {value}"
        )


def _mode(value: Any) -> EnsembleChangeMode:
    try:
        return EnsembleChangeMode.parse(value)
    except WalkitError as exc:
        raise ConfigurationError(str(exc)) from None


@final
@attrs.frozen
class ClientOptions:
    """Every option of a client, with its default. Times are in seconds."""

    #: A write a bookie has not acked within this is a failed write (ensemble change).
    add_timeout: float = attrs.field(default=10.0, validator=_positive("add_timeout"))
    #: A read (entry or LAC) a bookie has not answered within this goes to the next replica.
    read_timeout: float = attrs.field(default=5.0, validator=_positive("read_timeout"))
    #: Opening a TCP connection to a bookie.
    connect_timeout: float = attrs.field(default=5.0, validator=_positive("connect_timeout"))
    #: After this long without an answer, a read also asks the next replica (None: never).
    speculative_read_timeout: float | None = attrs.field(
        default=0.5, validator=_optional_positive("speculative_read_timeout")
    )
    #: "immediate" (replace a bookie at its first failed write) or "when_ack_quorum_lost".
    ensemble_change: EnsembleChangeMode = attrs.field(
        default=EnsembleChangeMode.IMMEDIATE, converter=_mode
    )
    #: A writer idle this long after its LAC moved sends the LAC to its bookies, so tailing
    #: readers see the last entries (None: never).
    explicit_lac_interval: float | None = attrs.field(
        default=0.005, validator=_optional_positive("explicit_lac_interval")
    )
    #: Appends beyond this many unacknowledged entries wait (backpressure).
    max_pending_adds: int = attrs.field(default=10_000, validator=_positive("max_pending_adds"))
    #: Entries asked for at once by one ``read``.
    read_window: int = attrs.field(default=512, validator=_positive("read_window"))
    #: Longest wait of one long-poll request; ``wait_for_entry`` re-checks the ledger's
    #: metadata (is it closed?) between rounds.
    long_poll_round: float = attrs.field(default=2.0, validator=_positive("long_poll_round"))
    #: How often request deadlines are checked.
    timeout_check_interval: float = attrs.field(
        default=0.05, validator=_positive("timeout_check_interval")
    )
    #: Retries of a metadata update that fails because the store is unreachable.
    metadata_retries: int = attrs.field(default=5, validator=_positive("metadata_retries"))
    #: Largest frame sent to or accepted from a bookie.
    max_frame_size: int = attrs.field(default=DEFAULT_MAX_FRAME_SIZE, validator=_frame_size)
    #: Options passed to ``open_metadata_store`` (for example ``{"session_timeout": 10}``).
    metadata_options: Mapping[str, Any] = attrs.field(factory=dict)
    #: Options passed to the placement policy's ``initialize``.
    placement_options: Mapping[str, Any] = attrs.field(factory=dict)
    #: Wall clock (seconds since the epoch) for ledgers' creation time; None stores 0.
    wall_clock: Callable[[], float] | None = None

    @classmethod
    def from_kwargs(cls, options: Mapping[str, Any]) -> ClientOptions:
        return options_from_kwargs(cls, options, "client")

    @property
    def max_entry_size(self) -> int:
        """Largest payload one entry may carry (a frame minus headers and digest)."""
        return self.max_frame_size - FRAME_OVERHEAD
