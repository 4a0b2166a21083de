"""Bulk appends: ledgers written by many tasks at once, then linked into the log in one CAS.

A log has one writer, so a job that writes in parallel (the tasks of a Spark write, say)
does not append through it. Instead:

1. each task *stages* a ledger of its own (:func:`stage_ledger`: the log's ensemble, quorums,
   digest and password; tagged in its custom metadata with the log, the job id and the task's
   part number), appends its records in order and closes it. With ``record_sets=True`` the
   ledger is tagged as a record-set ledger (like the log writer's) and each entry must be an
   envelope from :func:`walkit._core.record_set.encode_record_set` holding several records;
   without it, each entry is one record (the format of staged ledgers before record sets);
2. one committer *links* the staged ledgers (:func:`link_ledgers`): it fences the log's
   current writer exactly as a takeover does (recovers the last two ledgers), then lists the
   staged ledgers last, in the given order, with one compare-and-set. The records read back
   through ``log.reader()`` as if one writer had appended them, part after part;
3. a job that fails instead deletes what it staged (:func:`discard_staged`); so do the
   commit (the leftovers of failed task attempts) and an operator's sweep.

Both the commit and the abort first mark the job as *ended* in the metadata store
(:func:`end_job`), then sweep its unlinked ledgers. A task attempt still running after that (a
zombie Spark kills too late) finds the mark right after creating its ledger and deletes it, so
every ledger of an ended job is deleted by one side or the other. A job id is therefore used
for one attempt at a commit: a retry (a replayed streaming batch) takes a new one.

Nothing staged is visible before the CAS, and the CAS lists all of a job's ledgers or none.
A streaming sink passes ``sink=(query id, batch id)``: the batch id is recorded in the same
CAS, and a batch that was committed before is not linked again (its new ledgers are deleted).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final, final

import attrs

from walkit._core.log_metadata import Link, LogLedger, LogMetadata, SinkMark
from walkit._core.log_position import LogPosition
from walkit._core.record_set import (
    FORMAT_KEY,
    FORMAT_RECORD_SETS,
    entry_records,
    uses_record_sets,
)
from walkit._logging import get_logger
from walkit.errors import (
    InvalidArgumentError,
    NodeExistsError,
    NoSuchLedgerError,
)
from walkit.ledger import LedgerWriter
from walkit.log._context import KIND_KEY
from walkit.log._recovery import recover_ledger
from walkit.log._registration import schema_step
from walkit.log._store import fetch_log, write_log
from walkit.metadata import Decision, cas_update

if TYPE_CHECKING:
    from walkit.client import Client
    from walkit.log._context import LogContext

log = get_logger(__name__)

__all__ = [
    "ENDED_JOBS_PATH",
    "JOB_KEY",
    "PART_KEY",
    "STAGED_KIND",
    "LinkResult",
    "StagedLedger",
    "discard_jobs",
    "discard_staged",
    "end_job",
    "link_ledgers",
    "stage_ledger",
    "staged_ledgers",
]

#: The ``walkit.kind`` of a staged ledger (a log's own ledgers are ``data``/``snapshot``).
STAGED_KIND: Final = "staged"
#: Custom metadata keys of a staged ledger: the job that wrote it, and the task's part number.
JOB_KEY: Final = "walkit.job"
PART_KEY: Final = "walkit.part"
#: Rounds of the link CAS lost to other writers before giving up.
LINK_ATTEMPTS: Final = 20
#: Longest job id (it is stored in every staged ledger's metadata).
MAX_JOB_LENGTH: Final = 200
#: Where the metadata store records jobs that ended (committed or aborted): a task that stages
#: a ledger after its job ended (a zombie task attempt) finds the mark and deletes its ledger.
ENDED_JOBS_PATH: Final = "/staging/ended"
#: Entries read at once to count the records of a record-set ledger.
COUNT_BATCH: Final = 256


@final
@attrs.frozen
class StagedLedger:
    """A ledger staged for a log (and not listed in it)."""

    ledger_id: int
    job: str
    part: int
    #: Wall-clock milliseconds at creation (0 from a client connected with ``wall_clock=None``).
    ctime_ms: int
    #: Whether the ledger is closed (its task finished writing it, or it was recovered).
    closed: bool


@final
@attrs.frozen
class LinkResult:
    """What :func:`link_ledgers` did.

    ``ledgers``: the linked ledgers in log order, with their sequence numbers; ``records``:
    how many records they hold (entries of record-set ledgers count with the ``record_counts``
    their stagers reported, or as read from the entries' headers); ``replayed``: the sink's
    batch had been committed before and nothing was linked; ``end``: the position after the
    last linked record, at the start of the entry after it (None when nothing was linked;
    every position between the last record and ``end`` names the same point for a reader).
    ``last_entries`` maps each linked ledger id to its last entry id.
    """

    ledgers: tuple[LogLedger, ...]
    records: int
    replayed: bool
    last_entries: dict[int, int] = attrs.field(factory=dict, eq=False)

    @property
    def first(self) -> LogPosition | None:
        """The position of the first linked record."""
        return LogPosition(self.ledgers[0].seq, 0) if self.ledgers else None

    @property
    def end(self) -> LogPosition | None:
        if not self.ledgers:
            return None
        last = self.ledgers[-1]
        return LogPosition(last.seq, self.last_entries[last.ledger_id] + 1)


def check_job(job: object) -> str:
    if not isinstance(job, str) or not job or len(job) > MAX_JOB_LENGTH or not job.isprintable():
        raise InvalidArgumentError(
            f"a job id is 1-{MAX_JOB_LENGTH} printable characters, not {job!r}"
        )
    return job


def ended_job_path(name: str, job: str) -> str:
    """The node that marks ``job`` (of log ``name``) as ended."""
    digest = hashlib.sha256(f"{name}\0{job}".encode()).hexdigest()
    return f"{ENDED_JOBS_PATH}/{digest}"


async def end_job(owner: LogContext, job: str) -> None:
    """Mark ``job`` as ended: from now on, a ledger staged for it is deleted by its stager. The
    sweep of the job's ledgers comes after this mark, so every ledger is either swept or seen
    by its stager as unwanted (the stager checks the mark after creating the ledger)."""
    context = owner._services.context
    value = json.dumps({"log": owner.name, "job": job}).encode()
    try:
        await context.retry_metadata(
            functools.partial(context.store.create, ended_job_path(owner.name, job), value)
        )
    except NodeExistsError:
        pass


async def stage_ledger(
    owner: LogContext, job: str, part: int, *, record_sets: bool = False
) -> LedgerWriter:
    """A new ledger for ``owner``'s records from task ``part`` of ``job``: created with the
    log's settings and password, tagged for :func:`staged_ledgers`. Append to it and close it;
    then hand its id to the job's committer. ``record_sets``: its entries will be record sets
    (append ``encode_record_set`` envelopes), else one record each."""
    from walkit.log._passwords import LOG_KEY

    owner._check_open()
    check_job(job)
    if isinstance(part, bool) or not isinstance(part, int) or part < 0:
        raise InvalidArgumentError(f"a part number is an int >= 0, not {part!r}")
    cfg = owner.config
    custom = {
        LOG_KEY: owner.name.encode(),
        KIND_KEY: STAGED_KIND.encode(),
        JOB_KEY: job.encode(),
        PART_KEY: str(part).encode(),
    }
    if record_sets:
        custom[FORMAT_KEY] = FORMAT_RECORD_SETS
    lw = await owner.client.create_ledger(
        cfg.ensemble_size,
        cfg.write_quorum,
        cfg.ack_quorum,
        digest=cfg.digest,
        password=owner.options.password,
        custom_metadata=custom,
        store_password=cfg.store_password,
    )
    context = owner._services.context
    ended = await context.retry_metadata(
        functools.partial(context.store.exists, ended_job_path(owner.name, job))
    )
    if ended is not None:
        await owner._ledger_cleanup.discard(lw)
        raise InvalidArgumentError(
            f"job {job} of log {owner.name} has ended (committed or aborted): it takes no "
            "more ledgers"
        )
    log.debug("log_ledger_staged", log=owner.name, job=job, part=part, ledger_id=lw.id)
    return lw


async def staged_ledgers(owner: LogContext, job: str | None = None) -> list[StagedLedger]:
    """Every ledger staged for ``owner`` (of ``job`` only, if given) that the log does not
    list: those of jobs under way, and the orphans of jobs that died. Ordered by ledger id."""
    owner._check_open()
    if job is not None:
        check_job(job)
    client = owner.client
    md = await owner.metadata()
    listed = md.ledger_ids()
    found = []
    for ledger_id in await client.list_ledgers():
        if ledger_id in listed:
            continue
        staged = await _staged_info(client, owner.name, ledger_id)
        if staged is not None and (job is None or staged.job == job):
            found.append(staged)
    return found


async def discard_staged(
    owner: LogContext, job: str | None = None, *, created_before_ms: int | None = None
) -> list[int]:
    """Delete the ledgers staged for ``owner`` and not linked into it: those of ``job`` (which
    ends first: it takes no more ledgers), or (``job=None``) every job's. ``created_before_ms``
    keeps those created at or after that wall-clock time (a job still running); a sweep of
    orphans passes e.g. now - 1 day. Returns the deleted ids."""
    if job is None and created_before_ms is None:
        raise InvalidArgumentError(
            "discarding every job's staged ledgers needs created_before_ms (jobs under way "
            "would lose theirs)"
        )
    if job is not None:
        await end_job(owner, job)
    doomed = [
        staged.ledger_id
        for staged in await staged_ledgers(owner, job)
        if created_before_ms is None or staged.ctime_ms < created_before_ms
    ]
    # Through the log's own deletion (it knows the ledgers' password); what is gone after it
    # was deleted (a failure to delete leaves the ledger for the next sweep, never a hole).
    await owner._ledger_cleanup.delete(doomed, "discarded")
    remaining = set(await owner.client.list_ledgers()) if doomed else set()
    deleted = [ledger_id for ledger_id in doomed if ledger_id not in remaining]
    if deleted:
        log.info("log_staged_discarded", log=owner.name, job=job, ledgers=deleted)
    return deleted


async def discard_jobs(owner: LogContext, prefix: str, jobs: Sequence[str] = ()) -> list[int]:
    """End ``jobs`` and every job with a ledger staged under a job id starting with ``prefix``,
    then delete every unlinked staged ledger of those jobs (a streaming batch's attempts across
    runs of its query: ``"<sink>.<batch>."``). Returns the deleted ids."""
    if not prefix:
        raise InvalidArgumentError("discarding jobs by prefix needs a non-empty prefix")
    found = {s.job for s in await staged_ledgers(owner) if s.job.startswith(prefix)}
    for job in sorted(found | set(jobs)):
        await end_job(owner, job)
    doomed = [s.ledger_id for s in await staged_ledgers(owner) if s.job.startswith(prefix)]
    await owner._ledger_cleanup.delete(doomed, "discarded")
    remaining = set(await owner.client.list_ledgers()) if doomed else set()
    deleted = [ledger_id for ledger_id in doomed if ledger_id not in remaining]
    if deleted:
        log.info("log_staged_discarded", log=owner.name, prefix=prefix, ledgers=deleted)
    return deleted


async def link_ledgers(
    owner: LogContext,
    ledger_ids: Sequence[int],
    *,
    job: str | None = None,
    sink: tuple[str, int] | None = None,
    expected_last_entries: Sequence[int] | None = None,
    record_counts: Sequence[int] | None = None,
    schema_version: int | None = None,
) -> LinkResult:
    """Link the staged ledgers ``ledger_ids`` into ``owner``, in this order, with one CAS
    (see the module docs). The log's current writer is fenced (WriterFencedError from its next
    append); a later ``log.writer()`` takes over after the linked records.

    Each ledger must be staged for this log (InvalidArgumentError otherwise); one still open is
    recovered (closed at its end) first. ``expected_last_entries`` (one per ledger), if given,
    must match the ledgers' ends (InvalidArgumentError: a task's ledger is not what it
    reported). Empty ledgers are deleted, not linked. ``record_counts`` (one per ledger, as
    the stagers counted them) gives ``LinkResult.records`` for record-set ledgers without
    reading them; without it, their entries' headers are read to count.

    ``sink=(query_id, batch_id)`` records the batch as committed in the same CAS; if that
    query committed this batch (or a later one) before, nothing is linked and the ledgers are
    deleted (``replayed``). ``job``: after the CAS, the job ends (:func:`end_job`) and its
    other staged ledgers (left by failed task attempts) are deleted.

    The ledgers' records were written with ``owner``'s schema (registered in the same CAS, as
    a takeover does; IncompatibleSchemaError), or with the log's ``schema_version`` when
    given (a bulk writer that encoded values with the log's own schema, as Spark's does).
    """
    owner._check_open()
    ids = [int(i) for i in ledger_ids]
    mark = _checked_link(ids, job, sink, expected_last_entries, record_counts)
    context = owner._services.context
    last_entries = await _close_staged(owner, ids, expected_last_entries)
    to_link = [i for i in ids if last_entries.get(i, 0) >= 0]
    empty = [i for i in ids if last_entries.get(i, 0) < 0]

    recovered: dict[int, int] = {}
    schema = schema_step(owner, schema_version)

    async def decide(md: LogMetadata) -> Decision[LogMetadata, Link]:
        registered, version = schema(md)  # (refused before anything is fenced)
        for lg in md.to_recover_for_link(to_link, mark):
            if lg.ledger_id not in recovered:  # fence the current writer
                recovered[lg.ledger_id] = await recover_ledger(owner, lg.ledger_id)
        # After a lost race an earlier CAS of ours may even have got through: after_link
        # sees that as done_before.
        plan = registered.after_link(recovered, to_link, mark, version)
        return Decision(plan, None if plan.metadata == md else plan.metadata)

    _md, _version, plan = await cas_update(
        f"log {owner.name}: link",
        read=functools.partial(fetch_log, context, owner.name),
        write=functools.partial(write_log, context),
        decide=decide,
        rng=context.rng,
        rounds=LINK_ATTEMPTS,
    )
    assert plan is not None
    if plan.done_before:
        # An earlier try got through: the ends come from the ledgers themselves.
        for lg in plan.linked:
            if lg.ledger_id not in last_entries:
                last_entries[lg.ledger_id] = await recover_ledger(owner, lg.ledger_id)
    await _delete_unlinked(owner, plan, empty + to_link if plan.replayed else empty, job)
    counts = {} if record_counts is None else dict(zip(ids, record_counts, strict=True))
    records = 0
    for lg in plan.linked:
        records += await _records_in(
            owner, lg.ledger_id, last_entries[lg.ledger_id], counts.get(lg.ledger_id)
        )
    result = LinkResult(
        ledgers=plan.linked,
        records=records,
        replayed=plan.replayed,
        last_entries={lg.ledger_id: last_entries[lg.ledger_id] for lg in plan.linked},
    )
    log.info(
        "log_ledgers_linked",
        log=owner.name,
        job=job,
        sink=None if mark is None else f"{mark.query_id}:{mark.batch_id}",
        ledgers=[lg.ledger_id for lg in plan.linked],
        records=result.records,
        replayed=plan.replayed,
        fenced=sorted(recovered),
    )
    return result


def _checked_link(
    ids: list[int],
    job: str | None,
    sink: tuple[str, int] | None,
    expected_last_entries: Sequence[int] | None,
    record_counts: Sequence[int] | None,
) -> SinkMark | None:
    """Refuse link arguments that can never work (InvalidArgumentError); the sink's mark."""
    if len(set(ids)) != len(ids):
        raise InvalidArgumentError(f"a ledger to link is repeated: {ids}")
    if expected_last_entries is not None and len(expected_last_entries) != len(ids):
        raise InvalidArgumentError("expected_last_entries must have one entry per ledger")
    if record_counts is not None and len(record_counts) != len(ids):
        raise InvalidArgumentError("record_counts must have one count per ledger")
    if job is not None:
        check_job(job)
    if sink is None:
        return None
    query_id, batch_id = sink
    if not isinstance(query_id, str) or not query_id:
        raise InvalidArgumentError(f"a sink's query id is a non-empty string: {query_id!r}")
    if isinstance(batch_id, bool) or not isinstance(batch_id, int) or batch_id < 0:
        raise InvalidArgumentError(f"a sink's batch id is an int >= 0: {batch_id!r}")
    return SinkMark(query_id, batch_id)


async def _close_staged(
    owner: LogContext, ids: list[int], expected_last_entries: Sequence[int] | None
) -> dict[int, int]:
    """Recover (close at their ends) the staged ledgers to link, checked against what their
    writers reported; {ledger id: last entry}. Empty when the log lists them all already (a
    retry of a link that got through: its CAS decides)."""
    md, _version = await fetch_log(owner._services.context, owner.name)
    listed = {lg.ledger_id for lg in md.ledgers}
    last_entries: dict[int, int] = {}
    if ids and all(i in listed for i in ids):
        return last_entries
    for n, ledger_id in enumerate(ids):
        if ledger_id in listed:
            raise InvalidArgumentError(
                f"log {owner.name}: ledger {ledger_id} belongs to the log already"
            )
        if await _staged_info(owner.client, owner.name, ledger_id) is None:
            raise InvalidArgumentError(f"ledger {ledger_id} was not staged for log {owner.name}")
        last = await recover_ledger(owner, ledger_id)
        if expected_last_entries is not None and expected_last_entries[n] != last:
            raise InvalidArgumentError(
                f"ledger {ledger_id} ends at entry {last}, not at "
                f"{expected_last_entries[n]} as its writer reported"
            )
        last_entries[ledger_id] = last
    return last_entries


async def _delete_unlinked(
    owner: LogContext, plan: Link, garbage: list[int], job: str | None
) -> None:
    """After the link's CAS: delete the ledgers it dropped (empty), ``garbage`` (empty ones,
    or all of a replayed batch), and the job's leftovers (failed task attempts)."""
    if plan.dropped:
        await owner._ledger_cleanup.delete([lg.ledger_id for lg in plan.dropped], "empty")
    if garbage:
        await owner._ledger_cleanup.delete(garbage, "replayed" if plan.replayed else "empty")
    if job is not None:
        await end_job(owner, job)
        linked = {lg.ledger_id for lg in plan.linked}
        leftovers = [s.ledger_id for s in await staged_ledgers(owner, job)]
        await owner._ledger_cleanup.delete([i for i in leftovers if i not in linked], "leftover")


async def _records_in(owner: LogContext, ledger_id: int, last: int, reported: int | None) -> int:
    """Records in a linked ledger: one per entry, or (record sets) as its stager reported
    them, else the sum of its entries' record counts (read from their headers)."""
    md = await owner.client.ledger_metadata(ledger_id)
    if not uses_record_sets(md.custom_metadata):
        return last + 1
    if reported is not None:
        return reported
    reader = await owner.client.open_ledger(ledger_id, password=owner.options.password)
    total = 0
    for first in range(0, last + 1, COUNT_BATCH):
        for entry in await reader.read(first, min(last, first + COUNT_BATCH - 1)):
            total += len(entry_records(entry.payload, True).records)
    return total


async def _staged_info(client: Client, name: str, ledger_id: int) -> StagedLedger | None:
    """The ledger's staging tags if it was staged for log ``name`` (None otherwise)."""
    from walkit._core.ledger_metadata import LedgerState
    from walkit.log._passwords import LOG_KEY

    try:
        md = await client.ledger_metadata(ledger_id)
    except NoSuchLedgerError:
        return None
    custom = md.custom_metadata
    if custom.get(LOG_KEY) != name.encode() or custom.get(KIND_KEY) != STAGED_KIND.encode():
        return None
    try:
        job = custom[JOB_KEY].decode()
        part = int(custom[PART_KEY].decode())
    except (KeyError, UnicodeDecodeError, ValueError):
        return None
    return StagedLedger(
        ledger_id=ledger_id,
        job=job,
        part=part,
        ctime_ms=md.ctime_ms,
        closed=md.state is LedgerState.CLOSED,
    )
