"""Write the golden corpus of a release: ``python -m tests.compat.make_corpus VERSION``.

Run it from the repository root, with the code of the release being made, when a release
changes a format (docs/formats.md says when). It writes ``tests/compat/VERSION/`` and refuses
to touch a directory that exists: the corpora of earlier releases are what later versions must
keep reading, and are never rewritten.

- ``<kind>/<case>.bin`` and ``.json``: byte-level formats (``_kinds.py``), one canonical object
  each, with a description of what it holds and the format version it was written in.
- ``cluster/``: a small cluster, run for real: one bookie process on sqlite metadata with two
  logs (record sets, producers, zstd, a snapshot, a takeover), ledgers of the ledger API (mac
  digest, custom metadata, one left open and then recovered), an under-replication marker
  and autorecovery settings. The bookie is stopped cleanly once (its entries reach the entry
  logs and the index) and SIGKILLed at the end (the last entries are only in its journal).
  ``bookie/`` is its data dir, ``sqlite.db`` its metadata file, ``sqlite.dump`` and
  ``zookeeper.dump`` the metadata exported from sqlite and, after a migration, from a real
  ZooKeeper; ``cluster.json`` says what it all holds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import attrs
import trio

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests._cluster import BookieProcess, free_port  # noqa: E402
from tests._zookeeper import missing_zookeeper, running_zookeeper  # noqa: E402
from tests.compat._kinds import KINDS, Description, b64, describe_message  # noqa: E402
from walkit import Client, Log, LogPosition  # noqa: E402
from walkit._core import wire  # noqa: E402
from walkit._core.digest import DigestType  # noqa: E402
from walkit._core.ledger_metadata import (  # noqa: E402
    LedgerMetadata,
    LedgerState,
    legacy_password_hash,
    password_hash,
)
from walkit._core.log_metadata import (  # noqa: E402
    LedgerConfig,
    LogLedger,
    LogMetadata,
    SinkMark,
    SnapshotRecord,
)
from walkit._core.metadata_dump import MetadataDump  # noqa: E402
from walkit._core.types import BookieId  # noqa: E402
from walkit.metadata import (  # noqa: E402
    UnderreplicationManager,
    export_metadata,
    import_metadata,
    open_metadata_store,
)

HERE = Path(__file__).resolve().parent
ORDERS_PASSWORD = b"orders-password"
LEDGER_PASSWORD = b"ledger-password"


# --- byte-level cases -------------------------------------------------------------------------


def _messages() -> dict[str, Any]:
    key = bytes(range(32))
    packet = b"\x00" * 28 + b"payload"
    add, read, lac = wire.AddFlag, wire.ReadFlag, wire.ReadLacFlag
    status = wire.StatusCode
    return {
        "add_request": wire.AddRequest(1, 42, 7, key, packet, add.RECOVERY | add.COPY),
        "add_response": wire.AddResponse(2, status.OK, 42, 7),
        "read_request": wire.ReadRequest(3, 42, 7, read.FENCE, key),
        "read_response": wire.ReadResponse(4, status.NO_SUCH_ENTRY, 42, 8, b""),
        "read_lac_request": wire.ReadLacRequest(
            5, 42, lac.LONG_POLL | lac.PIGGYBACK_ENTRY, 6, 2500, key
        ),
        "read_lac_response": wire.ReadLacResponse(6, status.OK, 42, 7, packet),
        "write_lac_request": wire.WriteLacRequest(7, 42, 7, key),
        "write_lac_response": wire.WriteLacResponse(8, status.LEDGER_FENCED, 42),
        "error_response": wire.ErrorResponse(9, status.BAD_REQUEST, "bad frame: é"),
        "auth_request": wire.AuthRequest(10, "token", b"secret-token"),
        "auth_response": wire.AuthResponse(11, status.AUTH_REQUIRED, "refused"),
        "batch_read_request": wire.BatchReadRequest(12, 42, 0, 16, 1 << 20),
        "batch_read_response": wire.BatchReadResponse(13, status.OK, 42, 0, (packet, b"x" * 9)),
        "copy_fragment_request": wire.CopyFragmentRequest(
            14, 42, 0, 1, 0, 99, key, ("127.0.0.1:3181", "[::1]:3182")
        ),
        "copy_fragment_response": wire.CopyFragmentResponse(15, status.OK, 42, 100, 12345, ""),
    }


def _record_sets() -> dict[str, Description]:
    def case(records: list[bytes], producers: Any = None, codec: str = "none") -> Description:
        return {"records": [b64(r) for r in records], "producers": producers, "codec": codec}

    many = [f"record {i}".encode() * 8 for i in range(12)]
    return {
        "one_record": case([b"hello"]),
        "several": case([b"a", b"", b"ccc" * 100]),
        "producers": case([b"p1", b"x", b"p2"], [["producer-é", 5], None, ["other", 2**40]]),
        "zstd": case(many, codec="zstd"),
        "lz4": case(many, codec="lz4"),
        # Record-set version 2: keys, headers and timestamps.
        "stamped": {**case([b"a", b"bb"]), "timestamp": 1_700_000_000_000},
        "keys_headers_timestamps": {
            **case([b"k1", b"plain", b"k3"], [["producer-1", 9], None, None]),
            "timestamp": 1_700_000_000_000,
            "extras": [
                [b64(b"user-7"), [["trace", b64(b"00-ab")], ["trace", b64(b"")]], None],
                None,
                [b64(b""), None, 1_600_000_000_000],
            ],
        },
        "extras_zstd": {
            **case(many, codec="zstd"),
            "extras": [[b64(b"key-%d" % i), None, i] for i in range(len(many))],
        },
    }


def _ledgers() -> dict[str, Description]:
    from tests.compat._kinds import describe_ledger

    a, b, c = (BookieId.parse(f"127.0.0.1:{p}") for p in (3181, 3182, 3183))
    closed = LedgerMetadata(
        ledger_id=10**10 + 7,
        ensemble_size=2,
        write_quorum=2,
        ack_quorum=1,
        fragments=((0, (a, b)), (5, (a, c))),
        state=LedgerState.CLOSED,
        last_entry_id=9,
        length=1234,
        digest=DigestType.MAC,
        password_sha256=password_hash(b"pw", bytes(range(16))),
        custom_metadata={"walkit.log": b"orders", "bin": b"\x00\xff"},
        ctime_ms=1_700_000_000_000,
    )
    opened = LedgerMetadata(
        ledger_id=1,
        ensemble_size=3,
        write_quorum=2,
        ack_quorum=2,
        fragments=((0, (a, b, c)),),
        password_sha256=legacy_password_hash(b"old"),
    )
    stored = attrs.evolve(closed, password=b"pw")
    return {
        "closed": describe_ledger(closed),
        "open_legacy_hash": describe_ledger(opened),
        "stored_password": describe_ledger(stored),
    }


def _logs() -> dict[str, Description]:
    from tests.compat._kinds import describe_log

    fresh = LogMetadata(name="fresh")
    busy = LogMetadata(
        name="orders.v2",
        config=LedgerConfig(5, 3, 2, DigestType.NONE, "ab" * 16),
        next_seq=9,
        ledgers=(LogLedger(5, 31), LogLedger(7, 40), LogLedger(8, 41)),
        truncated=LogPosition.parse("5:3"),
        snapshots=(SnapshotRecord(LogPosition.parse("7:12:2"), 44, 3000, 123456, 17),),
        ctime_ms=1_700_000_000_000,
        sinks=(SinkMark("query-a", 3), SinkMark("query-b", 0)),
    )
    opted_out = LogMetadata(
        name="secret", config=LedgerConfig(password_hex="cd" * 16, store_password=False)
    )
    return {
        "fresh": describe_log(fresh),
        "busy": describe_log(busy),
        "opted_out": describe_log(opted_out),
    }


def byte_cases() -> dict[str, dict[str, Description]]:
    packet = b"\x00" * 28 + b"entry"
    return {
        "wire": {name: describe_message(msg) for name, msg in _messages().items()},
        "record_set": _record_sets(),
        "ledger_metadata": _ledgers(),
        "log_metadata": _logs(),
        "registration": {
            "bookie": {
                "bookie_id": "127.0.0.1:3181",
                "network_location": "/region-a/rack-1",
                "read_only": False,
                "info": {"walkit_version": "0.1.0", "admin_port": 8000},
            }
        },
        "cookie": {
            "cookie": {
                "bookie_id": "127.0.0.1:3181",
                "instance_id": "0123456789abcdef0123456789abcdef",
                "data_dirs": ["/data/journal", "/data/ledgers"],
                "layout_version": 1,
            }
        },
        "ledger_state": {
            "fenced": {
                "master_key": b64(bytes(32)),
                "fenced": True,
                "lac": 7,
                "explicit_lac": 9,
                "last_entry": 10,
            }
        },
        "log_mark": {"mark": {"file_id": 3, "offset": 8192}},
        "journal_group": {
            "group": {
                "records": [
                    describe_message(wire.AddRequest(0, 42, 0, bytes(32), packet)),
                    describe_message(wire.ReadLacRequest(0, 42, wire.ReadLacFlag.FENCE)),
                    describe_message(wire.WriteLacRequest(0, 42, 0, bytes(32))),
                ]
            }
        },
        "entrylog_records": {
            "entries": {
                "entries": [
                    [42, 0, b64(packet), 20],
                    [42, 1, b64(packet + b"!"), 73],
                    [43, 0, b64(b"z" * 5000), 127],
                ]
            }
        },
        "metadata_dump": {
            "dump": {
                "nodes": [["/a", b64(b"1")], ["/a/b", b64(b"\x00")], ["/c", b64(b"")]],
                "counters": {"ledger": 41},
                "source": "sqlite",
                "walkit_version": "0.1.0",
            }
        },
    }


def write_byte_cases(out: Path) -> None:
    for kind_name, cases in byte_cases().items():
        kind = KINDS[kind_name]
        directory = out / kind_name
        directory.mkdir(parents=True)
        for case, description in cases.items():
            data = kind.write(description)
            kind.read(data, description)  # (what the test will check, checked now)
            (directory / f"{case}.bin").write_bytes(data)
            doc = {"version": kind.version_of(data), "description": description}
            (directory / f"{case}.json").write_text(json.dumps(doc, indent=1) + "\n")


# --- the cluster ------------------------------------------------------------------------------


async def _phase_a(url: str, expected: dict[str, Any]) -> None:
    async with Client.connect(url) as client:
        logs: dict[str, Any] = expected["logs"]
        async with Log.open(
            client,
            "orders",
            ensemble_size=1,
            write_quorum=1,
            ack_quorum=1,
            password=ORDERS_PASSWORD,
            snapshot_chunk_size=1024,
        ) as log:
            orders: dict[str, Any] = {
                "records": [],
                "snapshots": [],
                "password": b64(ORDERS_PASSWORD),
            }
            records = logs.setdefault("orders", orders)["records"]
            async with log.writer() as writer:
                for i in range(5):
                    payload = f"order {i}".encode()
                    records.append([str(await writer.append(payload)), b64(payload)])
                batch = [f"batched order {i}".encode() for i in range(10)]
                for pos, payload in zip(await writer.append_batch(batch), batch, strict=True):
                    records.append([str(pos), b64(payload)])
                for seq in range(1, 4):
                    payload = f"idempotent {seq}".encode()
                    pos = await writer.append(payload, producer_id="golden", sequence=seq)
                    records.append([str(pos), b64(payload)])
                # Record-set version 2: a key, headers and a timestamp (records read as
                # [position, payload, key, timestamp]).
                for i, key in enumerate((b"user-7", None)):
                    payload = f"keyed {i}".encode()
                    when = 1_700_000_000_000 + i
                    pos = await writer.append(payload, key=key, headers={"h": b"v"}, timestamp=when)
                    records.append(
                        [str(pos), b64(payload), None if key is None else b64(key), when]
                    )
                state = bytes(range(256)) * 12  # 3 KiB: three chunks
                snap = await log.save_snapshot(pos, state)
                snapshot = {"position": str(snap.position), "data": b64(state)}
                logs["orders"]["snapshots"].append(snapshot)
        async with Log.open(
            client, "metrics", ensemble_size=1, write_quorum=1, ack_quorum=1, compression="zstd"
        ) as log:
            # (no password given: the log generates one and keeps it in its metadata)
            metrics: dict[str, Any] = {"records": [], "snapshots": [], "password": None}
            records = logs.setdefault("metrics", metrics)["records"]
            async with log.writer() as writer:
                batch = [f"cpu=0.{i} host=golden".encode() for i in range(20)]
                for pos, payload in zip(await writer.append_batch(batch), batch, strict=True):
                    records.append([str(pos), b64(payload)])
        ledgers: dict[str, Any] = expected["ledgers"]
        lw = await client.create_ledger(
            1, 1, 1, digest="mac", password=LEDGER_PASSWORD, custom_metadata={"app": b"golden"}
        )
        entries = [f"entry {i}".encode() for i in range(3)]
        for entry in entries:
            await lw.append(entry)
        await lw.close()
        ledgers[str(lw.id)] = {
            "password": b64(LEDGER_PASSWORD),
            "entries": [b64(e) for e in entries],
            "fenced": False,
        }
        left_open = await client.create_ledger(1, 1, 1, digest="none")
        for entry in entries[:2]:
            await left_open.append(entry)
        ledgers[str(left_open.id)] = {
            "password": b64(b""),
            "entries": [b64(e) for e in entries[:2]],
            "fenced": True,  # recovered in phase B
        }
    async with await open_metadata_store(url) as store:
        manager = UnderreplicationManager(store)
        await manager.update_settings(enabled=False, lost_bookie_delay=12.5)
        await manager.mark(lw.id, [BookieId.parse("127.0.0.1:9")])
    expected["underreplicated"] = {str(lw.id): ["127.0.0.1:9"]}
    expected["autorecovery"] = {"enabled": False, "lost_bookie_delay": 12.5}


async def _phase_b(url: str, expected: dict[str, Any]) -> None:
    async with Client.connect(url) as client:
        async with Log.open(client, "orders", password=ORDERS_PASSWORD) as log:
            records = expected["logs"]["orders"]["records"]
            async with log.writer() as writer:  # a takeover: a ledger of its own
                for i in range(4):
                    payload = f"after restart {i}".encode()
                    records.append([str(await writer.append(payload)), b64(payload)])
        open_id = next(int(k) for k, v in expected["ledgers"].items() if v["fenced"])
        reader = await client.open_ledger(open_id, recovery=True)
        assert reader.is_closed and reader.last_add_confirmed == 1


def make_cluster(out: Path, work: Path) -> None:
    work.mkdir(parents=True)
    url = f"sqlite://{work / 'metadata.db'}"
    bookie = BookieProcess(
        url,
        work / "bookie",
        free_port(),
        extra_args=[
            "--checkpoint-interval",
            "86400",
            "--no-autorecovery",
            "--gc-interval",
            "86400",
        ],
    )
    expected: dict[str, Any] = {"logs": {}, "ledgers": {}, "bookie": str(bookie.address)}
    bookie.start()
    try:
        trio.run(_phase_a, url, expected)
        bookie.stop()  # a clean stop checkpoints: entries to the entry logs and the index
        assert any((work / "bookie" / "entrylogs").iterdir()), "the clean stop wrote no entry log"
        bookie.start()
        trio.run(_phase_b, url, expected)
    finally:
        bookie.kill()  # the last entries stay in the journal only
    cluster = out / "cluster"
    cluster.mkdir(parents=True)
    trio.run(_dumps, url, cluster, expected)
    assert not (work / "metadata.db-wal").exists(), "the sqlite file was left with a WAL"
    shutil.copyfile(work / "metadata.db", cluster / "sqlite.db")
    shutil.copytree(work / "bookie", cluster / "bookie")
    (cluster / "cluster.json").write_text(json.dumps(expected, indent=1) + "\n")


async def _dumps(url: str, cluster: Path, expected: dict[str, Any]) -> None:
    from walkit._core.metadata_dump import encode_dump

    async with await open_metadata_store(url) as store:
        found = await export_metadata(store)
    expected["instance_id"] = dict(found.dump.nodes)["/cluster/instanceid"].decode()
    (cluster / "sqlite.dump").write_bytes(encode_dump(found.dump))
    problem = missing_zookeeper()
    if problem:
        raise SystemExit(f"make_corpus needs ZooKeeper for the ZooKeeper dump: {problem}")
    with tempfile.TemporaryDirectory() as zk_dir, running_zookeeper(Path(zk_dir)) as server:
        zk_url = server.url("/golden")
        async with await open_metadata_store(zk_url) as store:
            await import_metadata(store, found.dump)
            again = await export_metadata(store)
    dump: MetadataDump = again.dump
    (cluster / "zookeeper.dump").write_bytes(encode_dump(dump))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", help="the release, e.g. 0.2.0")
    args = parser.parse_args(argv)
    out = HERE / args.version
    if out.exists():
        raise SystemExit(f"{out} exists: a release's corpus is never rewritten")
    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp) / "corpus"
        write_byte_cases(staging)
        make_cluster(staging, Path(tmp) / "work")
        shutil.copytree(staging, out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
