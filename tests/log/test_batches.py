"""The record batcher's hold (walkit.log._batches): after an acknowledgement wakes several
appenders, their records share the next entry, which the last of them sends; if one of the
woken tasks does not append again, the hold ends one scheduling round later.

The ledger here is a stand-in that records what is submitted and acknowledges it when the test
says so: these tests pin down the batching policy, step by step. The log's end-to-end tests
(test_record_sets_e2e.py, the simulations) run it on real ledgers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio
import trio.testing

from walkit._core.record_set import Codec, decode_record_set
from walkit.errors import LedgerClosedError
from walkit.log._batches import RecordBatch, RecordBatcher


class _Ledger:
    """What the batcher uses of a ledger writer."""

    id = 7
    has_room = True

    def __init__(self) -> None:
        self.sent: list[tuple[bytes, RecordBatch]] = []
        self.last_add_confirmed = -1

    def submit(self, entry: bytes, batch: RecordBatch) -> int:
        self.sent.append((entry, batch))
        return len(self.sent) - 1

    def check_acknowledged(self, entry_id: int) -> None:
        if entry_id > self.last_add_confirmed:
            raise LedgerClosedError(f"entry {entry_id} is not acknowledged")

    def ack(self, entry_id: int) -> None:
        self.last_add_confirmed = entry_id
        self.sent[entry_id][1].set()

    def entries(self) -> list[list[bytes]]:
        return [sorted(decode_record_set(entry).records) for entry, _ in self.sent]


def _batcher(lw: _Ledger, releases: list[Callable[[], Awaitable[None]]]) -> RecordBatcher:
    def spawn(fn: Callable[[], Awaitable[None]]) -> bool:
        releases.append(fn)  # the releaser: kept, not run
        return True

    return RecordBatcher(
        lambda: (1, lw),  # type: ignore[arg-type,return-value]
        batch_bytes=1 << 20,
        codec=Codec.NONE,
        spawn=spawn,
    )


async def _append(batcher: RecordBatcher, record: bytes) -> None:
    """What LogWriter.append does with the batcher."""
    batch, _slot = batcher.add(record)
    batcher.added()
    await batch.wait()


async def test_the_last_woken_appender_sends_the_held_record_set() -> None:
    lw = _Ledger()
    releases: list[Callable[[], Awaitable[None]]] = []
    batcher = _batcher(lw, releases)  # (the releaser is never run here)
    done = 0

    async def appender(name: bytes) -> None:
        nonlocal done
        await _append(batcher, name + b"0")
        await _append(batcher, name + b"1")
        done += 1

    async with trio.open_nursery() as nursery:
        for name in (b"a", b"b", b"c"):
            nursery.start_soon(appender, name)
            await trio.testing.wait_all_tasks_blocked()
        # a's record went alone (nothing in flight); b's and c's wait behind it.
        assert lw.entries() == [[b"a0"]]
        lw.ack(0)  # wakes one appender: no hold, b0 and c0 go at once
        await trio.testing.wait_all_tasks_blocked()
        assert lw.entries() == [[b"a0"], [b"b0", b"c0"]]
        lw.ack(1)  # wakes two appenders: the set holding a1 waits for both
        await trio.testing.wait_all_tasks_blocked()
        # Sent by the second of them; the releaser never ran.
        assert lw.entries() == [[b"a0"], [b"b0", b"c0"], [b"a1", b"b1", b"c1"]]
        assert len(releases) == 1
        lw.ack(2)
    assert done == 3


async def test_a_hold_ends_one_round_later_when_a_woken_task_does_not_append() -> None:
    lw = _Ledger()
    with trio.fail_after(10):  # (a releaser that never ends the hold would spin here)
        await _three_holds(lw)


async def _three_holds(lw: _Ledger) -> None:
    started = 0
    async with trio.open_nursery() as nursery:

        def spawn(fn: Callable[[], Awaitable[None]]) -> bool:
            nonlocal started
            started += 1
            nursery.start_soon(fn)
            return True

        batcher = RecordBatcher(
            lambda: (1, lw),  # type: ignore[arg-type,return-value]
            batch_bytes=1 << 20,
            codec=Codec.NONE,
            spawn=spawn,
        )
        for n in range(3):
            first, _slot = batcher.add(b"first%d" % n)
            batcher.added()
            entry = len(lw.sent) - 1

            async def appender(first: RecordBatch = first, n: int = n) -> None:
                await first.wait()
                await _append(batcher, b"again%d" % n)

            nursery.start_soon(_append, batcher, b"x%d" % n)  # waits behind the entry in flight
            nursery.start_soon(appender)
            nursery.start_soon(first.settled)  # woken too, and never appends
            await trio.testing.wait_all_tasks_blocked()
            assert lw.entries()[entry:] == [[b"first%d" % n]]
            lw.ack(entry)
            # Two tasks woken, one appended: the set (x, again) waited for the releaser, one
            # scheduling round later.
            await trio.testing.wait_all_tasks_blocked()
            assert lw.entries()[entry:] == [[b"first%d" % n], [b"again%d" % n, b"x%d" % n]]
            lw.ack(entry + 1)
            await trio.testing.wait_all_tasks_blocked()
        assert started == 1  # one releaser for every hold, parked between them
        batcher.stop()  # the writer closes: the releaser ends (else the nursery would wait)


async def test_a_flushed_group_goes_beside_the_entry_in_flight() -> None:
    """``added(flush=True)`` (append_batch's ``flush``): a caller's complete group is sent at
    once, pipelined, instead of waiting for the entry in flight and taking more records."""
    lw = _Ledger()
    batcher = _batcher(lw, [])
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_append, batcher, b"a")  # alone: nothing was in flight
        await trio.testing.wait_all_tasks_blocked()
        waiting, _slot = batcher.add(b"b")  # not flushed: waits behind "a"
        batcher.added()
        assert lw.entries() == [[b"a"]]
        group = [batcher.add(record)[0] for record in (b"c", b"d")]
        batcher.added(flush=True)  # goes now, with what was waiting before it
        assert lw.entries() == [[b"a"], [b"b", b"c", b"d"]]
        assert group[0] is group[1] is waiting
        batcher.add(b"e")  # a new record set, held behind the two in flight
        batcher.added()
        assert len(lw.sent) == 2
        lw.ack(0)
        lw.ack(1)
        assert lw.entries() == [[b"a"], [b"b", b"c", b"d"], [b"e"]]
        lw.ack(2)
        await trio.testing.wait_all_tasks_blocked()
