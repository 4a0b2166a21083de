"""Durable named consumers of a log (Pulsar's managed cursors, DistributedLog's subscriptions):
the model of a consumer's node, its commits, what consumers hold back from retention, and a
consumer's lag. Pure and synchronous; ``walkit.log._consumers`` reads and compare-and-sets the
nodes.

A consumer's node is ``/logs/<log>/consumers/<name>``, readable JSON with a format version::

    {"format": 1, "name": "indexer", "position": "3:17:2", "ctime_ms": 1700000000000,
     "mtime_ms": 1700000004200}

``position`` is where the consumer resumes: every record before it is committed (a commit of
a record's position stores the position just after it), ``earliest`` when it starts at the
log's first record and has committed nothing yet. It only moves forward. ``ctime_ms`` and
``mtime_ms`` are the wall-clock times of its creation and last commit (0: unknown).

Retention (:func:`consumer_hold`): a ledger goes only when every consumer's position lies past
it, unless a consumer's backlog exceeds the log's quota (``max_backlog_records`` /
``max_backlog_bytes``): that consumer no longer holds anything back, and once retention
truncates past its position it is *behind* (its next read raises ConsumerBackloggedError).
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterable, Sequence
from typing import Any, Final, final

import attrs

from walkit._core.log_metadata import check_name
from walkit._core.log_position import LogPosition
from walkit._core.retention import LedgerStats
from walkit.errors import InvalidArgumentError, InvalidMetadataError, WalkitError

__all__ = [
    "FORMAT_VERSION",
    "BacklogQuota",
    "ConsumerHold",
    "ConsumerState",
    "DeliveryCount",
    "Lag",
    "LedgerCounts",
    "backlog",
    "check_consumer_name",
    "consumer_hold",
    "lag",
    "resume_after",
]

FORMAT_VERSION: Final = 1
#: Entries a :class:`DeliveryCount` remembers at most (a consumer that never commits).
MAX_MARKS: Final = 65_536


def check_consumer_name(name: object) -> str:
    """``name`` if it is a valid consumer name (the rules of log names); InvalidArgumentError
    otherwise."""
    return check_name(name, "consumer")


def resume_after(pos: LogPosition) -> LogPosition:
    """Where a consumer that committed the record at ``pos`` resumes (the position just after
    it: a valid reader start)."""
    if pos.is_sentinel:
        raise InvalidArgumentError(f"commit a record's position, not {pos}")
    return pos.next()


@final
@attrs.frozen
class ConsumerState:
    """What the metadata store knows of one consumer."""

    name: str
    #: Where it resumes (see the module docs).
    position: LogPosition = LogPosition.EARLIEST
    ctime_ms: int = 0
    mtime_ms: int = 0

    def __attrs_post_init__(self) -> None:
        try:
            check_consumer_name(self.name)
        except InvalidArgumentError as exc:
            raise InvalidMetadataError(str(exc)) from None
        if self.position == LogPosition.LATEST:
            raise InvalidMetadataError(f"consumer {self.name}: position LATEST")
        if self.ctime_ms < 0 or self.mtime_ms < 0:
            raise InvalidMetadataError(f"consumer {self.name}: negative time")

    def committed(self, position: LogPosition, now_ms: int) -> ConsumerState | None:
        """The state after committing everything before ``position`` (a resume position);
        None when that does not move it forward (commits never move back)."""
        if position <= self.position:
            return None
        return attrs.evolve(self, position=position, mtime_ms=max(now_ms, 0))

    def to_bytes(self) -> bytes:
        doc = {
            "format": FORMAT_VERSION,
            "name": self.name,
            "position": str(self.position),
            "ctime_ms": self.ctime_ms,
            "mtime_ms": self.mtime_ms,
        }
        return json.dumps(doc, separators=(",", ":")).encode("utf-8")

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(self.to_bytes())
        return doc

    @classmethod
    def from_bytes(cls, name: str, data: bytes) -> ConsumerState:
        """Parse a consumer's node; anything malformed raises InvalidMetadataError."""
        try:
            doc = json.loads(bytes(data).decode("utf-8"))
            if not isinstance(doc, dict):
                raise TypeError("not a JSON object")
            if doc.get("format") != FORMAT_VERSION:
                raise InvalidMetadataError(
                    f"consumer {name}: metadata format {doc.get('format')!r}; this walkit "
                    f"reads [{FORMAT_VERSION}] (a newer walkit wrote it)"
                )
            if doc.get("name") != name:
                raise InvalidMetadataError(
                    f"consumer {name}: the node names another consumer ({doc.get('name')!r})"
                )
            position = doc["position"]
            if not isinstance(position, str):
                raise TypeError("position is not a string")
            return cls(
                name=name,
                position=LogPosition.parse(position),
                ctime_ms=_int(doc.get("ctime_ms", 0)),
                mtime_ms=_int(doc.get("mtime_ms", 0)),
            )
        except InvalidMetadataError:
            raise
        except (WalkitError, ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
            raise InvalidMetadataError(f"consumer {name}: malformed metadata: {exc}") from exc


def _int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


# --- retention -----------------------------------------------------------------------------


@final
@attrs.frozen
class BacklogQuota:
    """The most a consumer may leave uncommitted and still hold retention back (None: no
    limit of that kind)."""

    records: int | None = None
    size: int | None = None

    def exceeded(self, records: int, size: int) -> bool:
        return (self.records is not None and records > self.records) or (
            self.size is not None and size > self.size
        )


def backlog(position: LogPosition, stats: Sequence[LedgerStats]) -> tuple[int, int]:
    """(records, bytes) a consumer at ``position`` has not committed, as far as the closed
    ledgers' metadata says: the closed ledgers after its own whole, and the rest of its own
    pro rata by entries. The open ledger is not counted (retention never drops it);
    ``stats`` describe the listed ledgers in order (up to the first open one)."""
    records = size = 0
    for s in stats:
        if not s.closed:
            break
        if s.seq < position.ledger_seq:
            continue
        if s.seq > position.ledger_seq or s.entries <= 0:
            records += s.records
            size += s.size
            continue
        left = max(0, s.entries - position.entry_id)
        records += s.records * left // s.entries
        size += s.size * left // s.entries
    return records, size


@final
@attrs.frozen
class ConsumerHold:
    """What a log's consumers ask of retention."""

    #: Ledgers with a lower sequence number may go; None: the consumers hold nothing back.
    keep_from: int | None
    #: The consumers over the quota, which hold nothing back: (name, records, bytes) of
    #: their backlogs.
    released: tuple[tuple[str, int, int], ...] = ()


def consumer_hold(
    consumers: Iterable[ConsumerState], stats: Sequence[LedgerStats], quota: BacklogQuota
) -> ConsumerHold:
    """Which ledgers ``consumers`` keep: every ledger from the one holding the lowest position
    of a consumer within ``quota``."""
    keep_from: int | None = None
    released: list[tuple[str, int, int]] = []
    for consumer in consumers:
        records, size = backlog(consumer.position, stats)
        if quota.exceeded(records, size):
            released.append((consumer.name, records, size))
            continue
        seq = consumer.position.ledger_seq
        keep_from = seq if keep_from is None else min(keep_from, seq)
    return ConsumerHold(keep_from, tuple(released))


# --- lag -----------------------------------------------------------------------------------


@final
@attrs.frozen
class LedgerCounts:
    """What is known of one listed ledger for measuring lags: its readable entries, its
    records and bytes when the metadata says them exactly (a closed ledger), and the records
    and bytes of each entry read from ``scan_from`` on (entries read to count them)."""

    seq: int
    entries: int
    records: int | None = None
    size: int | None = None
    scan_from: int = 0
    scanned_records: tuple[int, ...] = ()
    scanned_sizes: tuple[int, ...] = ()


@final
@attrs.frozen
class Lag:
    """How far a position is behind a log's end: entries, records, and bytes as stored (an
    entry partly committed counts its bytes pro rata by records). ``exact`` is False when part
    of it was estimated from average entry sizes (entries not read, to bound the cost)."""

    entries: int = 0
    records: int = 0
    size: int = 0
    exact: bool = True


def lag(position: LogPosition, ledgers: Sequence[LedgerCounts]) -> Lag:
    """The lag of a reader at ``position`` over ``ledgers`` (the log's listed ledgers, in
    order)."""
    entries = records = size = 0
    exact = True
    for lg in ledgers:
        if lg.seq < position.ledger_seq:
            continue
        own = lg.seq == position.ledger_seq
        first = position.entry_id if own else 0
        slot = position.slot if own else 0
        left = max(0, lg.entries - first)
        entries += left
        if left == 0:
            continue
        if first == 0 and slot == 0 and lg.records is not None and lg.size is not None:
            records += lg.records
            size += lg.size
            continue
        scan_end = lg.scan_from + len(lg.scanned_records)
        counted = 0
        for entry in range(max(first, lg.scan_from), min(lg.entries, scan_end)):
            index = entry - lg.scan_from
            n = lg.scanned_records[index]
            if entry == first and slot:
                left_here = max(0, n - slot)
                records += left_here
                size += lg.scanned_sizes[index] * left_here // max(n, 1)
            else:
                records += n
                size += lg.scanned_sizes[index]
            counted += 1
        missing = left - counted
        if missing > 0:
            exact = False
            per_records, per_size = _averages(lg)
            records += round(missing * per_records)
            size += round(missing * per_size)
    return Lag(entries, records, size, exact)


def _averages(lg: LedgerCounts) -> tuple[float, float]:
    """Records and bytes per entry of a ledger: from its totals, else from what was read."""
    if lg.records is not None and lg.size is not None and lg.entries > 0:
        return lg.records / lg.entries, lg.size / lg.entries
    if lg.scanned_records:
        n = len(lg.scanned_records)
        return sum(lg.scanned_records) / n, sum(lg.scanned_sizes) / n
    return 1.0, 0.0


# --- commit lag ----------------------------------------------------------------------------


@final
class DeliveryCount:
    """Records a consumer handed out and how many of them are committed: its commit lag.

    Counted per entry (one mark when a record of a new entry is handed out), so that a commit
    at any handed-out position finds how many records it covers without remembering each.
    """

    __slots__ = ("_last", "_marks", "committed", "delivered")

    def __init__(self) -> None:
        self.delivered = 0
        self.committed = 0
        #: (ledger seq, entry id, first slot handed out, records handed out before it); a
        #: consumer that never commits forgets the oldest (its lag stays right).
        self._marks: collections.deque[tuple[int, int, int, int]] = collections.deque(
            maxlen=MAX_MARKS
        )
        self._last: tuple[int, int] | None = None

    @property
    def lag(self) -> int:
        """Records handed out and not committed."""
        return self.delivered - self.committed

    def handed_out(self, seq: int, entry_id: int, slot: int) -> None:
        if self._last != (seq, entry_id):
            self._last = (seq, entry_id)
            self._marks.append((seq, entry_id, slot, self.delivered))
        self.delivered += 1

    def commit(self, resume: LogPosition) -> None:
        """Everything before ``resume`` is committed."""
        key = (resume.ledger_seq, resume.entry_id)
        marks = self._marks
        covered = self.delivered
        kept = len(marks)
        for i, (seq, entry_id, slot, before) in enumerate(marks):
            if (seq, entry_id) < key:
                continue
            covered = before
            if (seq, entry_id) == key:
                after = marks[i + 1][3] if i + 1 < len(marks) else self.delivered
                covered += min(max(0, resume.slot - slot), after - before)
            kept = i
            break
        if covered > self.committed:
            self.committed = covered
            for _ in range(kept):
                marks.popleft()
            if not marks:
                self._last = None  # the next record handed out starts a mark again
