"""Log takeover with real processes: bookie processes on loopback, a writer process appending
(printing each acknowledged position) is SIGKILLed, another process takes the log over and
appends; a reader tailing all along and a final read see every acknowledged record of both,
in order, exactly once, at the positions the writers were given. An idempotent producer's
writer processes, SIGKILLed in the middle of batches and retried, store each record once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import walkit
from tests._cluster import ProcessCluster, process_cluster
from tests.log._history import LogHistory
from walkit import LogPosition, LogRecord

pytestmark = pytest.mark.processes

WRITER = Path(__file__).with_name("_log_writer.py")
LOG = "orders"


class WriterProcess:
    """``_log_writer.py`` (or a script with the same output, see ``script``): ``acked``
    holds (position, what the ACK line names) per acknowledged record."""

    def __init__(
        self, url: str, tag: str, count: int | None = None, *, script: list[str] | None = None
    ) -> None:
        args = [sys.executable, *(script or [str(WRITER), url, LOG, tag])]
        if count is not None:
            args.append(str(count))
        self.tag = tag
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        self.acked: list[tuple[LogPosition, bytes]] = []
        self.first: LogPosition | None = None
        self.done = False
        self.output: list[str] = []
        self.ended = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").strip()
            self.output.append(line)
            parts = line.split()
            if parts[:1] == ["ACK"]:
                self.acked.append((LogPosition.parse(parts[1]), parts[2].encode()))
            elif parts[:1] == ["FIRST"]:
                self.first = LogPosition.parse(parts[1])
            elif parts[:1] == ["DONE"]:
                self.done = True
        self.ended.set()

    async def wait_for(self, count: int, timeout: float = 60) -> None:
        with trio.fail_after(timeout):
            while len(self.acked) < count:
                if self.process.poll() is not None and self.ended.is_set():
                    raise AssertionError("writer exited early:\n" + "\n".join(self.output[-20:]))
                await trio.sleep(0.01)

    async def finish(self, timeout: float = 60) -> int:
        with trio.fail_after(timeout):
            code = await trio.to_thread.run_sync(self.process.wait, abandon_on_cancel=True)
            await trio.to_thread.run_sync(self.ended.wait, abandon_on_cancel=True)
        return code

    async def kill(self) -> int:
        self.process.send_signal(signal.SIGKILL)
        return await self.finish()

    def record(self, history: LogHistory) -> None:
        for pos, payload in self.acked:
            history.acked.append((self.tag, payload, pos))


@pytest.fixture
def bookies(tmp_path: Path) -> Iterator[ProcessCluster]:
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 3) as c:
        yield c


async def test_killed_writer_is_taken_over_and_nothing_acknowledged_is_lost(
    bookies: ProcessCluster,
) -> None:
    url = bookies.metadata_url
    tailed: list[LogRecord] = []
    last_of_b = b"b-99"
    async with walkit.Client.connect(url) as client:
        log = await walkit.Log.open(client, LOG)

        async def tail() -> None:
            async for rec in log.reader(LogPosition.EARLIEST):
                tailed.append(rec)
                if rec.payload == last_of_b:
                    return

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(tail)
                a = WriterProcess(url, "a")
                try:
                    await a.wait_for(150)  # past a few rolls (40 records per ledger)
                finally:
                    a.process.send_signal(signal.SIGKILL)
                assert await a.finish() == -signal.SIGKILL
                b = WriterProcess(url, "b", count=100)
                code = await b.finish()
                assert code == 0 and b.done, "\n".join(b.output[-20:])
                # The nursery ends when the tail has reached b's last record.
        final = [rec async for rec in log.reader(follow=False)]
        history = LogHistory()
        a.record(history)
        b.record(history)
        assert len(a.acked) >= 150 and len(b.acked) == 100
        history.check(final, tailed)
        # b starts after everything a wrote, including what a wrote but was never told.
        assert b.first is not None and b.first > a.acked[-1][0]
        assert [r.payload for r in final if r.position >= b.first] == [
            b"b-%d" % i for i in range(100)
        ]
        # a's records that were written but never acknowledged may be there, each once, in
        # a's order, before b's.
        a_read = [r.payload for r in final if r.payload.startswith(b"a-")]
        assert a_read == [b"a-%d" % i for i in range(len(a_read))]
        md = await log.metadata()
        assert len([lg for lg in md.ledgers if lg.seq < b.first.ledger_seq]) >= 4  # a rolled
        for lg in md.ledgers:
            assert (await client.ledger_metadata(lg.ledger_id)).is_closed


PRODUCER_WRITER = Path(__file__).with_name("_producer_writer.py")


def producer_process(url: str, start: int, count: int | None = None) -> WriterProcess:
    """``_producer_writer.py`` from sequence number ``start``: its ACK lines name the numbers."""
    script = [str(PRODUCER_WRITER), url, "payments", "teller-1", str(start)]
    return WriterProcess(url, "teller-1", count, script=script)


async def test_an_idempotent_producer_killed_mid_batch_retries_and_stores_each_record_once(
    bookies: ProcessCluster,
) -> None:
    # Three writer processes in turn, each starting where the last one's acknowledged records
    # end: the batch it was killed in is retried whole, with the same numbers and bytes, and
    # some of its entries may have been stored (they are recognised, not stored again).
    url = bookies.metadata_url
    writers: list[WriterProcess] = []
    start = 0
    for _round in range(3):
        writer = producer_process(url, start)
        writers.append(writer)
        try:
            await writer.wait_for(60)
        finally:
            await writer.kill()
        start = int(writer.acked[-1][1]) + 1  # the start of the batch it was killed in
    last = producer_process(url, start, count=28)
    writers.append(last)
    assert await last.finish() == 0 and last.done, "\n".join(last.output[-20:])
    async with walkit.Client.connect(url) as client:
        log = await walkit.Log.open(client, "payments")
        final = [rec async for rec in log.reader(follow=False)]
    # Every number from 0 to the end, once each, in order, with its bytes.
    numbers = [rec.producer.sequence for rec in final if rec.producer is not None]
    assert len(numbers) == len(final)
    assert numbers == list(range(start + 28)), "a record stored twice, or missing"
    assert all(rec.payload == b"p-%d" % rec.producer.sequence for rec in final if rec.producer)
    # Every position a writer was given holds its record (retried ones: the first copy).
    at = {rec.position: rec for rec in final}
    for writer in writers:
        for pos, n in writer.acked:
            assert at[pos].producer == walkit.ProducerTag("teller-1", int(n))
