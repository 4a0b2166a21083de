"""A bookie with a metadata store: cluster id, cookie in the store, registration and its mode."""

from __future__ import annotations

import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from tests.bookie._helpers import config, running_bookie
from walkit._core.types import BookieId
from walkit.errors import CookieError
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
