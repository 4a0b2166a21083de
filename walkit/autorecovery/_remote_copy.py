"""Fragments copied by their replacement: bytes go from replica to replacement, not through
the rereplicator (HDFS's datanodes copy blocks among themselves the same way).

A rereplicator outside the replacement (``walkit recover``, or a worker whose own bookie cannot take
the copy) would receive every entry from a surviving replica and send it on: on a machine
whose cores are shared, one more process handles every byte. Instead it sends the replacement
a COPY_FRAGMENT request per run of entries (:func:`copy_at_target`); a bookie whose
autorecovery worker is connected answers it with :class:`FragmentCopier`, which copies the run
to itself exactly as its worker would (:func:`~walkit.autorecovery._copy.copy_fragment`, digests
checked, stored in the process) and answers how many entries and bytes are durable. The rereplicator
still picks the replacement, swaps it into the metadata and drops the marker.

Only unthrottled copies go this way: under a rate limit the rereplicator paces the copies itself, a
chunk at a time (a replacement asked for a run copies it at full speed). A bookie that does
not copy fragments (autorecovery off, an older version, a password it does not know) answers
an error, and the rereplicator copies through itself as before.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, final

import anyio

from walkit._core.digest import DigestManager, master_key
from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.rereplication import FragmentGap, batch_entries, copy_request_gap
from walkit._core.types import BookieId
from walkit._core.wire import (
    MAX_COPY_SKIP,
    CopyFragmentRequest,
    CopyFragmentResponse,
    ErrorResponse,
    Response,
    StatusCode,
    encode_frame,
    status_name,
)
from walkit._logging import get_logger
from walkit.autorecovery._copy import LocalCopies, RateLimiter, copy_fragment
from walkit.autorecovery._metrics import AutorecoveryMetrics
from walkit.client import client_services
from walkit.errors import LocalProtocolError, NoSuchLedgerError, RereplicationError, WalkitError
from walkit.ledger._context import ClientContext

if TYPE_CHECKING:
    from walkit.client import Client

log = get_logger(__name__)

__all__ = ["FragmentCopier", "copy_at_target"]

#: Entries and bytes one request asks for: a progress report per run, and a request far
#: shorter than its timeout even on a busy machine.
_RUN_ENTRIES = 1024
_RUN_BYTES = 64 * 1024 * 1024
#: How long a replacement may take over one run before the rereplicator gives up on it.
_RUN_TIMEOUT = 120.0
#: Runs a bookie copies at once; more wait their turn.
_COPIES_AT_ONCE = 4


@final
class FragmentCopier:
    """Answers COPY_FRAGMENT requests in a bookie: reads through ``client``, finds a ledger's
    password with ``password_for`` (a rereplicator's: the one the ledger's metadata keeps, else one
    the rereplicator knows; it raises RereplicationError when unknown),
    stores into ``local`` (the bookie itself), ``window`` entries at a time."""

    def __init__(
        self,
        client: Client,
        local: LocalCopies,
        *,
        password_for: Callable[[LedgerMetadata], Awaitable[bytes]],
        window: int,
        metrics: AutorecoveryMetrics,
    ) -> None:
        self._client = client
        self._context = client_services(client).context
        self._local = local
        self._password_for = password_for
        self._window = window
        self._metrics = metrics
        self._slots = anyio.Semaphore(_COPIES_AT_ONCE)
        self._unlimited = RateLimiter(None, None)

    async def copy(self, req: CopyFragmentRequest) -> CopyFragmentResponse:
        """Copy the run ``req`` names to this bookie; never raises a WalkitError (the answer
        carries it)."""
        async with self._slots:
            try:
                entries, size = await self._copy(req)
            except _Refused as exc:
                return CopyFragmentResponse(
                    req.request_id, exc.status, req.ledger_id, text=str(exc)
                )
            except WalkitError as exc:
                log.info("fragment_copy_failed", ledger_id=req.ledger_id, error=str(exc))
                return CopyFragmentResponse(
                    req.request_id, StatusCode.IO_ERROR, req.ledger_id, text=str(exc)
                )
            except Exception as exc:  # a bug here must not take the connection down
                log.error(
                    "fragment_copy_crashed",
                    ledger_id=req.ledger_id,
                    error=f"{type(exc).__name__}: {exc}",
                )
                return CopyFragmentResponse(
                    req.request_id, StatusCode.IO_ERROR, req.ledger_id, text="internal error"
                )
        return CopyFragmentResponse(req.request_id, StatusCode.OK, req.ledger_id, entries, size)

    async def _copy(self, req: CopyFragmentRequest) -> tuple[int, int]:
        local = self._local
        context = self._context
        if not 0 <= req.ledger_id < 2**63:
            raise _Refused(StatusCode.BAD_REQUEST, f"no ledger id {req.ledger_id}")
        try:
            skip = {BookieId.parse(name) for name in req.skip}
        except WalkitError as exc:
            raise _Refused(StatusCode.BAD_REQUEST, str(exc)) from None
        try:
            md, _ = await context.read_metadata(req.ledger_id)
        except NoSuchLedgerError:
            raise _Refused(StatusCode.NO_SUCH_LEDGER, f"no ledger {req.ledger_id}") from None
        gap = copy_request_gap(
            md,
            req.fragment_first_entry,
            req.index,
            req.first_entry,
            req.last_entry,
            local.bookie_id,
        )
        if isinstance(gap, str):
            raise _Refused(StatusCode.BAD_REQUEST, gap)
        try:
            password = await self._password_for(md)
        except RereplicationError as exc:
            raise _Refused(StatusCode.BAD_REQUEST, str(exc)) from None
        key = master_key(password)
        if req.master_key != key:
            raise _Refused(
                StatusCode.UNAUTHORIZED_ACCESS, f"not ledger {req.ledger_id}'s master key"
            )
        sizes = _Sizes()
        entries = await copy_fragment(
            context,
            md,
            gap,
            local.bookie_id,
            key=key,
            digests=DigestManager(md.ledger_id, md.digest, password),
            limiter=self._unlimited,
            window=self._window,
            skip={gap.bookie, *skip},
            metrics=self._metrics,
            progress=sizes,
            local=local,
        )
        return entries, sizes.bytes


@final
class _Sizes:
    """Counts the bytes ``copy_fragment`` reports."""

    def __init__(self) -> None:
        self.bytes = 0

    def __call__(self, _entries: int, size: int) -> None:
        self.bytes += size


class _Refused(Exception):
    def __init__(self, status: StatusCode, text: str) -> None:
        super().__init__(text)
        self.status = status


@final
class _Answer:
    """The answer to one COPY_FRAGMENT request."""

    def __init__(self) -> None:
        self.status = ""
        self.entries = 0
        self.bytes = 0
        self.done = anyio.Event()

    def on_response(self, tag: int, status: int, msg: Response | None) -> None:
        if status == StatusCode.OK and isinstance(msg, CopyFragmentResponse):
            self.entries, self.bytes = msg.entries, msg.bytes
        else:
            text = ""
            if isinstance(msg, CopyFragmentResponse):
                text = msg.text
            elif isinstance(msg, ErrorResponse):  # an older bookie, or one refusing access
                text = msg.message
            self.status = status_name(status) + (f" ({text})" if text else "")
        self.done.set()

    def on_error(self, tag: int, error: WalkitError) -> None:
        self.status = str(error)
        self.done.set()


async def copy_at_target(
    context: ClientContext,
    md: LedgerMetadata,
    gap: FragmentGap,
    target: BookieId,
    *,
    key: bytes,
    skip: set[BookieId],
    metrics: AutorecoveryMetrics,
    progress: Callable[[int, int], None] | None = None,
) -> str | None:
    """Have ``target`` copy every entry ``gap`` covers to itself, a run at a time; None when
    it did, else why not (the caller then copies them itself: copies are idempotent, so the
    runs already copied cost only their second transfer)."""
    ids = list(gap.entries(md.ensemble_size, md.write_quorum))
    names = tuple(str(b) for b in sorted(skip - {gap.bookie}, key=str))
    if len(names) > MAX_COPY_SKIP:
        return f"{len(names)} bookies to pass over (a request names at most {MAX_COPY_SKIP})"
    position = copied_bytes = 0
    while position < len(ids):
        average = copied_bytes / position if position else None
        run = ids[position : position + batch_entries(average, _RUN_ENTRIES, _RUN_BYTES)]
        try:
            conn = context.pool.get(target)
        except WalkitError as exc:
            return str(exc)
        rid = conn.new_request_id()
        request = CopyFragmentRequest(
            rid, md.ledger_id, gap.first_entry, gap.index, run[0], run[-1], key, names
        )
        try:
            frame = encode_frame(request)
        except LocalProtocolError as exc:  # a position past 65,535, a name past 255 bytes
            return str(exc)
        answer = _Answer()
        conn.send((frame,), rid, answer, run[0], _RUN_TIMEOUT)
        await answer.done.wait()
        if answer.status:
            return answer.status
        if answer.entries != len(run):
            return f"copied {answer.entries} of the {len(run)} entries asked"
        position += len(run)
        copied_bytes += answer.bytes
        metrics.copied(answer.entries, answer.bytes, by_replacement=True)
        if progress is not None:
            progress(answer.entries, answer.bytes)
    return None
