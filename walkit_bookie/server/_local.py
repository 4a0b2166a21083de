"""Copies from this bookie's own autorecovery worker, stored without the network.

A worker running in a bookie copies to that bookie when the placement policy allows it
(:func:`walkit._core.rereplication.prefer_local`). Sending those adds to itself over loopback
would cost a send, a receive, two copies through the kernel and a frame decode per entry;
here they go straight to the request handler, which checks and stores them as it would a
network add flagged RECOVERY | COPY (same master-key, fencing and rewrite rules, the same
group commit of copies, durable before the answer).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, final

import anyio

from walkit._core.rereplication import FragmentCopies
from walkit._core.types import BookieId
from walkit._core.wire import (
    ADD_RESPONSE_FRAME,
    ADD_RESPONSE_HEAD,
    AddFlag,
    AddRequest,
    AddResponse,
    StatusCode,
    decode_message,
    status_name,
)
from walkit.shared import get_logger

if TYPE_CHECKING:
    from walkit_bookie.server._requests import RequestHandler

__all__ = ["LocalCopyStore"]

log = get_logger(__name__)

_FLAGS = AddFlag.RECOVERY | AddFlag.COPY
_OK = int(StatusCode.OK)


@final
class _Batch:
    """The answers to one ``store`` call, by request id: what the handler sends back."""

    __slots__ = ("done", "left", "problems")

    def __init__(self, count: int) -> None:
        self.left = count
        self.problems: list[str] = []
        self.done = anyio.Event()


@final
class LocalCopyStore:
    """``walkit.autorecovery.LocalCopies`` for one bookie: what the handler answers comes back
    here (as a connection's frames would) and completes the waiting ``store`` call."""

    peer = "this bookie's autorecovery worker"
    address = ""
    principal: str | None = None
    closed = False  # (in-process: never)

    def __init__(self, handler: RequestHandler, bookie_id: BookieId) -> None:
        self._handler = handler
        self._bookie_id = bookie_id
        self.outstanding = 0
        self._next_rid = 1
        self._waiting: dict[int, tuple[_Batch, int]] = {}  # request id -> batch, entry id

    @property
    def bookie_id(self) -> BookieId:
        return self._bookie_id

    def serve_fragment_copies(self, copier: FragmentCopies | None) -> None:
        self._handler.fragment_copier = copier
        event = "fragment_copies_off" if copier is None else "fragment_copies_on"
        log.info(event, bookie_id=str(self._bookie_id))

    @property
    def unsent(self) -> int:
        return 0  # answers come back to this process at once

    async def store(
        self, ledger_id: int, master_key: bytes, entries: Sequence[tuple[int, bytes]]
    ) -> list[str]:
        batch = _Batch(len(entries))
        if not entries:
            return []
        for entry_id, packet in entries:
            rid = self._next_rid
            self._next_rid += 1
            self._waiting[rid] = (batch, entry_id)
            self._handler.add_local_copy(
                self, AddRequest(rid, ledger_id, entry_id, master_key, packet, _FLAGS)
            )
        try:
            await batch.done.wait()
        finally:
            for rid in [r for r, (b, _) in self._waiting.items() if b is batch]:
                del self._waiting[rid]  # cancelled: answers still to come are dropped
        return batch.problems

    # --- what the handler calls (a connection's answering side) -------------------------------

    def send(self, frame: bytes) -> None:
        if len(frame) == ADD_RESPONSE_FRAME.size:
            # The usual answer, unpacked in place (as the client's dispatcher does): a full
            # decode per copied entry was a visible part of a worker's CPU.
            size, version, kind, rid, status, _, _ = ADD_RESPONSE_FRAME.unpack(frame)
            if (size, version, kind) == ADD_RESPONSE_HEAD:
                self._answered(rid, None if status == _OK else status_name(status))
                return
        message = decode_message(memoryview(frame)[4:])
        problem = None
        if not isinstance(message, AddResponse) or message.status != StatusCode.OK:
            status = getattr(message, "status", None)
            problem = status.name if isinstance(status, StatusCode) else type(message).__name__
        self._answered(message.request_id, problem)

    def _answered(self, request_id: int, problem: str | None) -> None:
        found = self._waiting.pop(request_id, None)
        if found is None:
            return
        batch, entry_id = found
        if problem is not None:
            batch.problems.append(f"entry {entry_id}: {problem}")
        batch.left -= 1
        if batch.left == 0:
            batch.done.set()

    def send_parts(self, parts: tuple[bytes, ...]) -> None:
        self.send(b"".join(parts))

    def spawn(self, fn: object, *args: object) -> bool:
        return False  # only long polls spawn, and this peer never polls
