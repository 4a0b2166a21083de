"""Pure checker functions over a :class:`History` (no trio needed to call them).

Each returns a :class:`CheckResult` with ``ok``, counts, and a few examples of violations. They
encode the invariants of the protocol's TLA+ specification (design section 3):

- :func:`check_no_lost_acks`: every entry a writer was told is durable is read back, same bytes.
- :func:`check_no_divergence`: a closed ledger's last entry is >= every acknowledged entry, every
  observer saw the same last entry, and a writer's successful close agrees with it.
- :func:`check_entry_replication` / :func:`check_closed_ledgers_replicated`: every entry of a
  closed ledger is stored, with the same bytes, on at least Qa bookies of its write set.
- :func:`check_readers_agree`: every read returns consecutive entries in write order, all readers
  see the same bytes for an entry, and no payload shows up twice.
- :func:`check_fenced_writer`: once fencing completed, the old writer is acknowledged no add it
  issued afterwards, and nothing past the recovered end.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Final, final

import attrs

from walkit._core.distribution import write_set
from walkit._core.ledger_metadata import LedgerMetadata, LedgerState
from walkit._core.types import BookieId
from walkit.testing._history import (
    AddAcked,
    AddInvoked,
    CloseAcked,
    Event,
    FenceCompleted,
    History,
    LedgerClosedObserved,
    ReadObserved,
    StoredCopies,
)

#: How many examples a result keeps.
MAX_EXAMPLES: Final = 5


@final
@attrs.frozen
class CheckResult:
    """The outcome of one checker: ``ok``, counts of what was checked/violated, examples."""

    name: str
    ok: bool
    counts: Mapping[str, int]
    examples: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        counts = ", ".join(f"{k}={v}" for k, v in self.counts.items())
        head = f"{self.name}: {'ok' if self.ok else 'FAILED'} ({counts})"
        return "\n  ".join([head, *self.examples])


class _Tally:
    def __init__(self, name: str, *keys: str) -> None:
        self.name = name
        self.counts: dict[str, int] = dict.fromkeys(keys, 0)
        self.examples: list[str] = []
        self.violations = 0

    def count(self, key: str, n: int = 1) -> None:
        self.counts[key] = self.counts.get(key, 0) + n

    def violation(self, key: str, example: str) -> None:
        self.count(key)
        self.violations += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(example)

    def result(self) -> CheckResult:
        return CheckResult(self.name, self.violations == 0, dict(self.counts), tuple(self.examples))


def _events(history: History | Iterable[Event]) -> list[Event]:
    return list(history.events if isinstance(history, History) else history)


def _short(payload: bytes) -> str:
    return repr(payload if len(payload) <= 24 else payload[:24] + b"...")


def check_no_lost_acks(history: History | Iterable[Event]) -> CheckResult:
    """Every acknowledged entry is in every final read-back of its ledger, with the same bytes.

    An acknowledged entry of a ledger that was never read back (no ``final`` read) is a
    violation too (``unverified``): the check could not show that it survived.
    """
    events = _events(history)
    tally = _Tally("no_lost_acks", "acked", "verified", "lost", "mismatched", "unverified")
    finals: dict[int, list[ReadObserved]] = defaultdict(list)
    for ev in events:
        if isinstance(ev, ReadObserved) and ev.final:
            finals[ev.ledger_id].append(ev)
    for ev in events:
        if not isinstance(ev, AddAcked):
            continue
        tally.count("acked")
        reads = finals.get(ev.ledger_id)
        if not reads:
            tally.violation(
                "unverified",
                f"ledger {ev.ledger_id} entry {ev.entry_id} (acked to {ev.writer}) was never "
                "read back",
            )
            continue
        good = True
        for read in reads:
            got = dict(read.entries).get(ev.entry_id)
            if got is None:
                good = False
                tally.violation(
                    "lost",
                    f"ledger {ev.ledger_id} entry {ev.entry_id} {_short(ev.payload)} acked to "
                    f"{ev.writer} at t={ev.time:.3f} is missing from {read.reader}'s read-back "
                    f"(it has {len(read.entries)} entries)",
                )
            elif got != ev.payload:
                good = False
                tally.violation(
                    "mismatched",
                    f"ledger {ev.ledger_id} entry {ev.entry_id}: acked {_short(ev.payload)} "
                    f"to {ev.writer}, {read.reader} read back {_short(got)}",
                )
        if good:
            tally.count("verified")
    return tally.result()


def check_no_divergence(history: History | Iterable[Event]) -> CheckResult:
    """For each closed ledger: last entry >= highest acknowledged entry; all observers agree on
    the last entry; a writer's successful close is at that same entry."""
    events = _events(history)
    tally = _Tally(
        "no_divergence", "closed_ledgers", "divergent", "disagreeing_closes", "bad_writer_close"
    )
    closed: dict[int, LedgerClosedObserved] = {}
    max_acked: dict[int, AddAcked] = {}
    for ev in events:
        if isinstance(ev, AddAcked):
            best = max_acked.get(ev.ledger_id)
            if best is None or ev.entry_id > best.entry_id:
                max_acked[ev.ledger_id] = ev
        elif isinstance(ev, LedgerClosedObserved):
            first = closed.setdefault(ev.ledger_id, ev)
            if first.last_entry_id != ev.last_entry_id:
                tally.violation(
                    "disagreeing_closes",
                    f"ledger {ev.ledger_id} seen closed at {first.last_entry_id} by "
                    f"{first.observer} and at {ev.last_entry_id} by {ev.observer}",
                )
    tally.count("closed_ledgers", len(closed))
    for ledger_id, seen in sorted(closed.items()):
        acked = max_acked.get(ledger_id)
        if acked is not None and acked.entry_id > seen.last_entry_id:
            tally.violation(
                "divergent",
                f"ledger {ledger_id}: {acked.writer} was acknowledged entry {acked.entry_id} "
                f"but the ledger closed at {seen.last_entry_id}",
            )
    for ev in events:
        if isinstance(ev, CloseAcked):
            seen_close = closed.get(ev.ledger_id)
            if seen_close is not None and seen_close.last_entry_id != ev.last_entry_id:
                tally.violation(
                    "bad_writer_close",
                    f"ledger {ev.ledger_id}: {ev.writer}'s close succeeded at "
                    f"{ev.last_entry_id} but the ledger is closed at {seen_close.last_entry_id}",
                )
    return tally.result()


def check_entry_replication(
    metadata: LedgerMetadata, copies: Mapping[BookieId, Mapping[int, bytes]]
) -> CheckResult:
    """Every entry 0..last of a closed ledger is held by >= Qa bookies of its write set, and all
    copies of an entry have the same bytes. ``copies[bookie][entry_id]`` is the stored payload."""
    tally = _Tally("entry_replication", "entries", "under_replicated", "conflicting_copies")
    _replication(tally, metadata, copies)
    return tally.result()


def _replication(
    tally: _Tally, metadata: LedgerMetadata, copies: Mapping[BookieId, Mapping[int, bytes]]
) -> None:
    lid = metadata.ledger_id
    if metadata.state is not LedgerState.CLOSED:
        tally.violation("not_closed", f"ledger {lid} is {metadata.state.name}, not CLOSED")
        return
    for entry_id in range(metadata.last_entry_id + 1):
        tally.count("entries")
        ensemble = metadata.ensemble_for(entry_id)
        members = [
            ensemble[i] for i in write_set(entry_id, metadata.ensemble_size, metadata.write_quorum)
        ]
        holders = {b: copies[b][entry_id] for b in members if entry_id in copies.get(b, {})}
        if len(holders) < metadata.ack_quorum:
            tally.violation(
                "under_replicated",
                f"ledger {lid} entry {entry_id} is on {len(holders)} of its write set "
                f"{[str(b) for b in members]} (Qa={metadata.ack_quorum}): "
                f"{sorted(str(b) for b in holders)}",
            )
        if len(set(holders.values())) > 1:
            tally.violation(
                "conflicting_copies",
                f"ledger {lid} entry {entry_id} has different bytes on "
                f"{sorted(str(b) for b in holders)}",
            )


def check_closed_ledgers_replicated(history: History | Iterable[Event]) -> CheckResult:
    """:func:`check_entry_replication` for every :class:`StoredCopies` in the history."""
    tally = _Tally("entry_replication", "ledgers", "entries", "under_replicated")
    seen: list[StoredCopies] = []
    for ev in _events(history):
        if isinstance(ev, StoredCopies):
            if any(ev.metadata == s.metadata and ev.copies == s.copies for s in seen):
                continue  # the same snapshot recorded again (a retried read-back)
            seen.append(ev)
            tally.count("ledgers")
            _replication(tally, ev.metadata, ev.copies)
    return tally.result()


def check_readers_agree(history: History | Iterable[Event]) -> CheckResult:
    """Every read returns consecutive entries from where it started; all readers (and the
    writer's acknowledgements) agree on each entry's bytes; entries are in the order their
    appends were issued; no payload appears more often than it was appended."""
    events = _events(history)
    tally = _Tally(
        "readers_agree", "reads", "entries_read", "gaps", "disagreements", "reordered", "duplicates"
    )
    agreed: dict[tuple[int, int], tuple[bytes, str]] = {}
    for ev in events:
        if isinstance(ev, AddAcked):
            agreed.setdefault((ev.ledger_id, ev.entry_id), (ev.payload, f"writer {ev.writer}"))
    invoked_at: dict[tuple[str, bytes], list[int]] = defaultdict(list)
    invocations: Counter[tuple[int, bytes]] = Counter()
    for ev in events:
        if isinstance(ev, AddInvoked):
            invoked_at[(ev.writer, ev.payload)].append(ev.seq)
            invocations[(ev.ledger_id, ev.payload)] += 1
    payload_writer = {payload: writer for writer, payload in invoked_at}

    for ev in events:
        if not isinstance(ev, ReadObserved):
            continue
        tally.count("reads")
        tally.count("entries_read", len(ev.entries))
        ids = [e for e, _ in ev.entries]
        expected = list(range(ev.first_entry_id, ev.first_entry_id + len(ids)))
        if ids != expected:
            tally.violation(
                "gaps",
                f"{ev.reader} read ledger {ev.ledger_id} from {ev.first_entry_id} and got "
                f"entry ids {_ids(ids)}",
            )
        for entry_id, payload in ev.entries:
            key = (ev.ledger_id, entry_id)
            first = agreed.setdefault(key, (payload, ev.reader))
            if first[0] != payload:
                tally.violation(
                    "disagreements",
                    f"ledger {ev.ledger_id} entry {entry_id}: {first[1]} has {_short(first[0])}, "
                    f"{ev.reader} read {_short(payload)}",
                )

    by_ledger: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
    for (ledger_id, entry_id), (payload, _) in sorted(agreed.items()):
        by_ledger[ledger_id].append((entry_id, payload))
    for ledger_id, entries in by_ledger.items():
        _order_and_duplicates(tally, ledger_id, entries, invoked_at, payload_writer, invocations)
    return tally.result()


def _order_and_duplicates(
    tally: _Tally,
    ledger_id: int,
    entries: Sequence[tuple[int, bytes]],
    invoked_at: Mapping[tuple[str, bytes], Sequence[int]],
    payload_writer: Mapping[bytes, str],
    invocations: Counter[tuple[int, bytes]],
) -> None:
    seen: Counter[bytes] = Counter()
    last: dict[str, tuple[int, int]] = {}  # writer -> (entry id, invocation seq)
    for entry_id, payload in entries:
        seen[payload] += 1
        writer = payload_writer.get(payload)
        if writer is None:
            continue
        times = invoked_at[(writer, payload)]
        invoked = times[min(seen[payload], len(times)) - 1]
        previous = last.get(writer)
        if previous is not None and invoked < previous[1]:
            tally.violation(
                "reordered",
                f"ledger {ledger_id}: entry {entry_id} {_short(payload)} was appended by "
                f"{writer} before entry {previous[0]}",
            )
        last[writer] = (entry_id, invoked)
    for payload, n in seen.items():
        allowed = invocations.get((ledger_id, payload), 0)
        if allowed and n > allowed:
            tally.violation(
                "duplicates",
                f"ledger {ledger_id}: {_short(payload)} appended {allowed} time(s) but stored "
                f"at {n} entries",
            )


def check_fenced_writer(history: History | Iterable[Event]) -> CheckResult:
    """After a client finished fencing a ledger, no other writer of it is acknowledged an add
    that it issued after that point, or an entry past the end recovery decided."""
    events = _events(history)
    tally = _Tally("fenced_writer", "fences", "acks_after_fence", "fenced_acks", "past_end")
    fenced: dict[int, FenceCompleted] = {}
    closed: dict[int, int] = {}
    for ev in events:
        if isinstance(ev, FenceCompleted):
            fenced.setdefault(ev.ledger_id, ev)
        elif isinstance(ev, LedgerClosedObserved):
            closed.setdefault(ev.ledger_id, ev.last_entry_id)
    tally.count("fences", len(fenced))
    for ev in events:
        if not isinstance(ev, AddAcked):
            continue
        fence = fenced.get(ev.ledger_id)
        if fence is None or ev.seq < fence.seq or ev.writer == fence.client:
            continue
        tally.count("acks_after_fence")
        if ev.invoked_seq > fence.seq:
            tally.violation(
                "fenced_acks",
                f"ledger {ev.ledger_id}: {ev.writer} issued {_short(ev.payload)} after "
                f"{fence.client} completed fencing (t={fence.time:.3f}) and was acknowledged "
                f"entry {ev.entry_id}",
            )
        end = closed.get(ev.ledger_id)
        if end is not None and ev.entry_id > end:
            tally.violation(
                "past_end",
                f"ledger {ev.ledger_id}: {ev.writer} was acknowledged entry {ev.entry_id} after "
                f"fencing, past the recovered end {end}",
            )
    return tally.result()


def check_all(history: History | Iterable[Event]) -> list[CheckResult]:
    """Every checker over one history."""
    events = _events(history)
    return [
        check_no_lost_acks(events),
        check_no_divergence(events),
        check_closed_ledgers_replicated(events),
        check_readers_agree(events),
        check_fenced_writer(events),
    ]


def assert_ok(results: Iterable[CheckResult], context: str = "") -> None:
    """Raise AssertionError listing every failed result (and ``context``, e.g. the seed)."""
    results = list(results)
    failed = [r for r in results if not r.ok]
    if failed:
        lines = [str(r) for r in failed]
        if context:
            lines.append(context)
        raise AssertionError("\n".join(lines))


def _ids(ids: Sequence[int]) -> str:
    if len(ids) <= 12:
        return str(ids)
    return f"{ids[:6]}...{ids[-6:]}"
