"""The cluster corpus of every release reads with today's code: its metadata exports (from
sqlite and from ZooKeeper), its sqlite metadata file, and its bookie's data dir (cookie,
journal, entry logs, index), down to every record of every log, the snapshot and the entries of
plain ledgers, as ``cluster.json`` lists them. See ``make_corpus.py`` for what the cluster did.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import attrs
import crc32c
import pytest

from tests._zookeeper import unique_root
from tests.compat._kinds import unb64
from walkit._core.digest import DigestManager, master_key
from walkit._core.ledger_metadata import LedgerMetadata, LedgerState, password_matches
from walkit._core.log_metadata import LogMetadata
from walkit._core.log_position import LogPosition
from walkit._core.metadata_dump import MetadataDump, decode_dump
from walkit._core.record_set import entry_records, uses_record_sets
from walkit._core.types import BookieId
from walkit.metadata import (
    LedgerManager,
    UnderreplicationManager,
    ensure_cluster,
    export_metadata,
    forget_memory_tree,
    import_metadata,
    open_metadata_store,
    read_cookie,
)
from walkit_bookie._config import BookieConfig
from walkit_bookie.storage import DiskStorage
from walkit_bookie.storage._cookie import COOKIE_FILE, Cookie

HERE = Path(__file__).resolve().parent
CLUSTERS = sorted(p / "cluster" for p in HERE.iterdir() if (p / "cluster").is_dir())
pytestmark = pytest.mark.parametrize("cluster", CLUSTERS, ids=[c.parent.name for c in CLUSTERS])


def _expected(cluster: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((cluster / "cluster.json").read_text())
    return doc


def _dump(cluster: Path, name: str) -> MetadataDump:
    return decode_dump((cluster / name).read_bytes(), name=name)


def test_both_exports_hold_the_same_tree(cluster: Path) -> None:
    sqlite, zookeeper = _dump(cluster, "sqlite.dump"), _dump(cluster, "zookeeper.dump")
    assert (sqlite.source, zookeeper.source) == ("sqlite", "zk")
    assert sqlite.nodes == zookeeper.nodes
    assert sqlite.counters == zookeeper.counters
    paths = {path for path, _ in sqlite.nodes}
    assert not any(p.startswith("/bookies/available/") for p in paths)  # ephemeral


@pytest.mark.parametrize("dump_name", ["sqlite.dump", "zookeeper.dump"])
async def test_every_metadata_node_reads(cluster: Path, dump_name: str) -> None:
    """Imported into a store, the export reads through today's managers and parsers."""
    expected = _expected(cluster)
    name = unique_root(f"golden-{dump_name}").lstrip("/")
    try:
        async with await open_metadata_store(f"memory://{name}") as store:
            await import_metadata(store, _dump(cluster, dump_name))
            await _check_metadata(store, expected)
    finally:
        forget_memory_tree(name)


async def _check_metadata(store: Any, expected: dict[str, Any]) -> None:
    assert await ensure_cluster(store) == expected["instance_id"]  # the layout is known too
    cookie = await read_cookie(store, expected["bookie"])
    assert cookie is not None and cookie[0]["instance_id"] == expected["instance_id"]
    manager = LedgerManager(store)
    ledgers = {i: (await manager.read(i))[0] for i in await manager.list_ids()}
    for ledger_id, spec in expected["ledgers"].items():
        md = ledgers[int(ledger_id)]
        assert md.state is LedgerState.CLOSED
        assert md.last_entry_id == len(spec["entries"]) - 1
        assert password_matches(md.password_sha256, unb64(spec["password"]))
    for log_name, spec in expected["logs"].items():
        log_md = LogMetadata.from_bytes(log_name, (await store.get(f"/logs/{log_name}")).value)
        for ledger in log_md.ledgers:
            assert ledger.ledger_id in ledgers
        assert [str(s.position) for s in log_md.snapshots] == [
            s["position"] for s in spec["snapshots"]
        ]
    underreplication = UnderreplicationManager(store)
    markers = {
        str(m.ledger_id): [str(b) for b in m.missing] for m in await underreplication.markers()
    }
    assert markers == expected["underreplicated"]
    settings = await underreplication.settings()
    assert attrs.asdict(settings) == expected["autorecovery"]
    assert await store.next_id("ledger") > max(ledgers)  # the counter came along


async def test_the_sqlite_metadata_file_opens(cluster: Path, tmp_path: Path) -> None:
    shutil.copyfile(cluster / "sqlite.db", tmp_path / "metadata.db")
    async with await open_metadata_store(f"sqlite://{tmp_path / 'metadata.db'}") as store:
        found = await export_metadata(store)
        await _check_metadata(store, _expected(cluster))
    golden = _dump(cluster, "sqlite.dump")
    assert found.dump.nodes == golden.nodes
    assert found.dump.counters == golden.counters


@pytest.mark.zookeeper
async def test_an_export_imports_into_zookeeper(cluster: Path, zookeeper_url: str) -> None:
    golden = _dump(cluster, "zookeeper.dump")
    async with await open_metadata_store(zookeeper_url) as store:
        await import_metadata(store, golden)
        again = await export_metadata(store)
        await _check_metadata(store, _expected(cluster))
    assert again.dump.nodes == golden.nodes


async def test_the_bookie_data_dir_reads(cluster: Path, tmp_path: Path) -> None:
    """Every entry of every ledger the metadata lists is in the bookie's dir (some in the entry
    logs and index, some only in the journal), with a good digest, and decodes to the records,
    snapshot and entries the cluster was acknowledged."""
    expected = _expected(cluster)
    golden_cookie = Cookie.from_bytes((cluster / "bookie" / COOKIE_FILE).read_bytes(), "golden")
    assert golden_cookie.bookie_id == expected["bookie"]
    assert golden_cookie.instance_id == expected["instance_id"]
    copy = tmp_path / "bookie"
    shutil.copytree(cluster / "bookie", copy)
    # The cookie names the directory it was made in: moved here, it must name this one.
    moved = attrs.evolve(golden_cookie, data_dirs=(str(copy),))
    (copy / COOKIE_FILE).write_bytes(moved.to_bytes())

    dump = _dump(cluster, "sqlite.dump")
    nodes = dict(dump.nodes)
    storage = DiskStorage(BookieConfig(data_dirs=(str(copy),)))
    states = await storage.open(
        BookieId.parse(expected["bookie"]), expected["instance_id"], instance_id_is_known=True
    )
    try:
        assert storage.stats.replayed_records > 0  # the end is in the journal only
        from_journal = from_disk = 0
        for log_name, spec in expected["logs"].items():
            md = LogMetadata.from_bytes(log_name, nodes[f"/logs/{log_name}"])
            password = _log_password(spec, md)
            records: list[list[Any]] = []
            for ledger in md.ledgers:
                ledger_md = _ledger(nodes, ledger.ledger_id)
                payloads = await _entries(storage, ledger_md, password, states)
                for entry_id, payload in enumerate(payloads):
                    sets = uses_record_sets(ledger_md.custom_metadata)
                    decoded = entry_records(payload, sets)
                    for slot, record in enumerate(decoded.records):
                        pos = LogPosition(ledger.seq, entry_id, slot)
                        records.append([str(pos), _b64(record)])
                        key, when = decoded.key(slot), decoded.record_timestamp(slot)
                        if key is not None or when is not None:  # (corpora after 0.1.0)
                            records[-1] += [None if key is None else _b64(key), when]
                cached = storage.cached_entry(ledger.ledger_id, 0)
                from_journal += cached is not None
                from_disk += cached is None and bool(payloads)
            assert records == spec["records"], log_name
            for snap_spec, snap in zip(spec["snapshots"], md.snapshots, strict=True):
                data = b"".join(
                    await _entries(storage, _ledger(nodes, snap.ledger_id), password, states)
                )
                assert data == unb64(snap_spec["data"])
                assert (len(data), crc32c.crc32c(data)) == (snap.size, snap.crc32c)
        assert from_journal and from_disk, (from_journal, from_disk)
        for ledger_id, spec in expected["ledgers"].items():
            ledger_md = _ledger(nodes, int(ledger_id))
            password = unb64(spec["password"])
            payloads = await _entries(storage, ledger_md, password, states)
            assert payloads == [unb64(e) for e in spec["entries"]]
            assert states[int(ledger_id)].fenced is spec["fenced"]
    finally:
        await storage.aclose()


def _b64(data: bytes) -> str:
    import base64

    return base64.b64encode(data).decode("ascii")


def _log_password(spec: dict[str, Any], md: LogMetadata) -> bytes:
    """The password a log was opened with, else the one it keeps in its metadata."""
    given = spec.get("password")
    return md.config.password if given is None else unb64(given)


def _ledger(nodes: dict[str, bytes], ledger_id: int) -> LedgerMetadata:
    from walkit.metadata import ledger_path

    return LedgerMetadata.from_bytes(ledger_id, nodes[ledger_path(ledger_id)])


async def _entries(
    storage: DiskStorage, md: LedgerMetadata, password: bytes, states: dict[int, Any]
) -> list[bytes]:
    assert md.is_closed, f"ledger {md.ledger_id} is not closed"
    assert states[md.ledger_id].master_key == master_key(password)
    digest = DigestManager(md.ledger_id, md.digest, password)
    keys = [(md.ledger_id, e) for e in range(md.last_entry_id + 1)]
    packets = await storage.read_entries(keys)
    out = []
    for (_lid, entry_id), packet in zip(keys, packets, strict=True):
        assert packet is not None, f"ledger {md.ledger_id} entry {entry_id} is missing"
        out.append(digest.verify(packet, entry_id)[1])
    return out
