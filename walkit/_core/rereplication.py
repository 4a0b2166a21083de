"""Rereplication decisions (BookKeeper's AutoRecovery), pure and synchronous.

Given a ledger's metadata and the bookies to replace, these say which fragments lost a copy,
which entries of each the replacement must receive, which bookie the ledger's placement policy
picks (or why none fits), what a copier does with a batch read's answer, and the new metadata
that swaps the bookie in (for a CAS). The trio code in :mod:`walkit.autorecovery` only reads,
writes and waits.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence, Set
from typing import Protocol, final

import attrs

from walkit._core.distribution import stores_entry
from walkit._core.ledger_metadata import LedgerMetadata, LedgerState
from walkit._core.types import BookieId
from walkit._core.wire import CopyFragmentRequest, CopyFragmentResponse
from walkit.errors import InvalidMetadataError, WalkitError


class ReplacementPolicy(Protocol):
    """The part of ``walkit.placement.EnsemblePlacementPolicy`` these decisions use."""

    def replace_bookie(
        self,
        ensemble_size: int,
        write_quorum: int,
        ack_quorum: int,
        current_ensemble: Sequence[BookieId],
        bookie_to_replace: BookieId,
        exclude: Set[BookieId] = ...,
        custom_metadata: Mapping[str, bytes] | None = ...,
    ) -> BookieId: ...


class FragmentCopies(Protocol):
    """What answers a bookie's COPY_FRAGMENT requests (``walkit.autorecovery``'s copier): the
    bookie names this, never the client that implements it."""

    async def copy(self, req: CopyFragmentRequest) -> CopyFragmentResponse: ...


class LocalCopies(Protocol):
    """The bookie a worker runs in, storing copies given to it in the same process."""

    @property
    def bookie_id(self) -> BookieId: ...

    def serve_fragment_copies(self, copier: FragmentCopies | None) -> None:
        """Have the bookie answer COPY_FRAGMENT requests with ``copier`` (None: refuse them)."""
        ...

    async def store(
        self, ledger_id: int, master_key: bytes, entries: Sequence[tuple[int, bytes]]
    ) -> list[str]:
        """Store ``(entry id, packet)`` pairs as recovery copies, exactly as adds flagged
        RECOVERY | COPY are stored; return a line per entry refused (empty: all durable)."""
        ...


@final
@attrs.frozen
class FragmentGap:
    """One fragment's copy on ``bookie`` (position ``index`` of its ensemble) is to be rebuilt.

    The fragment holds entries ``first_entry .. last_entry`` (``last_entry < first_entry``
    when it holds none).
    """

    first_entry: int
    last_entry: int
    index: int
    bookie: BookieId
    ensemble: tuple[BookieId, ...]

    def entries(self, ensemble_size: int, write_quorum: int) -> Iterator[int]:
        """The entry ids this copy holds (those whose write set includes ``index``)."""
        for entry_id in range(self.first_entry, self.last_entry + 1):
            if stores_entry(self.index, entry_id, ensemble_size, write_quorum):
                yield entry_id

    def entry_count(self, ensemble_size: int, write_quorum: int) -> int:
        return sum(1 for _ in self.entries(ensemble_size, write_quorum))


class Action(enum.Enum):
    """What a worker does with a marked ledger now."""

    REREPLICATE = "rereplicate"  # closed: copy and swap
    WAIT = "wait"  # open, within the writer's grace period
    RECOVER = "recover"  # open past the grace period: fence and close it first, then rereplicate
    DONE = "done"  # nothing lists a bookie to replace: drop the marker


def fragment_ranges(md: LedgerMetadata) -> list[tuple[int, int, tuple[BookieId, ...]]]:
    """``(first, last, ensemble)`` of every fragment of a CLOSED ledger."""
    if md.state is not LedgerState.CLOSED:
        raise InvalidMetadataError(
            f"ledger {md.ledger_id}: fragments of an open ledger have no end"
        )
    out: list[tuple[int, int, tuple[BookieId, ...]]] = []
    for i, (first, ensemble) in enumerate(md.fragments):
        last = md.fragments[i + 1][0] - 1 if i + 1 < len(md.fragments) else md.last_entry_id
        out.append((first, last, ensemble))
    return out


def gaps_for(md: LedgerMetadata, bookies: Collection[BookieId]) -> list[FragmentGap]:
    """Every (fragment, position) of a closed ledger that lists one of ``bookies``."""
    wanted = set(bookies)
    return [
        FragmentGap(first, last, index, bookie, ensemble)
        for first, last, ensemble in fragment_ranges(md)
        for index, bookie in enumerate(ensemble)
        if bookie in wanted
    ]


def missing_bookies(md: LedgerMetadata, registered: Collection[BookieId]) -> set[BookieId]:
    """The bookies ``md`` lists that are not registered (neither writable nor read-only)."""
    return md.all_bookies() - set(registered)


def next_action(
    md: LedgerMetadata,
    to_replace: Collection[BookieId],
    *,
    open_since: float | None,
    now: float,
    grace: float,
) -> Action:
    """Decide what to do with a marked ledger.

    ``open_since``: when this worker first saw the ledger open (None if it never did).
    """
    if not md.all_bookies() & set(to_replace):
        return Action.DONE
    if md.state is LedgerState.CLOSED:
        return Action.REREPLICATE
    if open_since is not None and now - open_since >= grace:
        return Action.RECOVER
    return Action.WAIT


@final
@attrs.frozen
class NoReplacement:
    """Why no bookie can take ``bookie``'s place in a fragment."""

    gap: FragmentGap
    reason: str


def choose_replacements(
    policy: ReplacementPolicy,
    md: LedgerMetadata,
    gaps: Sequence[FragmentGap],
    avoid: Collection[BookieId] = (),
) -> dict[tuple[int, int], BookieId] | NoReplacement:
    """A replacement for each gap, keyed by ``(first_entry, index)``, through ``policy``.

    The policy sees the fragment's ensemble as it will be (earlier replacements of the same
    fragment applied), so rack and region rules hold for the result. ``avoid``: bookies never
    to pick (the ones being replaced, bookies that refused the ledger). The first gap without
    a valid replacement gives :class:`NoReplacement` with the policy's reason.
    """
    chosen: dict[tuple[int, int], BookieId] = {}
    by_fragment: dict[int, list[BookieId]] = {}
    replaced = {gap.bookie for gap in gaps} | set(avoid)
    for gap in gaps:
        ensemble = by_fragment.setdefault(gap.first_entry, list(gap.ensemble))
        exclude = frozenset(ensemble) | replaced
        try:
            new = policy.replace_bookie(
                md.ensemble_size,
                md.write_quorum,
                md.ack_quorum,
                list(ensemble),
                gap.bookie,
                exclude,
                md.custom_metadata,
            )
        except WalkitError as exc:
            return NoReplacement(gap, str(exc))
        if new in exclude:  # a policy bug must not put a bookie twice in a fragment
            return NoReplacement(gap, f"the placement policy offered {new}, which is excluded")
        ensemble[gap.index] = new
        chosen[(gap.first_entry, gap.index)] = new
    return chosen


def prefer_local(
    chosen: Mapping[tuple[int, int], BookieId],
    gaps: Sequence[FragmentGap],
    local: BookieId,
    *,
    writable: Collection[BookieId],
    location_of: Callable[[BookieId], str],
    avoid: Collection[BookieId] = (),
) -> dict[tuple[int, int], BookieId]:
    """``chosen`` with ``local`` (the bookie a worker runs in) taking one replacement's place
    in each fragment where it can: its copies are then stored without a network hop, as
    BookKeeper's replication workers copy to their own bookie.

    Only in place of a replacement in the same network location (``/region/rack``), so every
    rule a placement policy bases on locations still holds, and only where ``local`` is
    writable, not avoided, and not in the fragment already.
    """
    out = dict(chosen)
    if local not in writable or local in avoid:
        return out
    home = location_of(local)
    by_fragment: dict[int, list[FragmentGap]] = {}
    for gap in gaps:
        by_fragment.setdefault(gap.first_entry, []).append(gap)
    for first, fragment_gaps in by_fragment.items():
        ensemble = set(fragment_gaps[0].ensemble)
        ensemble.update(out[(first, g.index)] for g in fragment_gaps)
        if local in ensemble:
            continue
        for gap in fragment_gaps:
            key = (first, gap.index)
            if location_of(out[key]) == home:
                out[key] = local
                break
    return out


def copied_by_replacement(
    enabled: bool,
    rate_limited: bool,
    target: BookieId,
    own_bookie: BookieId | None,
) -> bool:
    """Whether a rereplicator asks ``target`` to copy a fragment from the replicas itself
    (COPY_FRAGMENT) rather than relaying every entry: when that is ``enabled``, the copies are
    not ``rate_limited`` (the rereplicator paces limited copies itself, a chunk at a time), and
    ``target`` is not the rereplicator's ``own_bookie`` (whose copies skip the network already)."""
    return enabled and not rate_limited and target != own_bookie


#: Most entries one COPY_FRAGMENT request may span (ids from its first to its last entry, of
#: which the copy at its position stores those in its write sets).
MAX_COPY_SPAN = 64 * 1024


def copy_request_gap(
    md: LedgerMetadata,
    fragment_first_entry: int,
    index: int,
    first_entry: int,
    last_entry: int,
    this_bookie: BookieId,
) -> FragmentGap | str:
    """The part of a fragment a COPY_FRAGMENT request asks ``this_bookie`` to copy to itself,
    or why the request does not fit the ledger's metadata: the ledger must be closed, the
    fragment start at ``fragment_first_entry``, ``index`` be a position of its ensemble,
    ``first_entry .. last_entry`` lie within it (at most ``MAX_COPY_SPAN`` ids), and this bookie
    be outside the ensemble (it would hold the entries already, or copy from itself)."""
    if md.state is not LedgerState.CLOSED:
        return f"ledger {md.ledger_id} is not closed (its writer or recovery owns it)"
    found = [r for r in fragment_ranges(md) if r[0] == fragment_first_entry]
    if not found:
        return f"ledger {md.ledger_id} has no fragment starting at entry {fragment_first_entry}"
    ((first, last, ensemble),) = found
    if not 0 <= index < len(ensemble):
        return f"position {index} is not in the fragment's ensemble of {len(ensemble)}"
    if this_bookie in ensemble:
        return f"this bookie ({this_bookie}) is in the fragment's ensemble already"
    if not first <= first_entry <= last_entry <= last:
        return f"entries {first_entry}..{last_entry} are not within the fragment's {first}..{last}"
    if last_entry - first_entry >= MAX_COPY_SPAN:
        return f"entries {first_entry}..{last_entry} span more than {MAX_COPY_SPAN} ids"
    return FragmentGap(first_entry, last_entry, index, ensemble[index], ensemble)


def batch_entries(average_packet: float | None, most: int, max_bytes: int) -> int:
    """Entries to ask of a replica in one batch read: ``most``, fewer when packets of the
    ``average_packet`` size seen so far (None: none seen yet) would not all fit the answer's
    ``max_bytes``. An answer stops before the packet that would pass ``max_bytes``, and the
    copier asks again for the rest: 16 entries of 64 KiB (each packet a header longer) came
    back as 15, then 1, twice the requests and answers for the same bytes."""
    if average_packet is None or average_packet <= 0:
        return most
    return max(1, min(most, int(max_bytes // average_packet)))


@final
@attrs.frozen
class BatchAnswerPlan:
    """What a copier does with the answer to a batch read of the entries ``run`` from one
    replica: keep ``got`` (entry, packet: good), send each of ``alone`` (entry, why) on by
    itself to the replicas after this one (or to this one first when ``same_first``), and ask
    this replica again for ``again``."""

    got: list[tuple[int, bytes]]
    alone: list[tuple[int, str]]
    again: list[int]
    same_first: bool = False


def plan_batch_answer(
    run: Sequence[int],
    status: str,
    first_entry_id: int | None,
    packets: Sequence[bytes],
    bad: Callable[[int, bytes], str | None],
) -> BatchAnswerPlan:
    """Decide what to do with a batch read's answer (``status``: its status code's name;
    ``first_entry_id`` None when the answer is not a batch answer at all; ``bad(entry,
    packet)``: why the packet is not that entry's, None if it is).

    - OK: the packets are the run's first entries; each that ``bad`` refuses goes on alone (a
      bad copy here says nothing of the others), and entries the answer left out are asked
      again (an answer stops at a byte limit).
    - NO_SUCH_ENTRY: only the first is missing here; it goes on alone, the rest are asked again.
    - BAD_REQUEST: a bookie that does not know batch reads (an older one): every entry alone,
      this replica first.
    - Anything else (an error, an answer for other entries): every entry goes on alone.
    """
    if status == "NO_SUCH_ENTRY" and len(run) > 1:
        return BatchAnswerPlan([], [(run[0], "NO_SUCH_ENTRY")], list(run[1:]))
    if status == "BAD_REQUEST":
        return BatchAnswerPlan([], [(e, "") for e in run], [], same_first=True)
    if status != "OK" or first_entry_id is None:
        return BatchAnswerPlan([], [(e, status) for e in run], [])
    if first_entry_id != run[0] or not packets or len(packets) > len(run):
        return BatchAnswerPlan([], [(e, "a batch answer for other entries") for e in run], [])
    got: list[tuple[int, bytes]] = []
    alone: list[tuple[int, str]] = []
    for entry_id, packet in zip(run, packets, strict=False):
        why = bad(entry_id, packet)
        if why is None:
            got.append((entry_id, packet))
        else:
            alone.append((entry_id, why))
    return BatchAnswerPlan(got, alone, list(run[len(packets) :]))


def with_replacements(
    md: LedgerMetadata,
    swaps: Mapping[tuple[int, int], BookieId],
    old: Mapping[tuple[int, int], BookieId],
) -> LedgerMetadata:
    """``md`` with ``swaps[(first_entry, index)]`` in place of ``old[(first_entry, index)]``.

    Raises InvalidMetadataError if a fragment no longer starts there or no longer lists the old
    bookie at that position (the metadata changed: plan again).
    """
    fragments = {first: list(ensemble) for first, ensemble in md.fragments}
    for key, new in swaps.items():
        first, index = key
        ensemble = fragments.get(first)
        if ensemble is None or index >= len(ensemble) or ensemble[index] != old[key]:
            raise InvalidMetadataError(
                f"ledger {md.ledger_id}: fragment {first} no longer lists {old[key]} at {index}"
            )
        ensemble[index] = new
    # LedgerMetadata's own checks refuse a duplicate bookie in a fragment.
    return attrs.evolve(
        md, fragments=tuple((first, tuple(ensemble)) for first, ensemble in fragments.items())
    )


@final
@attrs.define
class LostBookies:
    """When each unregistered bookie was first seen gone, and which are due to be marked.

    ``now`` is the caller's clock (trio's). A bookie is *due* once it has been gone for the
    lost-bookie delay; one that registers again is forgotten (its restart beat the delay).
    """

    since: dict[BookieId, float] = attrs.Factory(dict)

    def update(
        self, registered: Collection[BookieId], gone: Collection[BookieId], now: float
    ) -> None:
        """``registered``: the bookies registered now; ``gone``: bookies known to be absent
        (they left the registration lists, or ledgers list them and they are not registered)."""
        alive = set(registered)
        for bookie in list(self.since):
            if bookie in alive:
                del self.since[bookie]
        for bookie in gone:
            if bookie not in alive:
                self.since.setdefault(bookie, now)

    def due(self, now: float, delay: float) -> set[BookieId]:
        # Compared as deadlines (``t + delay``), exactly as next_deadline computes them: a
        # caller woken at the deadline must find the bookie due (``now - t`` may round below
        # ``delay`` and spin the caller at that instant for ever).
        return {b for b, t in self.since.items() if now >= t + delay}

    def next_deadline(self, now: float, delay: float) -> float | None:
        """The earliest time a bookie not yet due becomes due (None if none is waiting)."""
        waiting = [t + delay for t in self.since.values() if now < t + delay]
        return min(waiting) if waiting else None
