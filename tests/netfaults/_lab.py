"""Bookie processes in network namespaces, and the recorded runs the fault tests share.

:func:`netns_cluster` starts one ``walkit-bookie`` process per namespace of a
:class:`~tests.netfaults._netns.NetLab` (listening on the namespace's address, registered in a
sqlite metadata store that every process reaches through the file system), and tears it all
down, processes first, then namespaces, links and bridge, checking nothing is left.

The clients run in the test process, in the root namespace: they reach the bookies through the
bridge, so every fault on a bookie's link is between them and that bookie.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Final, TypeVar

import pytest
import trio

import walkit
from tests._cluster import BookieProcess
from tests.bookie._helpers import connect
from tests.netfaults._netns import NetLab, Node, leftovers, netns_problem
from walkit import BookieId, LedgerReader, LedgerWriter
from walkit._core.digest import DigestManager
from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.wire import ReadRequest, ReadResponse, StatusCode
from walkit.errors import DigestMismatchError, LedgerClosedError, WalkitError
from walkit.testing import History

T = TypeVar("T")

BOOKIE_PORT: Final = 3181
PASSWORD: Final = b"netfault"
#: Short timeouts, so that a partitioned bookie is given up on (and replaced) in seconds.
TIMEOUT: Final = 2.0


class NetnsBookie(BookieProcess):
    """A ``walkit-bookie`` process inside a namespace, on its address."""

    def __init__(self, node: Node, metadata_url: str, data_dir: Path) -> None:
        super().__init__(metadata_url, data_dir, BOOKIE_PORT, extra_args=["--no-autorecovery"])
        self.node = node

    @property
    def address(self) -> BookieId:
        return BookieId(self.node.address, self.port)

    def command(self) -> list[str]:
        cmd = super().command()
        cmd[cmd.index("--host") + 1] = self.node.address
        return [*self.node.exec_prefix(), *cmd]


def skip_without_netns() -> None:
    problem = netns_problem()
    if problem:
        pytest.skip(problem)


@contextlib.contextmanager
def netns_cluster(tmp_path: Path, count: int) -> Iterator[tuple[NetLab, list[NetnsBookie], str]]:
    """``count`` bookies, each in its own namespace; yields (lab, bookies, metadata URL)."""
    skip_without_netns()
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    bookies: list[NetnsBookie] = []
    with NetLab() as lab:
        try:
            for i in range(count):
                bookies.append(NetnsBookie(lab.add_node(), url, tmp_path / f"bookie-{i}"))
            for bookie in bookies:
                bookie.start()
            yield lab, bookies, url
        finally:
            for bookie in bookies:
                bookie.stop()
    left = leftovers(lab.prefix)
    assert not left, f"namespaces or links left behind: {left}"


@contextlib.asynccontextmanager
async def client(url: str) -> AsyncIterator[walkit.Client]:
    async with walkit.Client.connect(
        url, add_timeout=TIMEOUT, read_timeout=TIMEOUT, connect_timeout=TIMEOUT
    ) as c:
        yield c


async def stored_copies(metadata: LedgerMetadata) -> dict[BookieId, dict[int, bytes]]:
    """What each bookie of a closed ledger holds, read from it over the wire: ``{bookie:
    {entry_id: payload}}`` (a copy whose digest fails is ``b"<corrupt>" + packet``)."""
    lid = metadata.ledger_id
    digest = DigestManager(lid, metadata.digest, PASSWORD)
    copies: dict[BookieId, dict[int, bytes]] = {}
    for address in sorted(metadata.all_bookies()):
        held: dict[int, bytes] = {}
        with trio.fail_after(120):
            async with connect(address) as c:
                for first in range(0, metadata.last_entry_id + 1, 256):
                    ids = range(first, min(first + 256, metadata.last_entry_id + 1))
                    answers = await c.call_many([ReadRequest(c.next_id(), lid, e) for e in ids])
                    for entry_id, answer in zip(ids, answers, strict=True):
                        assert isinstance(answer, ReadResponse), answer
                        if answer.status is not StatusCode.OK:
                            continue
                        try:
                            _, payload = digest.verify(answer.packet, entry_id)
                        except DigestMismatchError:
                            payload = b"<corrupt>" + answer.packet
                        held[entry_id] = payload
        copies[address] = held
    return copies


async def read_back(history: History, url: str, ledger_id: int) -> LedgerMetadata:
    """The final read-back: open with recovery, record the closed end, every bookie's copies
    and every entry."""
    async with client(url) as checker:
        with trio.fail_after(60):
            handle = await checker.open_ledger(ledger_id, password=PASSWORD, recovery=True)
        metadata = handle.metadata
        assert metadata.is_closed
        history.record_ledger_closed("checker", ledger_id, metadata.last_entry_id)
        history.record_stored_copies(metadata, await stored_copies(metadata))
        last = handle.last_add_confirmed
        entries = await handle.read(0, last) if last >= 0 else []
        history.record_read(
            "checker", ledger_id, 0, [(e.entry_id, e.payload) for e in entries], final=True
        )
        return metadata


async def tail(
    history: History,
    url: str,
    ledger_id: int,
    *,
    name: str = "reader",
    started: trio.Event | None = None,
) -> int:
    """Follow a ledger from entry 0 until it is closed, recording each entry read; return how
    many were read. Errors while faults are on (timeouts, unreachable bookies) are retried."""
    async with client(url) as c:
        handle = await c.open_ledger(ledger_id, password=PASSWORD)
        if started is not None:
            started.set()
        next_id = 0
        while True:
            try:
                entry = await handle.wait_for_entry(next_id, timeout=1.0)
            except LedgerClosedError:
                return next_id
            except WalkitError:
                await trio.sleep(0.1)
                continue
            if entry is None:
                continue
            history.record_read(name, ledger_id, next_id, [(entry.entry_id, entry.payload)])
            next_id += 1


async def recover(c: walkit.Client, ledger_id: int, attempts: int = 40) -> tuple[LedgerReader, int]:
    """Open ``ledger_id`` with recovery (fence it and close it), trying again while recovery
    fails in a retryable way: under loss, a bookie's answer may miss the read timeout, and
    recovery then cannot decide an entry and says "try again". Returns (handle, attempts)."""
    return await retrying(
        lambda: c.open_ledger(ledger_id, password=PASSWORD, recovery=True), attempts
    )


async def retrying(call: Callable[[], Awaitable[T]], attempts: int) -> tuple[T, int]:
    """``await call()``, again every 0.5 s while it fails in a retryable way, at most
    ``attempts`` times; returns (result, attempts used)."""
    for attempt in range(1, attempts + 1):
        try:
            return await call(), attempt
        except WalkitError as exc:
            if not exc.retryable or attempt == attempts:
                raise
            await trio.sleep(0.5)
    raise AssertionError("unreachable")


async def start_tail(
    nursery: trio.Nursery, history: History, url: str, ledger_id: int
) -> list[int]:
    """Start :func:`tail` in ``nursery`` and return once it follows the ledger; the list
    returned gets the count of entries it read when the ledger closes."""
    counts: list[int] = []
    started = trio.Event()

    async def follow() -> None:
        counts.append(await tail(history, url, ledger_id, started=started))

    nursery.start_soon(follow)
    await started.wait()
    return counts


async def take_over(log: walkit.Log, attempts: int = 40) -> walkit.LogWriter:
    """``log.writer()`` (a takeover), tried again while it fails in a retryable way: right after
    a cut heals, the client may still be backing off from the bookie it could not reach, and
    recovery then still cannot decide the tail entry."""
    writer, _ = await retrying(log.writer, attempts)
    return writer


async def create_ledger(
    c: walkit.Client, e: int = 3, qw: int = 2, qa: int = 2, attempts: int = 20
) -> LedgerWriter:
    """``create_ledger(e, qw, qa)``, tried again while it fails in a retryable way: under loss a
    bookie may miss the 2 s connect or answer timeout, and then too few bookies answered."""
    writer, _ = await retrying(lambda: c.create_ledger(e, qw, qa, password=PASSWORD), attempts)
    return writer


async def holders(metadata: LedgerMetadata, entry_id: int) -> dict[str, str]:
    """What each bookie of ``entry_id``'s ensemble answers to a plain read of it (for failure
    reports): a status name, or why there was no answer within 3 s."""
    out: dict[str, str] = {}
    for address in metadata.ensemble_for(entry_id):
        try:
            with trio.fail_after(3):
                async with connect(address) as c:
                    out[str(address)] = (await c.read(metadata.ledger_id, entry_id)).status.name
        except (OSError, trio.TooSlowError) as exc:
            out[str(address)] = f"no answer ({type(exc).__name__})"
    return out


async def wait_until(predicate: object, timeout: float, what: str) -> None:
    """Poll ``predicate()`` (a callable) until true; fail with ``what`` after ``timeout``."""
    assert callable(predicate)
    with trio.move_on_after(timeout):
        while not predicate():  # noqa: ASYNC110 (polls the writer's progress)
            await trio.sleep(0.05)
        return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")
