"""The MetadataStore contract, run against every driver (memory, sqlite, zookeeper)."""

from __future__ import annotations

import pytest
import trio
import trio.lowlevel

from tests.metadata._util import drained, next_event
from walkit.errors import (
    ClientClosedError,
    InvalidArgumentError,
    MetadataVersionError,
    NodeExistsError,
    NodeNotEmptyError,
    NoSuchNodeError,
    SessionExpiredError,
)
from walkit.metadata import (
    MAX_VALUE_SIZE,
    MetadataStore,
    Versioned,
    WatchEvent,
    WatchEventKind,
    open_metadata_store,
)

CHANGED, DELETED, CHILDREN, EXPIRED = (
    WatchEventKind.CHANGED,
    WatchEventKind.DELETED,
    WatchEventKind.CHILDREN,
    WatchEventKind.SESSION_EXPIRED,
)


async def test_create_get_set_delete(store: MetadataStore) -> None:
    assert await store.create("/a", b"one") == 0
    assert await store.get("/a") == Versioned(b"one", 0)
    assert await store.set("/a", b"two", 0) == 1
    assert await store.set("/a", b"", 1) == 2
    assert await store.get("/a") == Versioned(b"", 2)
    assert await store.exists("/a") == 2
    await store.delete("/a", 2)
    assert await store.exists("/a") is None
    with pytest.raises(NoSuchNodeError):
        await store.get("/a")


async def test_root_exists_and_is_protected(store: MetadataStore) -> None:
    assert await store.exists("/") is not None
    assert await store.children("/") == []
    with pytest.raises(NodeExistsError):
        await store.create("/", b"")
    with pytest.raises(InvalidArgumentError):
        await store.delete("/")


async def test_create_existing_and_parents(store: MetadataStore) -> None:
    await store.create("/p/q/r", b"leaf")
    assert await store.get("/p") == Versioned(b"", 0)
    assert await store.get("/p/q") == Versioned(b"", 0)
    with pytest.raises(NodeExistsError):
        await store.create("/p/q/r", b"again")
    with pytest.raises(NodeExistsError):
        await store.create("/p", b"again")
    with pytest.raises(NoSuchNodeError):
        await store.create("/x/y", b"", make_parents=False)
    assert await store.exists("/x") is None
    await store.create("/p/s", b"", make_parents=False)
    assert await store.children("/p") == ["q", "s"]


async def test_set_conflicts(store: MetadataStore) -> None:
    await store.create("/v", b"0")
    await store.set("/v", b"1", 0)
    with pytest.raises(MetadataVersionError):
        await store.set("/v", b"stale", 0)
    with pytest.raises(MetadataVersionError):
        await store.set("/v", b"future", 5)
    assert await store.get("/v") == Versioned(b"1", 1)
    with pytest.raises(NoSuchNodeError):
        await store.set("/missing", b"", 0)


async def test_delete_rules(store: MetadataStore) -> None:
    await store.create("/d/child", b"")
    with pytest.raises(NodeNotEmptyError):
        await store.delete("/d")
    with pytest.raises(MetadataVersionError):
        await store.delete("/d/child", 3)
    await store.delete("/d/child", 0)
    await store.delete("/d")
    with pytest.raises(NoSuchNodeError):
        await store.delete("/d")


async def test_children_are_sorted_names(store: MetadataStore) -> None:
    for name in ["b", "a", "c10", "c2", "L0001"]:
        await store.create(f"/kids/{name}", name.encode())
    await store.create("/kids/a/grandchild", b"")
    assert await store.children("/kids") == sorted(["b", "a", "c10", "c2", "L0001"])
    assert await store.children("/kids/a") == ["grandchild"]
    assert await store.children("/kids/b") == []
    with pytest.raises(NoSuchNodeError):
        await store.children("/nothing")


@pytest.mark.parametrize("path", ["", "a", "/a/", "//a", "/a//b", "/a/./b", "/a/../b", "/a\x00"])
async def test_bad_paths(store: MetadataStore, path: str) -> None:
    with pytest.raises(InvalidArgumentError):
        await store.create(path, b"")
    with pytest.raises(InvalidArgumentError):
        await store.get(path)


async def test_bad_values_and_versions(store: MetadataStore) -> None:
    with pytest.raises(InvalidArgumentError):
        await store.create("/s", "text")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await store.create("/big", b"x" * (MAX_VALUE_SIZE + 1))
    await store.create("/ok", bytearray(b"bytes-like"))  # type: ignore[arg-type]
    assert (await store.get("/ok")).value == b"bytes-like"
    with pytest.raises(InvalidArgumentError):
        await store.set("/ok", b"", -1)
    with pytest.raises(InvalidArgumentError):
        await store.delete("/ok", True)


async def test_two_sessions_share_data(store: MetadataStore, other: MetadataStore) -> None:
    await store.create("/shared", b"from store")
    assert await other.get("/shared") == Versioned(b"from store", 0)
    await other.set("/shared", b"from other", 0)
    assert await store.get("/shared") == Versioned(b"from other", 1)


async def test_ephemeral_vanishes_when_its_store_closes(
    metadata_url: str, other: MetadataStore
) -> None:
    owner = await open_metadata_store(metadata_url)
    await owner.create("/bookies/e1", b"alive", ephemeral=True)
    await owner.create("/bookies/p1", b"stays")
    assert await other.get("/bookies/e1") == Versioned(b"alive", 0)
    await owner.aclose()
    assert await other.exists("/bookies/e1") is None
    assert await other.exists("/bookies/p1") == 0
    with pytest.raises(ClientClosedError):
        await owner.get("/bookies/p1")
    await owner.aclose()  # idempotent


async def test_ephemeral_cannot_have_children(store: MetadataStore) -> None:
    await store.create("/eph", b"", ephemeral=True)
    with pytest.raises(InvalidArgumentError):
        await store.create("/eph/child", b"")
    with pytest.raises(InvalidArgumentError):
        await store.create("/eph/deeper/child", b"")


async def test_session_expiry(metadata_url: str, other: MetadataStore) -> None:
    owner = await open_metadata_store(metadata_url)
    try:
        await owner.create("/live", b"", ephemeral=True)
        events = owner.watch("/somewhere")
        await owner.expire_session()
        assert await other.exists("/live") is None
        assert await drained(events) == [WatchEvent(EXPIRED, "/")]
        with pytest.raises(SessionExpiredError):
            await owner.get("/")
        with pytest.raises(SessionExpiredError):
            await owner.create("/again", b"")
        late = owner.watch("/x")
        assert await drained(late) == [WatchEvent(EXPIRED, "/")]
    finally:
        await owner.aclose()


async def test_data_watch(store: MetadataStore, other: MetadataStore) -> None:
    events = other.watch("/w")
    assert await other.exists("/w") is None  # watch, then read: the pattern that misses nothing
    await store.create("/w", b"1")
    assert await next_event(events) == WatchEvent(CHANGED, "/w")
    await store.set("/w", b"2", 0)
    assert await next_event(events) == WatchEvent(CHANGED, "/w")
    await store.create("/w/child", b"")  # not a data change of /w
    await store.delete("/w/child")
    await store.delete("/w")
    assert await next_event(events) == WatchEvent(DELETED, "/w")
    await store.create("/w", b"back")
    assert await next_event(events) == WatchEvent(CHANGED, "/w")
    await events.aclose()  # type: ignore[attr-defined]  # the drivers' watches are WatchStreams
    assert await drained(events) == []


async def test_children_watch(store: MetadataStore, other: MetadataStore) -> None:
    await store.create("/dir", b"")
    events = other.watch("/dir", children=True)
    assert await other.children("/dir") == []
    await store.create("/dir/a", b"")
    assert await next_event(events) == WatchEvent(CHILDREN, "/dir")
    assert await other.children("/dir") == ["a"]
    await store.set("/dir/a", b"data changes are not child changes", 0)
    await store.set("/dir", b"nor are the node's own", 0)
    await store.create("/dir/b", b"")
    assert await next_event(events) == WatchEvent(CHILDREN, "/dir")
    await store.delete("/dir/a")
    assert await next_event(events) == WatchEvent(CHILDREN, "/dir")
    await store.delete("/dir/b")
    assert await next_event(events) == WatchEvent(CHILDREN, "/dir")
    await store.delete("/dir")
    assert await next_event(events) == WatchEvent(DELETED, "/dir")
    await store.create("/dir", b"")
    assert await next_event(events) == WatchEvent(CHANGED, "/dir")
    await store.create("/dir/c", b"")
    assert await next_event(events) == WatchEvent(CHILDREN, "/dir")


async def test_children_watch_on_missing_node(store: MetadataStore, other: MetadataStore) -> None:
    events = other.watch("/later", children=True)
    assert await other.exists("/later") is None
    await store.create("/later/a", b"")  # creates /later and its child at once
    # Drivers may report the creation, the child, or both (coalesced): re-reading is the rule.
    assert (await next_event(events)).kind in (CHANGED, CHILDREN)
    assert await other.children("/later") == ["a"]


async def test_watch_is_in_place_before_iteration(store: MetadataStore) -> None:
    events = store.watch("/early")
    await store.create("/early", b"")
    await trio.lowlevel.checkpoint()
    assert await next_event(events) == WatchEvent(CHANGED, "/early")


async def test_watch_sees_ephemeral_of_closed_session_go(
    metadata_url: str, store: MetadataStore
) -> None:
    owner = await open_metadata_store(metadata_url)
    await owner.create("/members/m1", b"", ephemeral=True)
    data = store.watch("/members/m1")
    kids = store.watch("/members", children=True)
    assert await store.children("/members") == ["m1"]
    await owner.aclose()
    assert await next_event(data) == WatchEvent(DELETED, "/members/m1")
    assert await next_event(kids) == WatchEvent(CHILDREN, "/members")


async def test_watch_many(store: MetadataStore, other: MetadataStore) -> None:
    await store.create("/one", b"")
    await store.create("/two", b"")
    events = other.watch_many([("/one", False), ("/two", True)])
    assert await other.children("/two") == []
    await store.set("/one", b"x", 0)
    assert await next_event(events) == WatchEvent(CHANGED, "/one")
    await store.create("/two/kid", b"")
    assert await next_event(events) == WatchEvent(CHILDREN, "/two")


async def test_watch_ends_when_store_closes(metadata_url: str) -> None:
    owner = await open_metadata_store(metadata_url)
    events = owner.watch("/anything", children=True)
    await owner.aclose()
    assert await drained(events) == []


async def test_next_id_unique_under_concurrency(store: MetadataStore, other: MetadataStore) -> None:
    got: list[int] = []

    async def take(source: MetadataStore, n: int) -> None:
        for _ in range(n):
            got.append(await source.next_id("ledger"))

    async with trio.open_nursery() as nursery:
        for source in (store, other):
            for _ in range(4):
                nursery.start_soon(take, source, 10)
    assert len(got) == 80
    assert len(set(got)) == 80
    assert all(0 < i < 2**63 for i in got)
    # Counters are independent by name.
    assert await store.next_id("other-counter") == 1


async def test_concurrent_cas_exactly_one_wins(metadata_url: str, store: MetadataStore) -> None:
    await store.create("/cas", b"start")
    contenders = [await open_metadata_store(metadata_url) for _ in range(4)]
    outcomes: list[str] = []

    async def attempt(source: MetadataStore, label: str) -> None:
        try:
            await source.set("/cas", label.encode(), 0)
            outcomes.append(label)
        except MetadataVersionError:
            outcomes.append("lost")

    try:
        async with trio.open_nursery() as nursery:
            for i, source in enumerate(contenders * 2):
                nursery.start_soon(attempt, source, f"writer-{i}")
    finally:
        for source in contenders:
            await source.aclose()
    winners = [o for o in outcomes if o != "lost"]
    assert len(outcomes) == 8
    assert len(winners) == 1
    assert await store.get("/cas") == Versioned(winners[0].encode(), 1)


async def test_closed_store_refuses_calls(metadata_url: str) -> None:
    closed = await open_metadata_store(metadata_url)
    await closed.aclose()
    for call in (
        closed.get("/"),
        closed.exists("/"),
        closed.children("/"),
        closed.create("/n", b""),
        closed.next_id(),
    ):
        with pytest.raises(ClientClosedError):
            await call
