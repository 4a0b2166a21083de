"""Metadata export, import and migration through the store interface, on every driver; and
every way a dump file can be bad."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import pytest

from tests._zookeeper import unique_root
from walkit._core.metadata_dump import DUMP_VERSION, MetadataDump, decode_dump, encode_dump
from walkit.errors import (
    ClusterRunningError,
    InvalidArgumentError,
    MetadataNotEmptyError,
    NoSuchNodeError,
)
from walkit.metadata import (
    MetadataStore,
    ensure_cluster,
    export_metadata,
    import_metadata,
    migrate_metadata,
    open_metadata_store,
    register_bookie,
)
from walkit.metadata._dump import check_dump_tree


async def _fill(store: MetadataStore) -> str:
    """A small cluster's worth of nodes: persistent ones, two ephemerals, ids handed out."""
    instance = await ensure_cluster(store)
    await store.create("/ledgers/00/0000/L0001", b'{"format": 1}')
    await store.create("/logs/orders", b"\x00\xff binary too")
    await store.create("/a-b", b"sorts between /a and /a/b")
    await store.create("/a/b/c", b"deep")
    await register_bookie(store, "127.0.0.1:3181")
    await store.create("/underreplication/locks/7", b"{}", ephemeral=True)
    for _ in range(3):
        await store.next_id("ledger")
    await store.next_id("other")
    return instance


async def test_get_node_tells_ephemerals(store: MetadataStore) -> None:
    await store.create("/kept", b"k")
    await store.create("/gone", b"g", ephemeral=True)
    kept, gone = await store.get_node("/kept"), await store.get_node("/gone")
    assert (kept.value, kept.version, kept.ephemeral) == (b"k", 0, False)
    assert (gone.value, gone.ephemeral) == (b"g", True)
    await store.set("/kept", b"k2", 0)
    assert (await store.get_node("/kept")).version == 1
    with pytest.raises(NoSuchNodeError):
        await store.get_node("/none")


async def test_id_counters_are_listed_and_only_advance(store: MetadataStore) -> None:
    assert await store.id_counters() == {}
    assert [await store.next_id("ledger") for _ in range(2)] == [1, 2]
    assert await store.id_counters() == {"ledger": 2}
    await store.advance_id_counter("ledger", 40)
    await store.advance_id_counter("ledger", 5)  # never back
    await store.advance_id_counter("fresh", 9)
    assert await store.id_counters() == {"ledger": 40, "fresh": 9}
    assert await store.next_id("ledger") == 41
    assert await store.next_id("fresh") == 10
    for bad in (-1, 2**63, True, "3"):
        with pytest.raises(InvalidArgumentError):
            await store.advance_id_counter("ledger", bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        await store.advance_id_counter("a/b", 1)


async def test_export_then_import_copies_every_persistent_node(
    store: MetadataStore, tmp_path: Path
) -> None:
    """A round trip through a file: into a fresh store of every other driver the same tree
    and counters, without the ephemerals; ids go on from where they were."""
    instance = await _fill(store)
    found = await export_metadata(store)
    assert found.ephemeral == ("/bookies/available/127.0.0.1:3181", "/underreplication/locks/7")
    assert found.registered_bookies == ("127.0.0.1:3181",)
    paths = [path for path, _ in found.dump.nodes]
    assert paths == sorted(paths, key=lambda p: p.split("/"))
    assert paths.index("/a") < paths.index("/a/b") < paths.index("/a/b/c") < paths.index("/a-b")
    assert not any(p.startswith("/idgen") for p in paths)
    assert dict(found.dump.nodes)["/logs/orders"] == b"\x00\xff binary too"
    assert found.dump.counters == {"ledger": 3, "other": 1}

    data = encode_dump(found.dump)
    assert decode_dump(data) == found.dump
    target = f"sqlite://{tmp_path / 'copy.db'}"
    async with await open_metadata_store(target) as copy:
        await import_metadata(copy, decode_dump(data))
        again = await export_metadata(copy)
        assert again.dump.nodes == found.dump.nodes
        assert again.dump.counters == found.dump.counters
        assert again.ephemeral == ()
        assert await ensure_cluster(copy) == instance
        assert await copy.next_id("ledger") == 4


async def test_import_refuses_a_store_that_is_not_empty(
    store: MetadataStore, other: MetadataStore
) -> None:
    await store.create("/x", b"1")
    dump = MetadataDump(nodes=(("/y", b"2"),), counters={}, source="memory", walkit_version="t")
    with pytest.raises(MetadataNotEmptyError, match=r"is not empty .*/x"):
        await import_metadata(other, dump)
    assert await store.exists("/y") is None


async def test_migrate_refuses_live_sessions_unless_forced(
    store: MetadataStore, tmp_path: Path
) -> None:
    await _fill(store)
    target = f"sqlite://{tmp_path / 'to.db'}"
    async with await open_metadata_store(target) as destination:
        with pytest.raises(
            ClusterRunningError, match=re.escape("/bookies/available/127.0.0.1:3181")
        ):
            await migrate_metadata(store, destination)
        assert await destination.children("/") == []  # nothing written
        found = await migrate_metadata(store, destination, force=True)
        assert found.registered_bookies == ("127.0.0.1:3181",)
        assert await destination.exists("/bookies/available/127.0.0.1:3181") is None
        assert await destination.exists("/logs/orders") == 0
        with pytest.raises(MetadataNotEmptyError):
            await migrate_metadata(store, destination, force=True)


async def test_a_half_imported_store_has_no_instance_id(tmp_path: Path) -> None:
    """The instance id is written last: an import that dies leaves a store bookies refuse
    (their cookies name the cluster), never one that looks whole."""
    url = f"memory://{unique_root('half').lstrip('/')}"
    async with await open_metadata_store(url) as source:
        await _fill(source)
        dump = (await export_metadata(source)).dump
    bad = (*dump.nodes, ("/zz/orphan", b""))  # no parent: refused before anything is written
    with pytest.raises(InvalidArgumentError, match="not its parent"):
        check_dump_tree(MetadataDump(bad, {}, "memory", "t"))
    target = f"sqlite://{tmp_path / 'half.db'}"
    async with await open_metadata_store(target) as destination:
        await destination.create("/cluster/instanceid", b"taken")
        with pytest.raises(MetadataNotEmptyError):
            await import_metadata(destination, dump)


# --- bad dump files ---------------------------------------------------------------------------


def _dump_bytes() -> bytes:
    dump = MetadataDump(
        nodes=(("/a", b"1"), ("/a/b", b"2"), ("/c", b"")),
        counters={"ledger": 12},
        source="sqlite",
        walkit_version="0.1.0",
    )
    return encode_dump(dump)


def _resealed(lines: list[bytes]) -> bytes:
    """Lines with a fresh end line (right digest and counts): only the content is wrong."""
    body = b"".join(line + b"\n" for line in lines)
    nodes = sum(1 for line in lines if b'"path"' in line)
    counters = sum(1 for line in lines if b'"counter"' in line)
    end = {"nodes": nodes, "counters": counters, "sha256": hashlib.sha256(body).hexdigest()}
    return body + json.dumps({"end": end}).encode() + b"\n"


def test_a_dump_reads_back_and_says_what_it_holds() -> None:
    data = _dump_bytes()
    lines = data.splitlines()
    assert json.loads(lines[0]) == {
        "format": "walkit-metadata-dump",
        "version": DUMP_VERSION,
        "walkit": "0.1.0",
        "source": "sqlite",
    }
    assert json.loads(lines[1]) == {"path": "/a", "value": base64.b64encode(b"1").decode()}
    assert json.loads(lines[-2]) == {"counter": "ledger", "value": 12}
    dump = decode_dump(data)
    assert dump.nodes == (("/a", b"1"), ("/a/b", b"2"), ("/c", b""))
    assert dump.counters == {"ledger": 12}
    assert (dump.source, dump.walkit_version, dump.version) == ("sqlite", "0.1.0", 1)


@pytest.mark.parametrize("keep", [0, 1, 10, 60, -40, -1])
def test_a_truncated_dump_is_refused(keep: int) -> None:
    data = _dump_bytes()
    with pytest.raises(InvalidArgumentError, match=r"not a walkit metadata dump|truncated"):
        decode_dump(data[:keep], name="backup.dump")


def test_a_changed_byte_fails_the_checksum() -> None:
    data = bytearray(_dump_bytes())
    at = data.index(b'"value":"MQ=="') + len('"value":"')
    data[at] = ord("N")  # another valid base64 value: only the digest can tell
    with pytest.raises(InvalidArgumentError, match=re.escape("backup.dump is corrupt: its sha256")):
        decode_dump(bytes(data), name="backup.dump")


def test_an_unknown_version_is_refused_clearly() -> None:
    lines = _dump_bytes().splitlines()
    lines[0] = lines[0].replace(b'"version":1', b'"version":99')
    with pytest.raises(InvalidArgumentError, match="version 99 is not one this walkit reads"):
        decode_dump(_resealed(lines[:-1]))


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json", "line 2: not JSON"),
        (b"[1, 2]", "line 2: not a JSON object"),
        (b'{"path": "/x", "value": "***"}', "not base64"),
        (b'{"path": 3, "value": ""}', "path is not a string"),
        (b'{"counter": "c", "value": -1}', "counter c has value -1"),
        (b'{"what": 1}', "neither a node nor a counter"),
    ],
)
def test_a_bad_line_is_named(line: bytes, message: str) -> None:
    lines = _dump_bytes().splitlines()
    lines.insert(1, line)
    with pytest.raises(InvalidArgumentError, match=message):
        decode_dump(_resealed(lines[:-1]))


def test_wrong_counts_are_refused() -> None:
    lines = _dump_bytes().splitlines()
    body = b"".join(line + b"\n" for line in lines[:-1])
    end = {"nodes": 9, "counters": 1, "sha256": hashlib.sha256(body).hexdigest()}
    with pytest.raises(InvalidArgumentError, match="counts 9 nodes"):
        decode_dump(body + json.dumps({"end": end}).encode() + b"\n")


@pytest.mark.parametrize(
    ("nodes", "message"),
    [
        ((("/a", b""), ("/a", b"")), "twice"),
        ((("a", b""),), "bad node path"),
        ((("/a/b", b""),), "not its parent"),
        ((("/idgen", b""),), "id counters go in its counters"),
        ((("/", b""),), "twice"),
    ],
)
def test_a_dump_that_is_not_a_tree_is_refused(
    nodes: tuple[tuple[str, bytes], ...], message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        check_dump_tree(MetadataDump(nodes, {}, "memory", "t"))
