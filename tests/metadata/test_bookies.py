"""Bookie registration, the bookie lists, their watch, and cookies on every driver."""

from __future__ import annotations

import json

import pytest
import trio

from tests._log_events import log_event
from tests.metadata._util import next_event
from walkit import BookieId
from walkit._core.types import BookieInfo
from walkit.errors import (
    InvalidArgumentError,
    InvalidMetadataError,
    MetadataVersionError,
    NodeExistsError,
    NoSuchNodeError,
)
from walkit.metadata import (
    BookieList,
    MetadataStore,
    WatchEventKind,
    delete_cookie,
    ensure_cluster,
    list_bookies,
    open_metadata_store,
    read_cookie,
    register_bookie,
    registration_path,
    set_bookie_read_only,
    watch_bookies,
    write_cookie,
)

B1 = BookieId("127.0.0.1", 3181)
B2 = BookieId("127.0.0.1", 3182)
B3 = BookieId("::1", 3183)


async def test_register_and_list(metadata_url: str, store: MetadataStore) -> None:
    await ensure_cluster(store)
    assert await list_bookies(store) == BookieList()
    b1 = await open_metadata_store(metadata_url)
    b2 = await open_metadata_store(metadata_url)
    try:
        await register_bookie(b1, B1, network_location="/eu/rack1", info={"http_port": 8001})
        await register_bookie(b2, str(B2))
        await register_bookie(b2, B3, read_only=True, network_location="/us/rack9")
        listed = await list_bookies(store)
        assert listed.writable == {
            B1: BookieInfo(B1, network_location="/eu/rack1"),
            B2: BookieInfo(B2, network_location=None),
        }
        assert listed.readonly == {B3: BookieInfo(B3, "/us/rack9", read_only=True)}
        doc = json.loads((await store.get(registration_path(B1))).value)
        assert doc["bookie_id"] == "127.0.0.1:3181"
        assert doc["http_port"] == 8001
        assert doc["read_only"] is False
        assert "walkit_version" in doc
    finally:
        await b1.aclose()
    assert set((await list_bookies(store)).writable) == {B2}
    await b2.aclose()
    assert await list_bookies(store) == BookieList()


async def test_read_only_switch_keeps_the_registration(store: MetadataStore) -> None:
    await register_bookie(store, B1, network_location="/eu/rack1", info={"started_ms": 5})
    await set_bookie_read_only(store, B1, True)
    listed = await list_bookies(store)
    assert listed.writable == {}
    assert listed.readonly == {B1: BookieInfo(B1, "/eu/rack1", read_only=True)}
    assert (
        json.loads((await store.get(registration_path(B1, read_only=True))).value)["started_ms"]
        == 5
    )
    await set_bookie_read_only(store, B1, False, network_location="/eu/rack2")
    listed = await list_bookies(store)
    assert listed.writable == {B1: BookieInfo(B1, "/eu/rack2")}
    assert listed.readonly == {}
    # Switching to the mode it is already in changes nothing.
    await set_bookie_read_only(store, B1, False)
    assert (await list_bookies(store)).writable == {B1: BookieInfo(B1, "/eu/rack2")}


async def test_duplicate_registration_is_refused(metadata_url: str, store: MetadataStore) -> None:
    await register_bookie(store, B1)
    async with await open_metadata_store(metadata_url) as impostor:
        with pytest.raises(NodeExistsError, match="already registered"):
            await register_bookie(impostor, B1, stale_timeout=0.3)
        with pytest.raises(NodeExistsError):
            await register_bookie(impostor, B1, read_only=True, stale_timeout=0.3)


async def test_registration_waits_for_a_stale_one(metadata_url: str, store: MetadataStore) -> None:
    old = await open_metadata_store(metadata_url)
    await register_bookie(old, B1, network_location="/old")
    async with await open_metadata_store(metadata_url) as new, trio.open_nursery() as nursery:
        done = trio.Event()

        async def restart() -> None:
            await register_bookie(new, B1, network_location="/new", stale_timeout=30)
            done.set()

        with log_event("walkit.metadata._bookies", "bookie_waiting_for_stale_registration") as seen:
            nursery.start_soon(restart)
            with trio.fail_after(20):
                await seen.wait()  # it found the old registration and waits for it to go
        assert not done.is_set()
        await old.expire_session()  # the crashed session finally expires
        with trio.fail_after(20):
            await done.wait()
        assert (await list_bookies(store)).writable == {B1: BookieInfo(B1, "/new")}
    await old.aclose()


async def test_bad_registration_input(store: MetadataStore) -> None:
    with pytest.raises(InvalidArgumentError):
        await register_bookie(store, "no-port")
    with pytest.raises(InvalidArgumentError):
        await register_bookie(store, B1, network_location="rack-without-slash")
    with pytest.raises(InvalidArgumentError):
        await register_bookie(store, B1, info={"not json": object()})
    assert await list_bookies(store) == BookieList()


async def test_unreadable_registrations_are_tolerated(store: MetadataStore) -> None:
    await store.create("/bookies/available/not-a-bookie-id", b"{}")
    await store.create(registration_path(B1), b"\xff garbage")
    await store.create(registration_path(B2), b'{"network_location": 42}')
    listed = await list_bookies(store)
    assert listed.writable == {B1: BookieInfo(B1), B2: BookieInfo(B2)}


async def test_watch_bookies(metadata_url: str, store: MetadataStore) -> None:
    await ensure_cluster(store)
    events = watch_bookies(store)
    await list_bookies(store)  # watch, then read
    bookie = await open_metadata_store(metadata_url)
    await register_bookie(bookie, B1)
    assert (await next_event(events)).kind is WatchEventKind.CHILDREN
    assert set((await list_bookies(store)).writable) == {B1}
    await set_bookie_read_only(bookie, B1, True)
    assert (await next_event(events)).kind is WatchEventKind.CHILDREN
    while (await list_bookies(store)).writable:  # the second half of the switch
        await next_event(events)
    assert set((await list_bookies(store)).readonly) == {B1}
    await bookie.aclose()
    while (await list_bookies(store)).readonly:
        await next_event(events)


async def test_cookies(store: MetadataStore) -> None:
    assert await read_cookie(store, B1) is None
    cookie = {"instance_id": "ab" * 16, "data_dirs": ["/d1"], "layout": 1}
    assert await write_cookie(store, B1, cookie) == 0
    assert await read_cookie(store, B1) == (cookie, 0)
    with pytest.raises(NodeExistsError):
        await write_cookie(store, B1, cookie)
    updated = {**cookie, "data_dirs": ["/d1", "/d2"]}
    assert await write_cookie(store, B1, updated, 0) == 1
    with pytest.raises(MetadataVersionError):
        await write_cookie(store, B1, cookie, 0)
    assert await read_cookie(store, str(B1)) == (updated, 1)
    with pytest.raises(MetadataVersionError):
        await delete_cookie(store, B1, 0)
    await delete_cookie(store, B1, 1)
    assert await read_cookie(store, B1) is None
    with pytest.raises(NoSuchNodeError):
        await delete_cookie(store, B1)
    with pytest.raises(InvalidArgumentError):
        await write_cookie(store, B1, {"bad": {1, 2}})
    await store.create("/bookies/cookies/127.0.0.1:3182", b"[1, 2]")
    with pytest.raises(InvalidMetadataError):
        await read_cookie(store, B2)
