"""A bookie with a metadata store: cluster id, cookie in the store, registration and its mode."""

from __future__ import annotations

import itertools
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.bookie._helpers import config, running_bookie
from walkit._core.types import BookieId
from walkit.errors import CookieError, MetadataStoreError
from walkit.metadata import (
    MetadataStore,
    ensure_cluster,
    forget_memory_tree,
    list_bookies,
    open_metadata_store,
    read_cookie,
    registration_path,
)
from walkit_bookie import Bookie


@pytest.fixture
async def store(request: pytest.FixtureRequest) -> AsyncIterator[MetadataStore]:
    name = f"bookie-{request.node.name}".replace("[", "-").replace("]", "")
    s = await open_metadata_store(f"memory://{name}")
    yield s
    await s.aclose()
    forget_memory_tree(name)


async def _wait_for(predicate: object) -> None:
    with trio.fail_after(10):
        while not await predicate():  # type: ignore[operator]  # noqa: ASYNC110 (polls the store)
            await trio.sleep(0.01)


async def test_registers_with_location_and_stores_its_cookie(
    tmp_path: Path, store: MetadataStore
) -> None:
    cfg = config([tmp_path / "j", tmp_path / "l"], network_location="/eu/rack7", http_port=0)
    async with running_bookie(cfg, metadata=store) as (bookie, bid):
        registration = json.loads((await store.get(registration_path(bid))).value)
        assert bookie.admin_address is not None
        assert registration["http_port"] == bookie.admin_address[1]
        bookies = await list_bookies(store)
        assert list(bookies.writable) == [bid]
        assert bookies.writable[bid].network_location == "/eu/rack7"
        found = await read_cookie(store, bid)
        assert found is not None
        instance = await ensure_cluster(store)
        assert found[0]["instance_id"] == instance
        local = json.loads((tmp_path / "j" / "COOKIE").read_text())
        assert local["instance_id"] == instance and local["bookie_id"] == str(bid)
    # A clean stop removes the registration at once.
    assert (await list_bookies(store)).writable == {}


async def test_read_only_mode_is_registered(tmp_path: Path, store: MetadataStore) -> None:
    dirs = [tmp_path / "d"]
    async with running_bookie(config(dirs), metadata=store) as (_, bid):
        pass
    low = config(dirs, disk_usage_threshold=0.001)
    async with running_bookie(low, metadata=store) as (bookie, bid2):
        assert bid2 == bid and bookie.read_only
        bookies = await list_bookies(store)
        assert list(bookies.readonly) == [bid] and bookies.writable == {}


async def test_mode_change_while_running_moves_the_registration(
    tmp_path: Path, store: MetadataStore
) -> None:
    async with running_bookie(config([tmp_path / "d"]), metadata=store) as (bookie, bid):
        bookie._set_read_only("test", "made read-only by the test")
        await _wait_for(lambda: _is_readonly(store, bid))
        bookie._clear_read_only("test")
        await _wait_for(lambda: _is_writable(store, bid))


async def _is_readonly(store: MetadataStore, bid: BookieId) -> bool:
    return bid in (await list_bookies(store)).readonly


async def _is_writable(store: MetadataStore, bid: BookieId) -> bool:
    return bid in (await list_bookies(store)).writable


async def test_wiped_dirs_are_refused_when_the_store_knows_the_bookie(
    tmp_path: Path, store: MetadataStore
) -> None:
    dirs = [tmp_path / "d"]
    async with running_bookie(config(dirs), metadata=store) as (_, bid):
        pass
    shutil.rmtree(dirs[0])  # every data dir wiped: locally it looks brand new
    with pytest.raises(CookieError, match="wiped or replaced"):
        async with running_bookie(config(dirs, port=bid.port), metadata=store):
            pass


async def test_dirs_of_another_cluster_are_refused(tmp_path: Path, store: MetadataStore) -> None:
    dirs = [tmp_path / "d"]
    async with running_bookie(config(dirs)) as (_, bid):  # no store: its own instance id
        pass
    with pytest.raises(CookieError, match="another cluster"):
        await Bookie(config(dirs, port=bid.port), metadata=store).run()


async def test_session_expiry_registers_again_through_a_new_store(
    tmp_path: Path, store: MetadataStore
) -> None:
    observer = await open_metadata_store(store.url)  # the test's own view of the tree
    try:
        async with running_bookie(config([tmp_path / "d"]), metadata=store) as (bookie, bid):
            registration = bookie.registration
            assert registration is not None and registration.store is store
            bookie._set_read_only("test", "made read-only by the test")
            await _wait_for(lambda: _is_readonly(observer, bid))
            await store.expire_session()  # the ephemeral registration goes with the session
            await _wait_for(lambda: _registered_again(registration))
            assert registration.store is not store and registration.sessions == 2
            # Registered again in the mode of the moment, and it follows mode changes.
            assert bid in (await list_bookies(observer)).readonly
            bookie._clear_read_only("test")
            await _wait_for(lambda: _is_writable(observer, bid))
            # Garbage collection goes through the new store too.
            report = await bookie.collect_garbage()
            assert report.skipped is None
            # Twice: a second expiry is handled the same way.
            await registration.store.expire_session()
            await _wait_for(lambda: _reregistered(registration, 2))
            assert bid in (await list_bookies(observer)).writable
        # A clean stop removes the registration made through the new store.
        assert (await list_bookies(observer)).writable == {}
    finally:
        await observer.aclose()


async def test_reregistration_retries_with_backoff_until_a_store_opens(
    tmp_path: Path, store: MetadataStore
) -> None:
    attempts: list[float] = []

    async def reopen() -> MetadataStore:
        attempts.append(trio.current_time())
        if len(attempts) <= 3:
            raise MetadataStoreError("connection refused (the test says so)")
        return await open_metadata_store(store.url)

    observer = await open_metadata_store(store.url)
    try:
        async with running_bookie(
            config([tmp_path / "d"], metadata_retry_max=0.2), metadata=store, reopen_metadata=reopen
        ) as (bookie, bid):
            await store.expire_session()
            assert bookie.registration is not None
            await _wait_for(lambda: _registered_again(bookie.registration))
            assert len(attempts) == 4
            # Backoff with equal jitter (walkit._retry.pause): each retry waited at least half
            # its ceiling (0.1 s, then the 0.2 s cap).
            gaps = [later - earlier for earlier, later in itertools.pairwise(attempts)]
            assert gaps[0] >= 0.05 and all(gap >= 0.1 for gap in gaps[1:]), gaps
            assert bid in (await list_bookies(observer)).writable
            gc = await bookie.collect_garbage()  # while disconnected it would be skipped
            assert gc.skipped is None
    finally:
        await observer.aclose()


async def _registered_again(registration: object) -> bool:
    return await _reregistered(registration, 1)


async def _reregistered(registration: object, times: int) -> bool:
    await trio.lowlevel.checkpoint()
    return bool(registration.registered and registration.reregistrations >= times)  # type: ignore[attr-defined]
