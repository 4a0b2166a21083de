"""Positions in a log: (ledger sequence number, entry id, slot).

A log is a chain of ledgers; each ledger gets a per-log sequence number when it joins the log
(1, 2, 3, ...; never reused, gaps allowed where empty ledgers were dropped). Records are packed
into entries (record sets), so a record's position is the sequence number of its ledger, the
entry id there, and its slot in the entry (DistributedLog's DLSN). Positions order across
ledgers. Entries of logs written before record sets hold one record, at slot 0.

``str(pos)`` is ``"SEQ:ENTRY:SLOT"`` (``"3:17:2"``); the two sentinels print as ``"earliest"``
(before every record) and ``"latest"`` (after every record). :meth:`LogPosition.parse` reads
these and the older ``"SEQ:ENTRY"`` (slot 0).
"""

from __future__ import annotations

import re
from typing import ClassVar, Final, final

import attrs

from walkit.errors import InvalidArgumentError

#: Largest sequence number or entry id a position may hold.
MAX_COMPONENT: Final = 2**63 - 1

_TEXT = re.compile(r"([0-9]{1,19}):([0-9]{1,19})(?::([0-9]{1,19}))?")


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
    #: The record's index in its entry (0 for the first record, and in old logs).
    slot: int = attrs.field(default=0, validator=lambda _i, _a, v: _component("slot", v))

    EARLIEST: ClassVar[LogPosition]
    LATEST: ClassVar[LogPosition]

    def __str__(self) -> str:
        if self == LogPosition.EARLIEST:
            return "earliest"
        if self == LogPosition.LATEST:
            return "latest"
        return f"{self.ledger_seq}:{self.entry_id}:{self.slot}"

    def __repr__(self) -> str:
        return f"LogPosition({str(self)!r})"

    @classmethod
    def parse(cls, text: str) -> LogPosition:
        """``"SEQ:ENTRY:SLOT"``, ``"SEQ:ENTRY"`` (slot 0), ``"earliest"`` or ``"latest"``;
        InvalidArgumentError otherwise."""
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
                f"bad log position {text!r}: expected SEQ:ENTRY:SLOT (e.g. 3:17:0), "
                "earliest or latest"
            )
        slot = match.group(3)
        return cls(int(match.group(1)), int(match.group(2)), 0 if slot is None else int(slot))

    @property
    def is_sentinel(self) -> bool:
        """EARLIEST or LATEST (not a record's position)."""
        return self in (LogPosition.EARLIEST, LogPosition.LATEST)

    def next(self) -> LogPosition:
        """The position just after this one in the same entry (a valid reader start: a reader
        moves on to the next entry when this one holds fewer records, and to the next ledger
        when this ledger ends before it)."""
        if self.slot == MAX_COMPONENT:
            raise InvalidArgumentError(f"no position after {self}")
        return LogPosition(self.ledger_seq, self.entry_id, self.slot + 1)

    @classmethod
    def _of(cls, ledger_seq: int, entry_id: int, slot: int) -> LogPosition:
        """A position from components known to be valid (the hot paths of writers and
        readers: validation costs more than the rest of a record's bookkeeping)."""
        pos = _new(cls)
        _set_ledger_seq(pos, ledger_seq)
        _set_entry_id(pos, entry_id)
        _set_slot(pos, slot)
        return pos

    def entry_start(self) -> LogPosition:
        """The position of the first record of this position's entry."""
        return LogPosition(self.ledger_seq, self.entry_id, 0)


# The slots' own setters: a frozen class's fields set without its __setattr__ (half the cost
# of object.__setattr__ by name, on every record a writer or reader handles).
_new = object.__new__
_set_ledger_seq = LogPosition.__dict__["ledger_seq"].__set__
_set_entry_id = LogPosition.__dict__["entry_id"].__set__
_set_slot = LogPosition.__dict__["slot"].__set__

LogPosition.EARLIEST = LogPosition(0, 0, 0)
LogPosition.LATEST = LogPosition(MAX_COMPONENT, MAX_COMPONENT, MAX_COMPONENT)


def position(value: LogPosition | str) -> LogPosition:
    """A LogPosition from a position or its string form (InvalidArgumentError otherwise)."""
    if isinstance(value, LogPosition):
        return value
    return LogPosition.parse(value)
