"""Garbage collection of ledgers deleted in the metadata store."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path

import pytest
import trio

from tests.bookie._helpers import (
    KEY,
    Client,
    config,
    connect,
    http_request,
    packet,
    payload_for,
    running_bookie,
)
from walkit._core.ledger_metadata import LedgerMetadata
from walkit._core.types import BookieId
from walkit._core.wire import ReadLacFlag, ReadLacRequest, StatusCode
from walkit.errors import MetadataStoreError
from walkit.metadata import (
    LedgerManager,
    MetadataStore,
    Versioned,
    WatchEvent,
    forget_memory_tree,
    open_metadata_store,
)


class ListingHook(MetadataStore):
    """A real store, through which the test can act in the middle of a ledger listing.

    ``during_listing`` runs once, right after the listing read its first leaf directory of
    ledgers; ``fail`` makes reads of /ledgers fail like an unreachable store.
    """

    def __init__(self, store: MetadataStore) -> None:
        self.inner = store
        self.url = store.url
        self.during_listing: Callable[[], Awaitable[None]] | None = None
        self.fail: MetadataStoreError | None = None
        #: Reads of single ledgers' nodes (get and exists under /ledgers).
        self.ledger_reads = 0

    async def children(self, path: str) -> list[str]:
        if self.fail is not None and path.startswith("/ledgers"):
            raise self.fail
        names = await self.inner.children(path)
        hook = self.during_listing
        if hook is not None and any(n.startswith("L") for n in names):
            self.during_listing = None
            await hook()
        return names

    async def get(self, path: str) -> Versioned:
        self.ledger_reads += path.startswith("/ledgers")
        return await self.inner.get(path)

    async def create(
        self, path: str, value: bytes, *, ephemeral: bool = False, make_parents: bool = True
    ) -> int:
        return await self.inner.create(path, value, ephemeral=ephemeral, make_parents=make_parents)

    async def set(self, path: str, value: bytes, version: int) -> int:
        return await self.inner.set(path, value, version)

    async def delete(self, path: str, version: int | None = None) -> None:
        await self.inner.delete(path, version)

    async def exists(self, path: str) -> int | None:
        self.ledger_reads += path.startswith("/ledgers")
        return await self.inner.exists(path)

    def watch(self, path: str, *, children: bool = False) -> AsyncIterator[WatchEvent]:
        return self.inner.watch(path, children=children)

    def watch_many(self, targets: Iterable[tuple[str, bool]]) -> AsyncIterator[WatchEvent]:
        return self.inner.watch_many(targets)

    async def next_id(self, name: str = "ledger") -> int:
        return await self.inner.next_id(name)

    async def expire_session(self) -> None:
        await self.inner.expire_session()

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
async def store(request: pytest.FixtureRequest) -> AsyncIterator[ListingHook]:
    name = f"gc-{request.node.name}".replace("[", "-").replace("]", "")
    s = ListingHook(await open_metadata_store(f"memory://{name}"))
    yield s
    await s.aclose()
    forget_memory_tree(name)


def _metadata(ledger_id: int, bookie: BookieId) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=ledger_id,
        ensemble_size=1,
        write_quorum=1,
        ack_quorum=1,
        fragments=((0, (bookie,)),),
    )


async def _write(c: Client, ledger: int, entries: int = 20) -> None:
    answers = await c.call_many(
        [c.add_request(ledger, e, payload_for(ledger, e, 500)) for e in range(entries)]
    )
    assert all(a.status is StatusCode.OK for a in answers)  # type: ignore[union-attr]


async def _readable(c: Client, ledger: int, entries: int = 20) -> bool:
    for e in range(entries):
        got = await c.read(ledger, e)
        if got.status is StatusCode.NO_SUCH_LEDGER:
            return False
        assert got.status is StatusCode.OK and got.packet == packet(
            ledger, e, payload_for(ledger, e, 500)
        )
    return True


async def test_gc_forgets_exactly_the_ledgers_deleted_in_the_store(
    tmp_path: Path, store: ListingHook
) -> None:
    dirs = [tmp_path / "j", tmp_path / "l"]
    ledgers = LedgerManager(store)
    async with running_bookie(config(dirs), metadata=store) as (bookie, bid), connect(bid) as c:
        for ledger in (1, 2, 3, 4, 10_000_000_001):  # one in the long (19 digit) layout
            await ledgers.create(_metadata(ledger, bid))
            await _write(c, ledger)
        await _write(c, 5)  # the store never had ledger 5
        await bookie.storage.checkpoint()
        await ledgers.delete(2)
        await ledgers.delete(10_000_000_001)
        report = await bookie.collect_garbage()
        assert report.skipped is None
        assert report.ledgers_deleted == [2, 5, 10_000_000_001]
        assert [await _readable(c, lg) for lg in (1, 2, 3, 4, 5, 10_000_000_001)] == [
            True,
            False,
            True,
            True,
            False,
            False,
        ]
        again = await bookie.collect_garbage()
        assert again.ledgers_deleted == [] and bookie.gc.ledgers_deleted == 3
    async with running_bookie(config(dirs), metadata=store) as (bookie, bid), connect(bid) as c:
        assert sorted(bookie.ledger_ids()) == [1, 3, 4]
        assert [await _readable(c, lg) for lg in (1, 2, 3, 4, 5)] == [
            True,
            False,
            True,
            True,
            False,
        ]


async def test_gc_never_collects_a_ledger_created_while_it_lists(
    tmp_path: Path, store: ListingHook
) -> None:
    ledgers = LedgerManager(store)
    async with (
        running_bookie(config([tmp_path / "d"]), metadata=store) as (bookie, bid),
        connect(bid) as c,
    ):
        for ledger in (1, 2):
            await ledgers.create(_metadata(ledger, bid))
            await _write(c, ledger)
        await _write(c, 8)  # known to the bookie; its metadata comes only during the listing
        await ledgers.delete(2)

        async def race() -> None:
            # The listing already read this directory: neither 8 nor 9 is in it.
            await ledgers.create(_metadata(8, bid))
            await ledgers.create(_metadata(9, bid))
            await _write(c, 9)  # a brand-new ledger, first seen after the listing started

        store.during_listing = race
        report = await bookie.collect_garbage()
        assert store.during_listing is None  # the race ran
        assert report.ledgers_deleted == [2]
        assert sorted(bookie.ledger_ids()) == [1, 8, 9]
        assert await _readable(c, 8) and await _readable(c, 9)
        # Deleted for real later: collected by the next round.
        await ledgers.delete(9)
        assert (await bookie.collect_garbage()).ledgers_deleted == [9]


async def test_a_metadata_store_error_skips_the_round(tmp_path: Path, store: ListingHook) -> None:
    async with (
        running_bookie(config([tmp_path / "d"]), metadata=store) as (bookie, bid),
        connect(bid) as c,
    ):
        await _write(c, 3)  # not in the store: would be collected
        store.fail = MetadataStoreError("store unreachable")
        report = await bookie.collect_garbage()
        assert report.ledgers_deleted == [] and "store unreachable" in str(report.skipped)
        assert bookie.gc.skipped == 1 and await _readable(c, 3)
        # A store of another cluster (say a wiped ZooKeeper root) is not trusted either.
        store.fail = None
        await store.set("/cluster/instanceid", b"0" * 32, 0)
        report = await bookie.collect_garbage()
        assert report.ledgers_deleted == [] and "instance id" in str(report.skipped)
        assert await _readable(c, 3)


async def test_without_a_metadata_store_there_is_no_ledger_gc(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"])) as (bookie, bid), connect(bid) as c:
        await _write(c, 3)
        report = await bookie.collect_garbage()
        assert report.skipped == "no metadata store" and report.ledgers_deleted == []
        assert await _readable(c, 3)


async def test_gc_runs_on_its_own_every_interval(tmp_path: Path, store: ListingHook) -> None:
    cfg = config([tmp_path / "d"], gc_interval=0.05)
    async with running_bookie(cfg, metadata=store) as (bookie, bid), connect(bid) as c:
        await _write(c, 3)
        with trio.fail_after(10):
            # A round on the timer (nothing here calls it); a counter has no event to wait on.
            while bookie.gc.ledgers_deleted == 0:  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert bookie.ledger_info(3) is None and not await _readable(c, 3)


async def test_gc_over_http(tmp_path: Path, store: ListingHook) -> None:
    cfg = config([tmp_path / "d"], http_port=0, admin_token="gc-test-admin-token")
    async with running_bookie(cfg, metadata=store) as (bookie, bid), connect(bid) as c:
        assert bookie.admin_address is not None
        await _write(c, 3)
        status, body = await http_request(
            bookie.admin_address,
            b"POST /admin/gc?compact=major HTTP/1.1\r\nHost: x\r\n"
            b"Authorization: Bearer gc-test-admin-token\r\n\r\n",
        )
        assert status == 200
        report = json.loads(body)
        assert report["ledgers_deleted"] == [3] and report["compaction"] == "major"
        assert report["entry_logs"]["threshold"] == 0.8
        status, body = await http_request(
            bookie.admin_address, b"GET /admin/gc HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        assert status == 200
        info = json.loads(body)
        assert info["ledger_gc"] is True
        assert (info["rounds"], info["ledgers_deleted"], info["major_compactions"]) == (1, 1, 1)
        assert info["last_round"]["ledgers_deleted"] == [3]
        status, body = await http_request(
            bookie.admin_address, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        )
        assert b"walkit_bookie_gc_ledgers_deleted_total 1.0" in body
        assert b"walkit_bookie_major_compactions_total 1.0" in body


async def test_thousands_of_fenced_junk_ids_are_collected_at_once_and_quietly(
    tmp_path: Path, store: ListingHook, caplog: pytest.LogCaptureFixture
) -> None:
    """Fencing LAC reads of ids nobody created (found by an attack: 100,000 of them wrote
    100,000 info lines, and their collection took 1 min 47 s: one index sync and one store
    read per ledger, and a scan of the write cache per ledger). They are fenced (the bookie
    cannot tell junk from a ledger it got no entry of) and counted, logged at debug, and
    collected in one listing and a few index transactions, with the listing race still
    covered: a ledger whose metadata shows up during the listing stays."""
    caplog.set_level(logging.INFO, logger="walkit_bookie")
    ledgers = LedgerManager(store)
    junk = list(range(10**6, 10**6 + 3000))
    async with (
        running_bookie(config([tmp_path / "d"]), metadata=store) as (bookie, bid),
        connect(bid) as c,
    ):
        await ledgers.create(_metadata(1, bid))
        await _write(c, 1)
        await _write(c, 8)  # its metadata comes only during the listing
        answers = await c.call_many(
            [ReadLacRequest(c.next_id(), lid, ReadLacFlag.FENCE, -1, 0, KEY) for lid in junk]
        )
        assert {a.status for a in answers} == {StatusCode.OK}  # type: ignore[union-attr]
        assert bookie.handler.stats.fences_of_unknown_ledgers == 3000

        async def race() -> None:
            await ledgers.create(_metadata(8, bid))

        store.during_listing = race
        reads = store.ledger_reads
        report = await bookie.collect_garbage()
        assert store.during_listing is None
        assert report.ledgers_deleted == junk
        assert store.ledger_reads - reads < 100  # not one read per ledger
        assert sorted(bookie.ledger_ids()) == [1, 8]
        assert await _readable(c, 1) and await _readable(c, 8)
    events = [getattr(r, "walkit_event", {}).get("event") for r in caplog.records]
    assert events.count("ledger_fenced") == 0  # (junk fences are debug)
    assert events.count("ledgers_deleted") == 1 and events.count("ledger_deleted") == 0
    async with running_bookie(config([tmp_path / "d"]), metadata=store) as (bookie, _):
        assert sorted(bookie.ledger_ids()) == [1, 8]
