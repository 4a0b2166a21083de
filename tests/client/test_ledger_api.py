"""The ledger API end to end (in-process bookies with DiskStorage, memory metadata): order
under concurrency, tailing, close rules, fencing, bad input."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from tests.client.conftest import cluster, connect
from walkit._core.digest import master_key
from walkit._core.ledger_metadata import LedgerState
from walkit._core.wire import ReadLacFlag, ReadLacRequest, ReadLacResponse, StatusCode
from walkit.client import Client, client_services
from walkit.errors import (
    ConfigurationError,
    InvalidArgumentError,
    LedgerClosedError,
    LedgerInRecoveryError,
    MetadataStoreError,
    NoSuchEntryError,
    NoSuchLedgerError,
    NotEnoughBookiesError,
    UnauthorizedAccessError,
    WriterFencedError,
)


def payload(i: int, size: int = 64) -> bytes:
    seed = f"p{i}:".encode()
    return (seed * (size // len(seed) + 1))[:size]


async def test_fifty_concurrent_appenders_share_one_gapless_order(
    memory_url: str, tmp_path: Path
) -> None:
    per_task = 40
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        lw = await client.create_ledger(3, 2, 2)
        got: dict[int, list[tuple[int, bytes]]] = {}

        async def appender(task: int) -> None:
            rng = random.Random(task)
            mine = got.setdefault(task, [])
            for n in range(per_task):
                data = f"task{task}-{n}".encode()
                if rng.random() < 0.2:
                    batch = [data, data + b"+"]
                    ids = await lw.append_batch(batch)
                    mine += zip(ids, batch, strict=True)
                else:
                    mine.append((await lw.append(data), data))
                if rng.random() < 0.3:
                    await trio.lowlevel.checkpoint()

        async with trio.open_nursery() as nursery:
            for task in range(50):
                nursery.start_soon(appender, task)
        written = {eid: data for mine in got.values() for eid, data in mine}
        total = sum(len(m) for m in got.values())
        assert len(written) == total  # no id handed out twice
        assert sorted(written) == list(range(total))  # no gap
        for mine in got.values():  # each task's appends are in its own call order
            ids = [eid for eid, _ in mine]
            assert ids == sorted(ids)
        assert lw.last_add_confirmed == total - 1
        await lw.close()
        lr = await client.open_ledger(lw.id)
        entries = await lr.read(0, total - 1)
        assert [e.payload for e in entries] == [written[i] for i in range(total)]


async def test_tailing_reader_sees_every_entry_in_order(memory_url: str, tmp_path: Path) -> None:
    # Long rounds: a reader that notices the close must do it through the metadata watch.
    async with cluster(memory_url, tmp_path, 3), connect(memory_url, long_poll_round=100) as client:
        lw = await client.create_ledger(3, 2, 2, password=b"t")
        lr = await client.open_ledger(lw.id, password=b"t")
        assert lr.last_add_confirmed == -1
        assert await lr.wait_for_entry(0, timeout=0.2) is None
        seen: list[bytes] = []

        async def tail() -> None:
            for eid in range(60):
                entry = await lr.wait_for_entry(eid, timeout=30)
                assert entry is not None and entry.entry_id == eid
                seen.append(entry.payload)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(tail)
            for i in range(60):
                if i % 3 == 0:
                    await lw.append_batch([payload(i)])
                else:
                    await lw.append(payload(i))
                if i % 7 == 0:
                    await trio.sleep(0.01)
        assert seen == [payload(i) for i in range(60)]

        async def close_soon() -> None:
            await trio.sleep(0.05)
            await lw.close()

        # A reader waiting past the end learns the ledger was closed (the metadata watch).
        async with trio.open_nursery() as nursery:
            nursery.start_soon(close_soon)
            with trio.fail_after(50), pytest.raises(LedgerClosedError):
                await lr.wait_for_entry(60, timeout=30)
        assert lr.is_closed and lr.last_add_confirmed == 59
        with pytest.raises(LedgerClosedError):
            await lr.wait_for_entry(61, timeout=30)
        assert (await lr.wait_for_entry(59, timeout=0)) is not None


async def test_a_close_between_two_waits_is_seen_at_once(memory_url: str, tmp_path: Path) -> None:
    """The tailing reader keeps its metadata watch armed from one wait to the next (it does
    not re-read the metadata per entry): a close that lands while nobody waits must still end
    the next wait at once, not after a long-poll round."""
    async with cluster(memory_url, tmp_path, 3), connect(memory_url, long_poll_round=100) as client:
        lw = await client.create_ledger(3, 3, 2, password=b"t")
        lr = await client.open_ledger(lw.id, password=b"t")
        seen: list[object] = []
        for eid in range(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(lw.append, payload(eid))
                assert await lr.wait_for_entry(eid, timeout=30) is not None
            seen.append(lr.metadata)  # a new object each time the metadata is read
        assert all(md is seen[0] for md in seen)  # read once, when the watch was armed
        watch = lr._watch
        assert watch is not None and watch.live
        await lw.close()  # nobody is waiting now
        with trio.fail_after(20), pytest.raises(LedgerClosedError):
            await lr.wait_for_entry(20, timeout=60)
        assert lr.is_closed and lr._watch is None and watch.scope.cancel_called


async def test_close_rules(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        # Empty ledger closes at -1; closing twice is fine.
        async with await client.create_ledger(3, 2, 2) as lw:
            pass
        md = await client.ledger_metadata(lw.id)
        assert md.state is LedgerState.CLOSED and md.last_entry_id == -1
        await lw.close()
        with pytest.raises(LedgerClosedError):
            await lw.append(b"late")

        ledgers = client_services(client).context.ledgers
        # Someone else closed it at the same entry: success.
        lw = await client.create_ledger(3, 2, 2)
        await lw.append_batch([b"a", b"b"])
        md, version = await ledgers.read(lw.id)
        await ledgers.write(md.closed(1, 2), version)
        await lw.close()
        # Closed elsewhere at another entry: the writer was fenced out.
        lw = await client.create_ledger(3, 2, 2)
        await lw.append_batch([b"a", b"b"])
        md, version = await ledgers.read(lw.id)
        await ledgers.write(md.closed(0, 1), version)
        with pytest.raises(WriterFencedError):
            await lw.close()
        # Being recovered: the writer may not close it.
        lw = await client.create_ledger(3, 2, 2)
        await lw.append(b"a")
        md, version = await ledgers.read(lw.id)
        await ledgers.write(md.with_state(LedgerState.IN_RECOVERY), version)
        with pytest.raises(LedgerInRecoveryError):
            await lw.close()


async def test_fenced_ledger_fails_pending_appends(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        lw = await client.create_ledger(3, 3, 2, password=b"f")
        await lw.append_batch([payload(i) for i in range(20)])
        lr = await client.open_ledger(lw.id, password=b"f")
        assert await lr.wait_for_entry(19, timeout=30) is not None  # the LAC reached the bookies
        # Fence the ledger on its bookies, as a recovering reader does.
        for bookie in lw.metadata.current_ensemble:
            resp = await client_services(client).context.call(
                bookie,
                lambda rid: ReadLacRequest(
                    rid, lw.id, ReadLacFlag.FENCE, master_key=master_key(b"f")
                ),
            )
            assert isinstance(resp, ReadLacResponse) and resp.status is StatusCode.OK
        with pytest.raises(WriterFencedError):
            await lw.append(b"after fence")
        with pytest.raises(WriterFencedError):  # the writer stays fenced
            await lw.append(b"again")
        # Acknowledged entries are all there.
        entries = await lr.read(0, 19)
        assert [e.payload for e in entries] == [payload(i) for i in range(20)]


async def test_bad_input_gives_clear_errors(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3) as bookies, connect(memory_url) as client:
        with pytest.raises(InvalidArgumentError):
            await client.create_ledger(2, 3, 2)  # E < Qw
        with pytest.raises(InvalidArgumentError):
            await client.create_ledger(3, 2, 3)  # Qw < Qa
        with pytest.raises(InvalidArgumentError):
            await client.create_ledger(3, 2, 2, digest="md5")
        with pytest.raises(InvalidArgumentError):
            await client.create_ledger(3, 2, 2, password="text")  # type: ignore[arg-type]
        with pytest.raises(NotEnoughBookiesError):
            await client.create_ledger(4, 2, 2)  # only 3 bookies
        lw = await client.create_ledger(3, 2, 2, password=b"right")
        with pytest.raises(InvalidArgumentError):
            await lw.append("text")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            await lw.append(b"x" * (client.options.max_entry_size + 1))
        await lw.append(b"ok")
        with pytest.raises(UnauthorizedAccessError):
            await client.open_ledger(lw.id, password=b"wrong")
        with pytest.raises(NoSuchLedgerError):
            await client.open_ledger(123_456_789)
        with pytest.raises(NoSuchLedgerError):
            await client.ledger_metadata(123_456_789)
        with pytest.raises(NoSuchLedgerError):
            await client.delete_ledger(123_456_789)
        with pytest.raises(InvalidArgumentError):
            await client.open_ledger(-1)
        lr = await client.open_ledger(lw.id, password=b"right")
        with pytest.raises(NoSuchEntryError):
            await lr.read(0, 5)  # past the LAC
        with pytest.raises(InvalidArgumentError):
            await lr.read(3, 1)
        await lw.close()
        with pytest.raises(LedgerClosedError):
            await lw.append(b"closed")
        with pytest.raises(LedgerClosedError):
            await lw.append_batch([b"closed"])
        # A bookie down at create time (cleanly stopped: it left the bookie list).
        await bookies.stop(2)
        with trio.fail_after(10):
            while True:  # the bookie watch reaches the placement policy soon after
                try:
                    await client.create_ledger(3, 2, 2)
                except NotEnoughBookiesError:
                    break
                await trio.sleep(0.05)
        # Deleting needs the ledger's password, as opening does.
        with pytest.raises(UnauthorizedAccessError):
            await client.delete_ledger(lw.id)
        with pytest.raises(UnauthorizedAccessError):
            await client.delete_ledger(lw.id, password=b"wrong")
        assert lw.id in await client.list_ledgers()
        await client.delete_ledger(lw.id, password=b"right")
        assert lw.id not in await client.list_ledgers()


async def test_bad_urls_and_options() -> None:
    for url in (
        "nothing",
        "http://x/y",
        "sqlite://relative.db",
        "zk://127.0.0.1:2181",
        "memory://",
    ):
        with pytest.raises(ConfigurationError):
            async with connect(url):
                pass
    with pytest.raises(ConfigurationError):
        async with connect("memory://opts", add_timeout=-1):
            pass
    with pytest.raises(ConfigurationError):
        async with connect("memory://opts", no_such_option=1):
            pass
    with pytest.raises(ConfigurationError):
        async with connect("memory://opts", placement=42):
            pass
    with pytest.raises(InvalidArgumentError):
        await Client.connect("memory://x")


async def test_unreachable_zookeeper_fails_fast() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with trio.fail_after(60), pytest.raises(MetadataStoreError):
        async with connect(
            f"zk://127.0.0.1:{port}/walkit", metadata_options={"connect_timeout": 1.0}
        ):
            pass


async def test_body_errors_are_not_wrapped(memory_url: str) -> None:
    with pytest.raises(KeyError):
        async with connect(memory_url):
            raise KeyError("mine")


async def test_backpressure_with_many_waiters_and_big_batches(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url, max_pending_adds=8) as client:
        lw = await client.create_ledger(3, 2, 2)
        results: dict[int, list[int]] = {}

        async def appender(task: int) -> None:
            if task % 4 == 0:
                results[task] = await lw.append_batch([payload(task)] * 50)
            else:
                results[task] = [await lw.append(payload(task)) for _ in range(10)]

        async with trio.open_nursery() as nursery:
            for task in range(20):
                nursery.start_soon(appender, task)
        everything = sorted(eid for ids in results.values() for eid in ids)
        assert everything == list(range(5 * 50 + 15 * 10))
        for task, ids in results.items():
            if task % 4 == 0:  # a batch's entries are consecutive, even when it waited
                assert ids == list(range(ids[0], ids[0] + 50))
        await lw.close()
        lr = await client.open_ledger(lw.id)
        entries = await lr.read(0, len(everything) - 1)
        by_id = {eid: task for task, ids in results.items() for eid in ids}
        assert all(e.payload == payload(by_id[e.entry_id]) for e in entries)
