"""Under-replication markers, worker locks and autorecovery settings on every driver."""

from __future__ import annotations

import json

import pytest

from tests.metadata._util import wait_for
from walkit import BookieId
from walkit.errors import InvalidArgumentError, InvalidMetadataError
from walkit.metadata import (
    AutorecoveryClusterSettings,
    MetadataStore,
    UnderreplicatedLedger,
    UnderreplicationManager,
    WatchEventKind,
    ensure_cluster,
    open_metadata_store,
)
from walkit.metadata._underreplication import CONFIG_PATH

B1 = BookieId("127.0.0.1", 3181)
B2 = BookieId("127.0.0.1", 3182)


async def test_mark_merge_list_remove(store: MetadataStore) -> None:
    await ensure_cluster(store)
    urm = UnderreplicationManager(store)
    await urm.ensure_paths()
    assert await urm.markers() == []
    assert await urm.mark(7, [B1]) is True
    assert await urm.mark(7, [B1]) is False  # already says so
    assert await urm.mark(7, [B2]) is True  # merged
    assert await urm.mark(12, [str(B2)]) is True  # type: ignore[list-item]
    assert await urm.list_ids() == [7, 12]
    assert await urm.markers() == [
        UnderreplicatedLedger(7, (B1, B2)),
        UnderreplicatedLedger(12, (B2,)),
    ]
    found = await urm.read(7)
    assert found is not None
    _marker, version = found
    # The auditor adds a bookie after the worker read the marker: removal at the old version
    # fails, so the new loss is not forgotten.
    await urm.mark(7, [BookieId("127.0.0.1", 3183)])
    assert await urm.remove(7, version) is False
    assert await urm.read(7) is not None
    found = await urm.read(7)
    assert found is not None
    assert await urm.remove(7, found[1]) is True
    assert await urm.read(7) is None
    assert await urm.remove(7) is False
    assert await urm.list_ids() == [12]


async def test_bad_input(store: MetadataStore) -> None:
    urm = UnderreplicationManager(store)
    with pytest.raises(InvalidArgumentError):
        await urm.mark(-1, [B1])
    with pytest.raises(InvalidArgumentError):
        await urm.mark(1, [])
    with pytest.raises(InvalidArgumentError):
        await urm.mark(1, ["not a bookie"])  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError):
        await urm.update_settings(lost_bookie_delay=-1)
    with pytest.raises(InvalidArgumentError):
        await urm.update_settings(lost_bookie_delay=float("nan"))
    with pytest.raises(InvalidArgumentError):
        await urm.update_settings(enabled="yes")  # type: ignore[arg-type]
    # A corrupt marker is reported, not trusted; listing skips it.
    await store.create(UnderreplicationManager.marker_path(5), b"{nope")
    with pytest.raises(InvalidMetadataError):
        await urm.read(5)
    assert await urm.markers() == []
    # Marking over a corrupt marker rewrites it.
    assert await urm.mark(5, [B1]) is True
    assert await urm.markers() == [UnderreplicatedLedger(5, (B1,))]


async def test_lock_is_exclusive_and_dies_with_its_session(metadata_url: str) -> None:
    async with await open_metadata_store(metadata_url) as admin:
        await ensure_cluster(admin)
        urm = UnderreplicationManager(admin)
        await urm.ensure_paths()
        await urm.mark(3, [B1])
        worker_a = await open_metadata_store(metadata_url)
        worker_b = await open_metadata_store(metadata_url)
        try:
            a = UnderreplicationManager(worker_a)
            b = UnderreplicationManager(worker_b)
            assert await a.try_lock(3, "worker-a") is True
            assert await b.try_lock(3, "worker-b") is False
            assert await urm.lock_owner(3) == "worker-a"
            await a.unlock(3)
            assert await urm.lock_owner(3) is None
            assert await b.try_lock(3, "worker-b") is True
            # worker b crashes: its session ends, the lock goes away with it.
            events = admin.watch(UnderreplicationManager.lock_path(3))
            await worker_b.expire_session()
            if await admin.exists(UnderreplicationManager.lock_path(3)) is not None:
                await wait_for(events, WatchEventKind.DELETED)
            assert await urm.lock_owner(3) is None
            assert await a.try_lock(3, "worker-a") is True
            await worker_a.aclose()  # a clean close releases it too
            assert await urm.lock_owner(3) is None
            # The marker itself is persistent.
            assert await urm.list_ids() == [3]
        finally:
            await worker_a.aclose()
            await worker_b.aclose()


async def test_settings(metadata_url: str, store: MetadataStore) -> None:
    urm = UnderreplicationManager(store)
    assert await urm.settings() == AutorecoveryClusterSettings(True, 30.0)
    await urm.init_settings(5)
    assert await urm.settings() == AutorecoveryClusterSettings(True, 5.0)
    await urm.init_settings(99)  # a later bookie does not override what is stored
    assert await urm.settings() == AutorecoveryClusterSettings(True, 5.0)
    async with await open_metadata_store(metadata_url) as other:
        events = UnderreplicationManager(other).watch_settings()
        assert await urm.update_settings(enabled=False) == AutorecoveryClusterSettings(False, 5.0)
        await wait_for(events, WatchEventKind.CHANGED)
        settings = await UnderreplicationManager(other).settings()
        assert settings == AutorecoveryClusterSettings(False, 5.0)
    assert await urm.update_settings(lost_bookie_delay=0) == AutorecoveryClusterSettings(False, 0.0)
    doc = json.loads((await store.get(CONFIG_PATH)).value)
    assert doc == {"format": 1, "enabled": False, "lost_bookie_delay": 0.0}
    await store.set(CONFIG_PATH, b'{"format": 1, "enabled": "maybe"}', 2)
    with pytest.raises(InvalidMetadataError):
        await urm.settings()


async def test_watch_markers(store: MetadataStore, other: MetadataStore) -> None:
    urm = UnderreplicationManager(store)
    await urm.ensure_paths()
    events = UnderreplicationManager(other).watch()
    # Watch, then read through the watching store: ZooKeeper arms the watch asynchronously, and
    # only a read on the same session is sure to come after it (a mark made through another
    # session could land first, and the watch would then see no change).
    assert await UnderreplicationManager(other).list_ids() == []
    await urm.mark(9, [B1])
    await wait_for(events, WatchEventKind.CHILDREN)
    assert await UnderreplicationManager(other).list_ids() == [9]


async def test_a_renamed_event_still_carries_its_old_name(
    store: MetadataStore, caplog: pytest.LogCaptureFixture
) -> None:
    """``ledger_replicated`` is now ``underreplication_marker_removed``: for one release the
    record also says ``formerly="ledger_replicated"``, so filters on the old name find it."""
    urm = UnderreplicationManager(store)
    await urm.ensure_paths()
    await urm.mark(5, [B1])
    with caplog.at_level("INFO", logger="walkit.metadata"):
        assert await urm.remove(5) is True
    [record] = [r for r in caplog.records if "ledger_id=5" in r.getMessage()]
    event = record.walkit_event  # type: ignore[attr-defined]
    assert event["event"] == "underreplication_marker_removed"
    assert event["formerly"] == "ledger_replicated"
    assert "ledger_replicated" in record.getMessage()


def test_the_old_name_of_the_cluster_settings_warns() -> None:
    import walkit.autorecovery
    import walkit.metadata

    for module in (walkit.metadata, walkit.autorecovery):
        with pytest.warns(DeprecationWarning, match="AutorecoveryClusterSettings"):
            old = module.AutorecoverySettings
        assert old is AutorecoveryClusterSettings
