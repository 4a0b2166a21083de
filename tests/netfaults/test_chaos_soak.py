"""The chaos soak: a log written through cycles of mixed faults between real processes, then
read back and checked (``chaos`` and ``slow``: not in the default run).

Five bookies on a real ZooKeeper: three in network namespaces (partitions: link down, or
nftables drop), two on loopback behind ``FaultProxy`` (delay with jitter, half-open stalls),
one of those with its journal on a small tmpfs (a full disk). A writer process appends to the
log and prints what was acknowledged; a reader in the test process tails the log. Each cycle
picks one or two faults at random among SIGKILL of a bookie, of the writer (a new writer
takes the log over) or of ZooKeeper, a partition, a delay, a stall and a full disk; holds
them while the writer goes on (or for a few seconds, when it cannot), heals them, and waits
for the writer to make progress again. At the end the log is taken over (fencing the last
writer) and read by two fresh readers: every acknowledged record is there once, at its
position, in order, and every reader (the tailing one too) saw the same records.

    WALKIT_CHAOS_CYCLES=20 pytest tests/netfaults/test_chaos_soak.py -m chaos -s
    WALKIT_CHAOS_SEED=1234 ...       # the fault schedule of a failed run (not its timing)

Needs root and network namespaces (as tests/netfaults), ZooKeeper, and tmpfs mounts.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import os
import random
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import attrs
import pytest
import trio

import walkit
from tests._cluster import BookieProcess, ChildProcess, free_port
from tests._zookeeper import ZooKeeperServer, missing_zookeeper
from tests.log._history import LogHistory
from tests.netfaults._lab import NetnsBookie, skip_without_netns
from tests.netfaults._netns import NetLab, leftovers
from tests.ops._ops import small_tmpfs
from walkit import LogPosition, LogRecord
from walkit.testing import FaultProxy

#: Cycles of faults (a few by default; the soak runs a thousand and more).
CYCLES = int(os.environ.get("WALKIT_CHAOS_CYCLES", "3"))

pytestmark = [
    pytest.mark.processes,
    pytest.mark.zookeeper,
    pytest.mark.slow,
    pytest.mark.chaos,
    # A cycle takes 6-8 s on two idle cores: a minute each leaves room for a loaded machine.
    pytest.mark.timeout(300 + 60 * CYCLES),
]

WRITER = Path(__file__).with_name("_soak_writer.py")
LOG = "soak"
PASSWORD = b"soak"
FAULTS = (
    "kill-bookie",
    "kill-writer",
    "kill-zookeeper",
    "partition",
    "delay",
    "stall",
    "full-disk",
)
#: Records the writer must get acknowledged to count as going on.
PROGRESS = 20


class WriterProcess(ChildProcess):
    """One ``_soak_writer.py`` process (``ready``: it holds the log)."""

    ready_text = "WRITER "
    kind = "writer"

    def __init__(self, url: str, name: str) -> None:
        super().__init__(0)
        self.url = url
        self.name = name
        self.read = 0  # output lines already parsed

    def command(self) -> list[str]:
        return [sys.executable, str(WRITER), self.url, LOG, self.name]

    def new_acks(self) -> list[tuple[str, bytes, LogPosition]]:
        lines, self.read = self.output[self.read :], len(self.output)
        acks = []
        for line in lines:
            if line.startswith("ACK "):
                _, position, payload = line.split(" ", 2)
                acks.append((self.name, payload.encode(), LogPosition.parse(position)))
        return acks


@attrs.define
class Soak:
    """The processes, the faults on them, and what the writers were told."""

    url: str
    lab: NetLab
    zookeeper: ZooKeeperServer
    netns: list[NetnsBookie]
    proxied: list[BookieProcess]
    proxies: list[FaultProxy]
    disk: Path
    rng: random.Random
    history: LogHistory = attrs.field(factory=LogHistory)
    writer: WriterProcess | None = None
    generation: int = 0
    faults: collections.Counter[str] = attrs.field(factory=collections.Counter)

    @property
    def bookies(self) -> list[BookieProcess]:
        return [*self.netns, *self.proxied]

    def collect(self) -> int:
        """Take the writer's new acknowledgements into the history; how many there are."""
        if self.writer is not None:
            self.history.acked.extend(self.writer.new_acks())
        return len(self.history.acked)

    def start_writer(self) -> None:
        """A new writer takes the log over (tried again while the cluster is in no state to
        let it: the faults of the moment)."""
        for _attempt in range(10):
            self.collect()
            self.generation += 1
            self.writer = WriterProcess(self.url, f"w{self.generation}")
            try:
                self.writer.start(timeout=60)
                return
            except RuntimeError as exc:
                print(f"writer w{self.generation} did not start: {str(exc)[-300:]}")
        raise AssertionError("no writer could take the log over 10 times in a row")

    def writer_alive(self) -> None:
        """Start a new writer if the last one exited (fenced, or failed under the faults)."""
        if self.writer is None or not self.writer.running:
            self.start_writer()

    def filler(self) -> Path:
        return self.disk / "filler"

    def fill_disk(self) -> None:
        with open(self.filler(), "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * (256 << 10))
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc

    def _pick(self, eligible: list[BookieProcess], victims: set[int]) -> BookieProcess | None:
        free = [b for b in eligible if id(b) not in victims]
        if not free:
            return None
        bookie = self.rng.choice(free)
        victims.add(id(bookie))
        return bookie

    def apply(self, fault: str, victims: set[int]) -> tuple[str, object] | None:
        """Start ``fault``; what to heal (its kind and target), or None if no bookie is left
        for it (``victims``: the bookies impaired already this cycle)."""
        if fault == "kill-writer":
            assert self.writer is not None
            self.writer.kill()
            target: object = None
        elif fault == "kill-zookeeper":
            assert self.zookeeper.process is not None
            self.zookeeper.process.kill()
            self.zookeeper.process.wait()
            target = None
        elif fault == "full-disk":
            target = self._pick(self.proxied[:1], victims)
            if target is not None:
                self.fill_disk()
        elif fault in ("delay", "stall"):
            bookie = self._pick(self.proxied, victims)
            if bookie is None:
                return None
            target = proxy = self.proxies[self.proxied.index(bookie)]
            if fault == "delay":
                proxy.delay(self.rng.choice([0.3, 1.0, 3.0]), jitter=0.2)
            else:
                proxy.stall()
        elif fault == "partition":
            target = node_bookie = self._pick(list(self.netns), victims)
            if isinstance(node_bookie, NetnsBookie):
                if self.rng.random() < 0.5:
                    self.lab.link_down(node_bookie.node)
                else:
                    self.lab.drop(node_bookie.node)
        else:  # kill-bookie
            target = killed = self._pick(self.bookies, victims)
            if killed is not None:
                killed.kill()
        if target is None and fault not in ("kill-writer", "kill-zookeeper"):
            return None
        self.faults[fault] += 1
        return fault, target

    def heal(self, fault: str, target: object) -> None:
        if fault == "kill-writer":
            self.start_writer()
        elif fault == "kill-zookeeper":
            self.zookeeper.restart()
        elif fault == "full-disk":
            self.filler().unlink()
        elif fault in ("delay", "stall"):
            assert isinstance(target, FaultProxy)
            target.heal()
        elif fault == "partition":
            assert isinstance(target, NetnsBookie)
            self.lab.heal(target.node)
        else:
            assert isinstance(target, BookieProcess)
            for attempt in range(3):  # as a supervisor would
                try:
                    target.start(timeout=60)
                    return
                except RuntimeError:
                    if attempt == 2:
                        raise


def _wait_progress(soak: Soak, records: int, timeout: float, *, restart: bool = True) -> bool:
    """Until the writers got ``records`` more acknowledged (with ``restart``, starting a new
    writer when the last one exited); False after ``timeout``."""
    target = soak.collect() + records
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if soak.collect() >= target:
            return True
        if restart:
            soak.writer_alive()
        time.sleep(0.05)  # the writer's output lines: polled, there is no other event here
    return False


async def _tail(url: str, tailed: list[LogRecord]) -> None:
    """Follow the log from its start, going on after errors (faults) at the next position."""
    position = LogPosition.EARLIEST
    while True:
        try:
            async with walkit.Client.connect(url, read_timeout=2, connect_timeout=2) as client:
                log = await walkit.Log.open(client, LOG, password=PASSWORD)
                async for record in log.reader(position):
                    tailed.append(record)
                    position = record.position.next()
        except walkit.WalkitError:
            await trio.sleep(0.5)


@contextlib.contextmanager
def _cluster(tmp_path: Path) -> Iterator[Soak]:
    skip_without_netns()
    problem = missing_zookeeper()
    if problem:
        pytest.fail(problem, pytrace=False)
    seed = int(os.environ.get("WALKIT_CHAOS_SEED", random.randrange(2**32)))
    print(f"chaos soak seed {seed} (replay the schedule with WALKIT_CHAOS_SEED={seed})")
    zookeeper = ZooKeeperServer(tmp_path / "zookeeper")
    proxies: list[FaultProxy] = []
    bookies: list[BookieProcess] = []
    with NetLab() as lab, small_tmpfs(tmp_path / "small", "64m") as disk:
        try:
            zookeeper.start()
            # ZooKeeper listens on every address: the namespaces reach it at the bridge's.
            url = f"zk://{lab.gateway}:{zookeeper.port}/soak"
            quiet = ["--no-autorecovery"]
            netns = [NetnsBookie(lab.add_node(), url, tmp_path / f"ns-{i}") for i in range(3)]
            proxied = []
            for i in range(2):
                port = free_port()
                host = f"127.0.0.{10 + i}"
                proxies.append(
                    FaultProxy(
                        ("127.0.0.1", port),
                        listen=(host, port),
                        rng=random.Random(seed + i),
                        name=f"proxy-{i}",
                    ).start()
                )
                args = [*quiet, "--advertised-address", host]
                if i == 0:  # the journal on a small disk that a fault fills
                    args += [
                        "--data-dir",
                        str(tmp_path / "disk-ledgers"),
                        "--disk-usage-threshold",
                        "0.9",
                        "--disk-check-interval",
                        "0.5",
                        # Journal files rolled and removed often: a small disk holds them.
                        "--journal-max-size",
                        "4MiB",
                        "--checkpoint-interval",
                        "2",
                    ]
                data = disk / "journal" if i == 0 else tmp_path / f"lo-{i}"
                proxied.append(BookieProcess(url, data, port, extra_args=args))
            bookies = [*netns, *proxied]
            for bookie in bookies:
                bookie.start(timeout=60)
            yield Soak(url, lab, zookeeper, netns, proxied, proxies, disk, random.Random(seed))
        finally:
            for bookie in bookies:
                bookie.stop()
            for proxy in proxies:
                proxy.close()
            zookeeper.stop()
    assert not leftovers(lab.prefix)


@contextlib.asynccontextmanager
async def _tailing(url: str) -> AsyncIterator[list[LogRecord]]:
    tailed: list[LogRecord] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_tail, url, tailed)
        yield tailed
        nursery.cancel_scope.cancel()


async def _final_reads(url: str) -> list[list[LogRecord]]:
    """Take the log over (fencing the last writer), then read it all with two clients."""
    async with walkit.Client.connect(url) as client:
        log = await walkit.Log.open(client, LOG, password=PASSWORD, takeover_attempts=40)
        async with log.writer():
            pass
    reads = []
    for _ in range(2):
        async with walkit.Client.connect(url) as client:
            log = await walkit.Log.open(client, LOG, password=PASSWORD)
            reads.append([r async for r in log.reader(LogPosition.EARLIEST, follow=False)])
    return reads


async def test_chaos_soak(tmp_path: Path) -> None:
    cycles = CYCLES
    with _cluster(tmp_path) as soak:
        started = time.monotonic()
        await trio.to_thread.run_sync(soak.start_writer)  # it creates the log
        async with _tailing(soak.url) as tailed:
            assert await trio.to_thread.run_sync(_wait_progress, soak, PROGRESS, 120)
            for cycle in range(cycles):
                await trio.to_thread.run_sync(_cycle, soak, cycle)
            await trio.to_thread.run_sync(_wait_progress, soak, PROGRESS, 120)
            soak.collect()
            assert soak.writer is not None
            soak.writer.kill()
            soak.collect()
            reads = await _final_reads(soak.url)
            with trio.fail_after(120):
                while len(tailed) < len(reads[0]):  # noqa: ASYNC110 (the tailing reader)
                    await trio.sleep(0.1)
        elapsed = time.monotonic() - started
        soak.history.check(*reads, tailed)
        acked = len(soak.history.acked)
        read_only = sum("bookie_read_only" in line for line in soak.proxied[0].output)
        print(
            f"chaos soak: {cycles} cycles, {acked} acknowledged records, 0 lost, "
            f"{len(reads[0])} records read, {soak.generation} writers, "
            f"{elapsed / max(cycles, 1):.1f} s per cycle ({elapsed:.0f} s); "
            f"faults: {dict(sorted(soak.faults.items()))}; the small disk's bookie turned "
            f"read-only {read_only} times"
        )


def _cycle(soak: Soak, cycle: int) -> None:
    rng = soak.rng
    kinds = rng.sample(FAULTS, 1 if rng.random() < 0.6 else 2)
    victims: set[int] = set()
    applied = [a for a in (soak.apply(kind, victims) for kind in kinds) if a is not None]
    hold = rng.uniform(1, 5)
    print(f"cycle {cycle}: {', '.join(k for k, _ in applied)} for {hold:.1f} s", flush=True)
    # The faults last ``hold`` seconds (a schedule, as in the network-fault soak), while the
    # writer goes on if it can; a writer that exits is replaced after healing.
    _wait_progress(soak, sys.maxsize, hold, restart=False)
    # ZooKeeper first: a bookie or a writer cannot start without it.
    for kind, target in sorted(applied, key=lambda a: a[0] != "kill-zookeeper"):
        soak.heal(kind, target)
    if not _wait_progress(soak, PROGRESS, 180):
        raise AssertionError(
            f"cycle {cycle} ({kinds}): no progress after healing; writer output:\n"
            + "\n".join((soak.writer.output if soak.writer else [])[-30:])
        )
