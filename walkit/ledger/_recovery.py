"""Open with recovery: fence the ledger, find its end, make that durable, close it.

The decisions are in :mod:`walkit._core.recovery`; this module sends the requests and feeds the
answers in. Phases (see docs/protocol.md):

1. CAS the metadata to IN_RECOVERY (from then on the old writer's ensemble changes fail).
2. Fence the last fragment's ensemble with fencing LAC reads.
3. Read forward from the start LAC with recovery reads, which fence too (apache/bookkeeper#2614).
4. Write each confirmed entry back, byte for byte, to its whole write set as a recovery add.
   A bookie that fails here is replaced; the replacement ensemble is written to first and only
   published in the closing CAS, so a concurrent recovery never reads a fragment that is still
   being filled.
5. CAS the metadata to CLOSED. A lost CAS re-reads: CLOSED means another recovery won (we
   converge on its answer); still IN_RECOVERY means someone changed the ledger, so start again.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable, Sequence
from typing import Final

import anyio

from walkit._core.digest import DigestManager, read_header
from walkit._core.distribution import write_set
from walkit._core.ledger_metadata import LedgerMetadata, LedgerState
from walkit._core.recovery import (
    Answer,
    EntryDecision,
    FenceTracker,
    RecoveryReadTracker,
    RecoveryUndecidable,
    WriteBackTracker,
    recovery_fragment_start,
    recovery_outcome,
    recovery_start_lac,
    refused_answer,
)
from walkit._core.types import INVALID_ENTRY_ID, BookieId
from walkit._core.wire import (
    AddFlag,
    AddRequest,
    ReadFlag,
    ReadLacFlag,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    StatusCode,
    encode_frame,
)
from walkit._logging import get_logger
from walkit.errors import (
    DigestMismatchError,
    LedgerRecoveryError,
    NotEnoughBookiesError,
    TLSError,
    WalkitError,
)
from walkit.ledger._context import ClientContext, check_password
from walkit.metadata import Decision, cas_update

log = get_logger(__name__)

__all__ = ["recover_ledger"]

#: Entries read or written back at once.
WINDOW: Final = 256
#: Times recovery starts over after losing a CAS to a concurrent change, before giving up.
MAX_ROUNDS: Final = 10


class _Inbox:
    """Collects answers of requests sent with ``BookieConnection.send`` for one phase."""

    def __init__(self) -> None:
        self.items: collections.deque[tuple[int, int, Response | None, WalkitError | None]] = (
            collections.deque()
        )
        self._event = anyio.Event()

    def on_response(self, tag: int, status: int, msg: Response | None) -> None:
        self.items.append((tag, status, msg, None))
        self._event.set()

    def on_error(self, tag: int, error: WalkitError) -> None:
        self.items.append((tag, -1, None, error))
        self._event.set()

    async def drain(self) -> list[tuple[int, int, Response | None, WalkitError | None]]:
        if not self.items:
            await self._event.wait()
        self._event = anyio.Event()
        items = list(self.items)
        self.items.clear()
        return items


def _send(
    context: ClientContext,
    bookie: BookieId,
    build: Callable[[int], Request],
    inbox: _Inbox,
    tag: int,
    timeout: float,
) -> None:
    conn = context.pool.get(bookie)
    rid = conn.new_request_id()
    conn.send((encode_frame(build(rid)),), rid, inbox, tag, timeout)


def _read_request(ledger_id: int, entry_id: int, flags: ReadFlag, key: bytes, rid: int) -> Request:
    return ReadRequest(rid, ledger_id, entry_id, flags, key)


def _recovery_add(ledger_id: int, entry_id: int, key: bytes, packet: bytes, rid: int) -> Request:
    return AddRequest(rid, ledger_id, entry_id, key, packet, AddFlag.RECOVERY)


async def recover_ledger(context: ClientContext, ledger_id: int, password: bytes) -> LedgerMetadata:
    """Recover and close ``ledger_id``; return its CLOSED metadata.

    Raises UnauthorizedAccessError (wrong password), NoSuchLedgerError, and the retryable
    LedgerRecoveryError when this run could not decide the ledger's end (bookies down or slow);
    running it again is always safe.
    """

    async def decide(md: LedgerMetadata) -> Decision[LedgerMetadata, bool]:
        check_password(md, password)
        if md.is_closed:  # a concurrent recovery (or the writer) closed it
            return Decision(False)
        if md.state is LedgerState.OPEN:  # fence the metadata first, then the bookies
            return Decision(False, md.with_state(LedgerState.IN_RECOVERY), again=True)
        return Decision(True, await _Recovery(context, md, password).run())

    # A lost race: the writer changed its ensemble or closed, or a concurrent recovery closed
    # it or changed it; converge or start over.
    closed, _version, recovered = await cas_update(
        f"ledger {ledger_id}: recovery",
        read=functools.partial(context.read_metadata, ledger_id),
        write=context.ledgers.write,
        decide=decide,
        rng=context.rng,
        rounds=MAX_ROUNDS,
        exhausted=LedgerRecoveryError,
    )
    if recovered:
        if context.metrics is not None:
            context.metrics.recoveries += 1
        log.info(
            "ledger_recovered",
            ledger_id=ledger_id,
            last_entry_id=closed.last_entry_id,
            fragments=len(closed.fragments),
        )
    return closed


class _Recovery:
    """One run of phases 2-4 against one version of the metadata."""

    def __init__(self, context: ClientContext, md: LedgerMetadata, password: bytes) -> None:
        self.context = context
        self.md = md
        self.ledger_id = md.ledger_id
        self.key = context.master_key(password)
        self.digests: DigestManager = context.digest_manager(md, password)
        self.e, self.qw, self.qa = md.ensemble_size, md.write_quorum, md.ack_quorum
        self.ensemble: list[BookieId] = list(md.current_ensemble)
        #: Bookies that refused the ledger's key: never chosen as a write-back replacement.
        self.refused: set[BookieId] = set()
        #: What their answers count as (the password was checked against the metadata's hash
        #: before recovery started, when the metadata has one).
        self.refused_answer = refused_answer(password_verified=bool(md.password_sha256))

    def _fail(self, bookie: BookieId) -> None:
        self.context.pool.record_failure(bookie)

    def _refused(self, bookie: BookieId) -> None:
        """A bookie answered UNAUTHORIZED: the ledger id holds another key there (see
        :func:`walkit._core.recovery.refused_answer`)."""
        if bookie not in self.refused:
            self.refused.add(bookie)
            log.warning(
                "recovery_key_refused",
                ledger_id=self.ledger_id,
                bookie_id=str(bookie),
                detail="the ledger id holds another key there",
            )

    async def run(self) -> LedgerMetadata:
        fenced_lac = await self._fence()
        start_lac = (
            recovery_start_lac(fenced_lac, self.md.last_fragment_first_entry)
            if self.context.recovery_rules.start_at_last_fragment
            else fenced_lac
        )
        packets = await self._read_forward(start_lac)
        if packets:
            last_entry = start_lac + len(packets)
            length = read_header(packets[-1]).length
        else:
            last_entry = start_lac
            length = await self._length_at(start_lac)
        md = self.md
        if packets:
            await self._write_back(start_lac + 1, packets)
            if self.ensemble != list(md.current_ensemble):
                md = md.with_fragment(recovery_fragment_start(start_lac), self.ensemble)
        return md.closed(last_entry, length)

    # --- phase 2: fence ----------------------------------------------------------------------

    async def _fence(self) -> int:
        tracker = FenceTracker(self.e, self.qw, self.qa)
        inbox = _Inbox()
        timeout = self.context.options.read_timeout
        for index, bookie in enumerate(self.ensemble):
            _send(
                self.context,
                bookie,
                lambda rid: ReadLacRequest(
                    rid, self.ledger_id, ReadLacFlag.FENCE, INVALID_ENTRY_ID, 0, self.key
                ),
                inbox,
                index,
                timeout,
            )
        last_error: WalkitError | None = None
        while not tracker.done:
            if tracker.failed:
                if isinstance(last_error, TLSError):  # a configuration problem: say so
                    raise TLSError(f"ledger {self.ledger_id}: cannot fence: {last_error}")
                refused = (
                    f"; {tracker.refused} refused the ledger's key (the id was claimed there "
                    "with another key)"
                    if tracker.refused
                    else ""
                )
                raise LedgerRecoveryError(
                    f"ledger {self.ledger_id}: could not fence enough bookies "
                    f"({tracker.fenced} of {self.e} answered, {tracker.needed} needed{refused}"
                    + (f"; last error: {last_error})" if last_error is not None else ")")
                )
            for index, status, msg, error in await inbox.drain():
                bookie = self.ensemble[index]
                if error is not None or status == StatusCode.IO_ERROR:
                    last_error = error or last_error
                    self._fail(bookie)
                    tracker.on_answer(index, Answer.ERROR)
                elif status == StatusCode.UNAUTHORIZED_ACCESS:
                    self._refused(bookie)
                    tracker.on_answer(index, self.refused_answer)
                elif status == StatusCode.OK and isinstance(msg, ReadLacResponse):
                    tracker.on_answer(index, Answer.OK, msg.lac)
                elif status == StatusCode.NO_SUCH_LEDGER:
                    tracker.on_answer(index, Answer.MISSING)
                else:
                    tracker.on_answer(index, Answer.ERROR)
        log.debug("ledger_fenced", ledger_id=self.ledger_id, max_lac=tracker.max_lac)
        return tracker.max_lac

    # --- phase 3: read forward -------------------------------------------------------------

    async def _read_forward(self, start_lac: int) -> list[bytes]:
        """Packets of the confirmed entries after ``start_lac``, in order, up to the first absent."""
        fence = self.context.recovery_rules.fence_reads
        flags = ReadFlag.FENCE if fence else ReadFlag.NONE
        key = self.key if fence else b""
        trackers: dict[int, RecoveryReadTracker] = {}
        inbox = _Inbox()
        timeout = self.context.options.read_timeout
        next_entry = cursor = start_lac + 1
        confirmed: list[bytes] = []
        decisions: list[tuple[int, EntryDecision]] = []
        while True:
            # Most tails are short: start with a small window and widen it as entries confirm.
            window = min(WINDOW, 16 + 2 * len(confirmed))
            while next_entry < cursor + window:
                tracker = RecoveryReadTracker(next_entry, self.e, self.qw, self.qa)
                trackers[next_entry] = tracker
                build = functools.partial(_read_request, self.ledger_id, next_entry, flags, key)
                for index in tracker.write_set:
                    tag = next_entry * self.e + index
                    _send(self.context, self.ensemble[index], build, inbox, tag, timeout)
                next_entry += 1
            for tag, status, msg, error in await inbox.drain():
                entry_id, index = divmod(tag, self.e)
                tracker_or_none = trackers.get(entry_id)
                if tracker_or_none is not None:
                    self._on_read(tracker_or_none, index, status, msg, error)
            # Fold decisions in entry order; stop at the first absent entry.
            while cursor in trackers and trackers[cursor].decision is not EntryDecision.PENDING:
                tracker = trackers.pop(cursor)
                decisions.append((cursor, tracker.decision))
                try:
                    outcome = recovery_outcome(start_lac, decisions)
                except RecoveryUndecidable as exc:
                    raise LedgerRecoveryError(
                        f"ledger {self.ledger_id}: could not tell whether entry {exc.entry_id} "
                        f"was written (not enough bookies answered); try again"
                    ) from None
                if outcome.first_absent is not None:
                    return confirmed
                assert tracker.packet is not None
                confirmed.append(tracker.packet)
                cursor += 1

    def _on_read(
        self,
        tracker: RecoveryReadTracker,
        index: int,
        status: int,
        msg: Response | None,
        error: WalkitError | None,
    ) -> None:
        bookie = self.ensemble[index]
        if error is not None:
            self._fail(bookie)
            tracker.on_answer(index, Answer.ERROR)
        elif status == StatusCode.OK and isinstance(msg, ReadResponse):
            try:
                self.digests.verify(msg.packet, tracker.entry_id)
            except DigestMismatchError:
                log.warning(
                    "recovery_bad_digest",
                    ledger_id=self.ledger_id,
                    entry_id=tracker.entry_id,
                    bookie_id=str(bookie),
                )
                self._fail(bookie)
                tracker.on_answer(index, Answer.ERROR)
            else:
                tracker.on_answer(index, Answer.OK, msg.packet)
        elif status in (StatusCode.NO_SUCH_ENTRY, StatusCode.NO_SUCH_LEDGER):
            tracker.on_answer(index, Answer.MISSING)
        elif status == StatusCode.UNAUTHORIZED_ACCESS:
            self._refused(bookie)
            tracker.on_answer(index, self.refused_answer)
        else:
            tracker.on_answer(index, Answer.ERROR)

    async def _length_at(self, entry_id: int) -> int:
        """The ledger length recorded in entry ``entry_id`` (0 before the first entry)."""
        if entry_id < 0:
            return 0
        ensemble = self.md.ensemble_for(entry_id)
        errors: list[str] = []
        for index in write_set(entry_id, self.e, self.qw):
            try:
                answer = await self.context.call(
                    ensemble[index],
                    lambda rid: ReadRequest(rid, self.ledger_id, entry_id),
                )
                if answer.status == StatusCode.OK and isinstance(answer, ReadResponse):
                    header, _ = self.digests.verify(answer.packet, entry_id)
                    return header.length
                errors.append(f"{ensemble[index]}: {answer.status.name}")
            except WalkitError as exc:
                errors.append(f"{ensemble[index]}: {exc}")
        raise LedgerRecoveryError(
            f"ledger {self.ledger_id}: could not read entry {entry_id} to learn the length "
            f"({'; '.join(errors)})"
        )

    # --- phase 4: write back -------------------------------------------------------------------

    async def _write_back(self, first_entry: int, packets: Sequence[bytes]) -> None:
        """Send each packet to its whole write set until Qa acknowledged every one of them,
        replacing bookies that fail (at most E times)."""
        for _ in range(self.e + 1):
            failed = await self._write_back_once(first_entry, packets)
            if not failed:
                return
            self._replace(failed)
        raise LedgerRecoveryError(
            f"ledger {self.ledger_id}: write-back kept failing after replacing bookies; try again"
        )

    async def _write_back_once(self, first_entry: int, packets: Sequence[bytes]) -> set[int]:
        """One pass; returns the ensemble indexes that failed once some write set could no longer
        reach Qa, or an empty set when every entry is safe."""
        inbox = _Inbox()
        timeout = self.context.options.add_timeout
        trackers: dict[int, WriteBackTracker] = {}
        last_entry = first_entry + len(packets) - 1
        next_entry = first_entry
        failed: set[int] = set()
        while True:
            while next_entry <= last_entry and len(trackers) < WINDOW:
                packet = packets[next_entry - first_entry]
                ws = write_set(next_entry, self.e, self.qw)
                trackers[next_entry] = WriteBackTracker(next_entry, ws, self.qa)
                build = functools.partial(
                    _recovery_add, self.ledger_id, next_entry, self.key, packet
                )
                for index in ws:
                    _send(
                        self.context,
                        self.ensemble[index],
                        build,
                        inbox,
                        next_entry * self.e + index,
                        timeout,
                    )
                next_entry += 1
            if not trackers:
                return set()  # every entry reached Qa; bookies that failed on some are left be
            for tag, status, _msg, error in await inbox.drain():
                entry_id, index = divmod(tag, self.e)
                tracker = trackers.get(entry_id)
                if tracker is None:
                    continue
                if error is None and status == StatusCode.OK:
                    tracker.on_answer(index, Answer.OK)
                elif status == StatusCode.UNAUTHORIZED_ACCESS:
                    self._refused(self.ensemble[index])
                    tracker.on_answer(index, Answer.REFUSED)
                    failed.add(index)
                else:
                    self._fail(self.ensemble[index])
                    tracker.on_answer(index, Answer.ERROR)
                    failed.add(index)
                if tracker.done:
                    del trackers[entry_id]
                elif tracker.failed:
                    # This write set cannot reach Qa: replace and go again (answers of this
                    # pass that are still out are dropped with the inbox).
                    return failed

    def _replace(self, failed: set[int]) -> None:
        ensemble = list(self.ensemble)
        exclude = set(ensemble) | self.refused
        for index in sorted(failed):
            try:
                replacement = self.context.placement.replace_bookie(
                    self.e, self.qw, self.qa, ensemble, ensemble[index], frozenset(exclude)
                )
            except NotEnoughBookiesError as exc:
                raise LedgerRecoveryError(
                    f"ledger {self.ledger_id}: no bookie to replace {ensemble[index]} during "
                    f"recovery ({exc}); try again when more bookies are up"
                ) from exc
            log.info(
                "recovery_replaced_bookie",
                ledger_id=self.ledger_id,
                old_bookie_id=str(ensemble[index]),
                new_bookie_id=str(replacement),
            )
            ensemble[index] = replacement
            exclude.add(replacement)
        self.ensemble = ensemble
