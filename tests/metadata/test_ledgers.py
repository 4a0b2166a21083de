"""Cluster initialization and ledger metadata (hierarchical layout) on every driver."""

from __future__ import annotations

import random

import pytest
import trio

from tests.metadata._util import next_event
from walkit import BookieId, LedgerMetadata, LedgerState
from walkit.errors import (
    InvalidArgumentError,
    InvalidMetadataError,
    MetadataVersionError,
    NodeExistsError,
    NoSuchLedgerError,
)
from walkit.metadata import (
    INSTANCE_ID_PATH,
    LedgerManager,
    MetadataStore,
    WatchEvent,
    WatchEventKind,
    ensure_cluster,
    ledger_id_from_path,
    ledger_path,
    open_metadata_store,
)

BOOKIES = tuple(BookieId("127.0.0.1", 3181 + i) for i in range(3))


def metadata(ledger_id: int) -> LedgerMetadata:
    return LedgerMetadata(
        ledger_id=ledger_id,
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        fragments=((0, BOOKIES),),
        password_sha256="ab" * 32,
        custom_metadata={"app": b"\x00\x01"},
        ctime_ms=1234,
    )


@pytest.mark.parametrize(
    ("ledger_id", "path"),
    [
        (0, "/ledgers/00/0000/L0000"),
        (1, "/ledgers/00/0000/L0001"),
        (12345, "/ledgers/00/0001/L2345"),
        (1234567890, "/ledgers/12/3456/L7890"),
        (9999999999, "/ledgers/99/9999/L9999"),
        (10**10, "/ledgers/000/0000/0100/0000/L0000"),
        (2**63 - 1, "/ledgers/922/3372/0368/5477/L5807"),
    ],
)
def test_ledger_paths(ledger_id: int, path: str) -> None:
    assert ledger_path(ledger_id) == path
    assert ledger_id_from_path(path) == ledger_id


@pytest.mark.parametrize("bad", [-1, 2**63, "1", 1.0, True])
def test_bad_ledger_ids(bad: object) -> None:
    with pytest.raises(InvalidArgumentError):
        ledger_path(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "path",
    ["/ledgers/00/0000/0001", "/ledgers/0/0000/L0001", "/ledgers/000/0000/0000/0000/L0001", "/x"],
)
def test_foreign_paths_are_not_ledgers(path: str) -> None:
    assert ledger_id_from_path(path) is None


async def test_ensure_cluster_once_and_race_safe(metadata_url: str) -> None:
    stores = [await open_metadata_store(metadata_url) for _ in range(4)]
    ids: list[str] = []

    async def initialize(store: MetadataStore) -> None:
        ids.append(await ensure_cluster(store))

    try:
        async with trio.open_nursery() as nursery:
            for store in stores:
                nursery.start_soon(initialize, store)
        assert len(ids) == 4
        assert len(set(ids)) == 1
        assert len(ids[0]) == 32
        assert await ensure_cluster(stores[0]) == ids[0]
        for directory in ("/ledgers", "/bookies/available", "/bookies/readonly", "/logs"):
            assert await stores[0].exists(directory) is not None
    finally:
        for store in stores:
            await store.aclose()


async def test_ensure_cluster_with_rng_and_bad_id(store: MetadataStore) -> None:
    first = await ensure_cluster(store, rng=random.Random(7))
    assert first == await ensure_cluster(store, rng=random.Random(8))
    version = await store.exists(INSTANCE_ID_PATH)
    assert version is not None
    await store.set(INSTANCE_ID_PATH, b"not-an-id", version)
    with pytest.raises(InvalidMetadataError):
        await ensure_cluster(store)


async def test_ledger_round_trip(store: MetadataStore) -> None:
    await ensure_cluster(store)
    ledgers = LedgerManager(store)
    ledger_id = await ledgers.new_ledger_id()
    original = metadata(ledger_id)
    assert await ledgers.create(original) == 0
    assert await store.exists(ledger_path(ledger_id)) == 0
    assert await ledgers.read(ledger_id) == (original, 0)
    with pytest.raises(NodeExistsError):
        await ledgers.create(original)

    closed = original.closed(last_entry_id=41, length=4200)
    assert await ledgers.write(closed, 0) == 1
    with pytest.raises(MetadataVersionError):
        await ledgers.write(original.with_state(LedgerState.IN_RECOVERY), 0)
    read_back, version = await ledgers.read(ledger_id)
    assert (read_back, version) == (closed, 1)
    assert read_back.is_closed and read_back.last_entry_id == 41

    with pytest.raises(MetadataVersionError):
        await ledgers.delete(ledger_id, 0)
    await ledgers.delete(ledger_id, 1)
    assert not await ledgers.exists(ledger_id)
    with pytest.raises(NoSuchLedgerError):
        await ledgers.read(ledger_id)
    with pytest.raises(NoSuchLedgerError):
        await ledgers.write(closed, 1)
    with pytest.raises(NoSuchLedgerError):
        await ledgers.delete(ledger_id)


async def test_list_ids_walks_short_and_long_layouts(store: MetadataStore) -> None:
    ledgers = LedgerManager(store)
    assert await ledgers.list_ids() == []  # nothing initialized yet
    ids = [3, 1, 10_000, 12345, 9_999_999_999, 10**10, 2**63 - 1, 77_0000_0001]
    for ledger_id in ids:
        await ledgers.create(metadata(ledger_id))
    await store.create("/ledgers/LAYOUT", b"foreign nodes are ignored")
    await store.create("/ledgers/00/0000/notaledger", b"")
    assert await ledgers.list_ids() == sorted(ids)


async def test_new_ledger_ids_are_unique(store: MetadataStore, other: MetadataStore) -> None:
    got: list[int] = []

    async def take(source: MetadataStore) -> None:
        for _ in range(5):
            got.append(await LedgerManager(source).new_ledger_id())

    async with trio.open_nursery() as nursery:
        for source in (store, other, store, other):
            nursery.start_soon(take, source)
    assert len(set(got)) == 20
    assert min(got) > 0


async def test_malformed_metadata(store: MetadataStore) -> None:
    ledgers = LedgerManager(store)
    await store.create(ledger_path(5), b"{not json")
    with pytest.raises(InvalidMetadataError):
        await ledgers.read(5)
    await store.create(ledger_path(6), b'{"format": 99}')
    with pytest.raises(InvalidMetadataError):
        await ledgers.read(6)
    await store.create(
        ledger_path(7), metadata(7).to_bytes().replace(b'"write_quorum":2', b'"write_quorum":9')
    )
    with pytest.raises(InvalidMetadataError):
        await ledgers.read(7)  # E=3 < Qw=9: parsed, but against the protocol's rules


async def test_ledger_watch(store: MetadataStore, other: MetadataStore) -> None:
    ledgers = LedgerManager(store)
    await ledgers.create(metadata(11))
    events = LedgerManager(other).watch(11)
    _, version = await LedgerManager(other).read(11)
    await ledgers.write(metadata(11).with_state(LedgerState.IN_RECOVERY), version)
    assert await next_event(events) == WatchEvent(WatchEventKind.CHANGED, ledger_path(11))
    await ledgers.delete(11)
    assert await next_event(events) == WatchEvent(WatchEventKind.DELETED, ledger_path(11))
