"""Writer takeover with real processes: the old writer is SIGKILLed, or paused and resumed.

Checks, for each: the recovered (closed) ledger ends at or after the last acknowledged entry, every
acknowledged entry reads back byte for byte, and a paused old writer is never acknowledged
again once a reader has fenced the ledger.
"""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

import walkit
from tests._cluster import ProcessCluster, process_cluster
from tests.failure._writer import PASSWORD, payload

pytestmark = pytest.mark.processes

WRITER = Path(__file__).with_name("_writer.py")


class WriterProcess:
    def __init__(self, url: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WRITER), url],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.acked: list[int] = []
        self.ledger_id: int | None = None
        self.fenced = False
        self.output: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            line = raw.decode(errors="replace").strip()
            self.output.append(line)
            if line.startswith("ACK "):
                self.acked.append(int(line.split()[1]))
            elif line.startswith("LEDGER "):
                self.ledger_id = int(line.split()[1])
            elif line.startswith("FENCED"):
                self.fenced = True
        self.lines.put(None)

    def wait_for_acks(self, count: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.acked) < count:
            if self.process.poll() is not None:
                raise AssertionError("writer exited early:\n" + "\n".join(self.output[-20:]))
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"only {len(self.acked)} acks in {timeout}s:\n" + "\n".join(self.output[-20:])
                )
            time.sleep(0.01)

    def finish(self, timeout: float = 60) -> int:
        code = self.process.wait(timeout=timeout)
        self.lines.get(timeout=timeout)  # the reader thread saw the end of output
        return code


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcessCluster]:
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    with process_cluster(url, tmp_path, 3) as c:
        yield c


def _check_acks_in_order(acked: list[int]) -> None:
    assert acked == list(range(len(acked))), "acknowledgements out of order or with gaps"


async def _recover_and_check(url: str, ledger_id: int, acked: list[int]) -> walkit.LedgerMetadata:
    async with walkit.Client.connect(url) as client:
        reader = await client.open_ledger(ledger_id, password=PASSWORD, recovery=True)
        md = await client.ledger_metadata(ledger_id)
        assert md.state is walkit.LedgerState.CLOSED
        assert md.last_entry_id >= (acked[-1] if acked else -1), "an acknowledged entry was cut off"
        assert reader.last_add_confirmed == md.last_entry_id
        entries = await reader.read(0, md.last_entry_id) if md.last_entry_id >= 0 else []
        assert [e.entry_id for e in entries] == list(range(md.last_entry_id + 1))
        for entry in entries:
            assert entry.payload == payload(entry.entry_id), f"entry {entry.entry_id} differs"
        # A second recovery converges on the same end.
        again = await client.open_ledger(ledger_id, password=PASSWORD, recovery=True)
        assert again.last_add_confirmed == md.last_entry_id
        return md


async def test_writer_killed_then_recovered_from_another_process(cluster: ProcessCluster) -> None:
    writer = WriterProcess(cluster.metadata_url)
    writer.wait_for_acks(300)
    writer.process.send_signal(signal.SIGKILL)
    writer.finish()
    _check_acks_in_order(writer.acked)
    assert writer.ledger_id is not None
    await _recover_and_check(cluster.metadata_url, writer.ledger_id, writer.acked)


async def test_paused_old_writer_is_fenced_and_never_acknowledged_again(
    cluster: ProcessCluster,
) -> None:
    writer = WriterProcess(cluster.metadata_url)
    writer.wait_for_acks(200)
    writer.process.send_signal(signal.SIGSTOP)
    try:
        await trio.sleep(0.2)  # let acks already written to the pipe drain to our reader
        acked_before = list(writer.acked)
        assert writer.ledger_id is not None
        md = await _recover_and_check(cluster.metadata_url, writer.ledger_id, acked_before)
    finally:
        writer.process.send_signal(signal.SIGCONT)
    code = writer.finish()
    assert writer.fenced and code == 3, "\n".join(writer.output[-20:])
    _check_acks_in_order(writer.acked)
    # Acks the old writer printed after resuming were for entries it had sent before the fence
    # and that recovery kept; none may lie beyond the closed ledger's end.
    assert writer.acked[-1] <= md.last_entry_id, (writer.acked[-1], md.last_entry_id)
