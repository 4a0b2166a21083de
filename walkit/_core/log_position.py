"""Positions in a log: (ledger sequence number, entry id).

A log is a chain of ledgers; each ledger gets a per-log sequence number when it joins the log
(1, 2, 3, ...; never reused, gaps allowed where empty ledgers were dropped). A record's position
is the sequence number of its ledger and its entry id there, so positions order across ledgers
(DistributedLog's DLSN without the slot).

``str(pos)`` is ``"SEQ:ENTRY"`` (``"3:17"``); the two sentinels print as ``"earliest"`` (before
every record) and ``"latest"`` (after every record). :meth:`LogPosition.parse` reads all three.
"""

from __future__ import annotations

import re
from typing import ClassVar, Final, final

import attrs

from walkit.errors import InvalidArgumentError

#: Largest sequence number or entry id a position may hold.
MAX_COMPONENT: Final = 2**63 - 1

_TEXT = re.compile(r"([0-9]{1,19}):([0-9]{1,19})")


def _component(name: str, value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgumentError(f"log position {name} must be an int, not {value!r}")
    if not 0 <= value <= MAX_COMPONENT:
        raise InvalidArgumentError(f"log position {name} {value} is outside 0 .. 2^63-1")
    return value


@final
@attrs.frozen(order=True)
class LogPosition:
    """Where a record is in a log: totally ordered, hashable, round-trips through ``str``.

    ``LogPosition.EARLIEST`` sorts before every record and ``LogPosition.LATEST`` after every
    record (a reader started there sees only records appended after it started).
    """

    ledger_seq: int = attrs.field(validator=lambda _i, _a, v: _component("ledger_seq", v))
    entry_id: int = attrs.field(validator=lambda _i, _a, v: _component("entry_id", v))

    EARLIEST: ClassVar[LogPosition]
    LATEST: ClassVar[LogPosition]

    def __str__(self) -> str:
        if self == LogPosition.EARLIEST:
            return "earliest"
        if self == LogPosition.LATEST:
            return "latest"
        return f"{self.ledger_seq}:{self.entry_id}"

    def __repr__(self) -> str:
        return f"LogPosition({str(self)!r})"

    @classmethod
    def parse(cls, text: str) -> LogPosition:
        """``"SEQ:ENTRY"``, ``"earliest"`` or ``"latest"``; InvalidArgumentError otherwise."""
        if not isinstance(text, str):
            raise InvalidArgumentError(
                f"a log position must be a string, not {type(text).__name__}"
            )
        if text == "earliest":
            return cls.EARLIEST
        if text == "latest":
            return cls.LATEST
        match = _TEXT.fullmatch(text)
        if match is None:
            raise InvalidArgumentError(
                f"bad log position {text!r}: expected SEQ:ENTRY (e.g. 3:17), earliest or latest"
            )
        return cls(int(match.group(1)), int(match.group(2)))

    @property
    def is_sentinel(self) -> bool:
        """EARLIEST or LATEST (not a record's position)."""
        return self in (LogPosition.EARLIEST, LogPosition.LATEST)

    def next(self) -> LogPosition:
        """The position just after this one in the same ledger (a valid reader start: a reader
        moves on to the next ledger when this ledger ends before it)."""
        if self.entry_id == MAX_COMPONENT:
            raise InvalidArgumentError(f"no position after {self}")
        return LogPosition(self.ledger_seq, self.entry_id + 1)


LogPosition.EARLIEST = LogPosition(0, 0)
LogPosition.LATEST = LogPosition(MAX_COMPONENT, MAX_COMPONENT)


def position(value: LogPosition | str) -> LogPosition:
    """A LogPosition from a position or its string form (InvalidArgumentError otherwise)."""
    if isinstance(value, LogPosition):
        return value
    return LogPosition.parse(value)
