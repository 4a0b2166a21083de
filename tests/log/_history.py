"""A recorded history of log appends and a checker over what readers saw.

Payloads must be unique per append. The checker asserts: every acknowledged record is read
back exactly once, at the position its append returned, with its bytes; positions strictly
increase; each writer's acknowledged records appear in the order they were acknowledged; no
record appears twice (a failed append may or may not be there, but at most once); and every
reader saw the same records in the same order (a prefix of the longest read).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import attrs
import trio

import walkit
from walkit import LogPosition, LogRecord, LogWriter


@attrs.define
class LogHistory:
    #: (writer, payload, position) in the order the appends returned.
    acked: list[tuple[str, bytes, LogPosition]] = attrs.field(factory=list)
    #: (writer, payload, error name): the record may or may not be in the log.
    failed: list[tuple[str, bytes, str]] = attrs.field(factory=list)

    async def append(self, writer: str, w: LogWriter, payload: bytes) -> LogPosition:
        try:
            pos = await w.append(payload)
        except walkit.errors.WalkitError as exc:
            self.failed.append((writer, payload, type(exc).__name__))
            raise
        except trio.Cancelled:
            self.failed.append((writer, payload, "cancelled"))
            raise
        self.acked.append((writer, payload, pos))
        return pos

    def acked_by(self, writer: str) -> list[tuple[bytes, LogPosition]]:
        return [(p, pos) for w, p, pos in self.acked if w == writer]

    def check(self, *reads: Sequence[LogRecord]) -> None:
        assert reads, "no read to check"
        longest = max(reads, key=len)
        for read in reads:
            got = [(r.position, r.payload) for r in read]
            assert got == [(r.position, r.payload) for r in longest[: len(read)]], (
                "readers disagree"
            )
        positions = [r.position for r in longest]
        assert all(a < b for a, b in itertools.pairwise(positions)), "positions out of order"
        payloads = [r.payload for r in longest]
        assert len(set(payloads)) == len(payloads), "a record was read twice"
        at = {r.payload: r.position for r in longest}
        for writer, payload, pos in self.acked:
            assert payload in at, f"acknowledged record {payload!r} of {writer} at {pos} lost"
            assert at[payload] == pos, f"{payload!r} acknowledged at {pos}, read at {at[payload]}"
        writers = {w for w, _, _ in self.acked}
        for writer in writers:
            mine = [pos for pos, _ in ((pos, p) for p, pos in self.acked_by(writer))]
            assert mine == sorted(mine), f"{writer}'s acknowledgements are out of log order"
