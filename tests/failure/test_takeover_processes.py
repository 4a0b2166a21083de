"""Writer takeover with real processes: the old writer is SIGKILLed, or paused and resumed.

Checks, for each: the recovered (closed) ledger ends at or after the last acknowledged entry, every
acknowledged entry reads back byte for byte, and a paused old writer is never acknowledged
again once a reader has fenced the ledger.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

import walkit
from tests._cluster import ProcessCluster, process_cluster
from tests.failure._writer import PASSWORD, payload

pytestmark = pytest.mark.processes

WRITER = Path(__file__).with_name("_writer.py")


MARK = "-- read up to here --"


class WriterProcess:
    def __init__(self, url: str) -> None:
        # Our own pipe for the child's output, and we keep a copy of its write end: a line we
        # write after the child stopped comes after everything the child printed (see pause).
        read_fd, self._write_fd = os.pipe()
        self.process = subprocess.Popen(
            [sys.executable, str(WRITER), url],
            stdout=self._write_fd,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        self._stdout = os.fdopen(read_fd, "rb")
        self._changed = threading.Condition()  # notified on every line and at the end
        self._ended = False
        self._marked = False
        self.acked: list[int] = []
        self.ledger_id: int | None = None
        self.fenced = False
        self.output: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        with self._stdout:
            for raw in self._stdout:
                line = raw.decode(errors="replace").strip()
                with self._changed:
                    if line == MARK:
                        self._marked = True
                    else:
                        self.output.append(line)
                    if line.startswith("ACK "):
                        self.acked.append(int(line.split()[1]))
                    elif line.startswith("LEDGER "):
                        self.ledger_id = int(line.split()[1])
                    elif line.startswith("FENCED"):
                        self.fenced = True
                    self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def _tail(self) -> str:
        return "\n".join(self.output[-20:])

    def wait_for_acks(self, count: int, timeout: float = 60) -> None:
        with self._changed:
            if not self._changed.wait_for(lambda: len(self.acked) >= count or self._ended, timeout):
                raise AssertionError(f"only {len(self.acked)} acks in {timeout}s:\n{self._tail()}")
            if len(self.acked) < count:
                raise AssertionError(f"writer exited early:\n{self._tail()}")

    def pause(self, timeout: float = 60) -> None:
        """SIGSTOP the writer; return once every line it printed before it stopped is read."""
        self.process.send_signal(signal.SIGSTOP)
        _pid, status = os.waitpid(self.process.pid, os.WUNTRACED)  # returns once it is stopped
        assert os.WIFSTOPPED(status), f"writer not stopped (status {status}):\n{self._tail()}"
        os.write(self._write_fd, f"{MARK}\n".encode())
        with self._changed:
            assert self._changed.wait_for(lambda: self._marked, timeout), "the mark never came"

    def finish(self, timeout: float = 60) -> int:
        os.close(self._write_fd)  # the child's copy is then the last: its exit ends the output
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout)  # the reader thread saw the end of output
        assert self._ended, "the writer's output did not end"
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
    writer.pause()
    try:
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
