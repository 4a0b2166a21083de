"""The Spark example pipelines (examples/spark/) on small data, through their command-line
``main`` in this process: they pick up the shared SparkSession instead of starting one."""

from __future__ import annotations

import functools
import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio

from tests._cluster import ProcessCluster
from walkit import Client, Log
from walkit.errors import NotEnoughBookiesError

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "spark"


def example(name: str) -> ModuleType:
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    return importlib.import_module(name)


def test_replication_audit_finds_the_copies_a_dead_bookie_missed(
    spark: Any, spark_cluster: ProcessCluster, capsys: pytest.CaptureFixture[str]
) -> None:
    audit = example("replication_audit")
    url = spark_cluster.metadata_url

    async def write() -> tuple[int, int, str]:
        # A writer that goes on with an ack quorum while a bookie of its write set is down
        # (no ensemble change until the ack quorum is lost): entries 5-14 get two copies.
        async with Client.connect(url, ensemble_change="when_ack_quorum_lost") as client:
            lw = await client.create_ledger(3, 3, 2)
            for i in range(5):
                await lw.append(b"before %d" % i)
            victim = (await client.ledger_metadata(lw.id)).fragments[0][1][1]
            bookie = spark_cluster.by_address(victim)
            bookie.kill()
            try:
                for i in range(10):
                    await lw.append(b"while down %d" % i)
                await lw.close()  # before the bookie is back: nothing is sent to it again
            finally:
                # A killed bookie's registration lives out its metadata session (30 s) before
                # the restarted one may register: wait well past it.
                await trio.to_thread.run_sync(functools.partial(bookie.start, timeout=90))
            with trio.fail_after(60):  # until the client sees the bookie registered again
                while True:
                    try:
                        healthy = await client.create_ledger(3, 2, 2)
                        break
                    except NotEnoughBookiesError:
                        await trio.sleep(0.1)
            await healthy.append_batch([b"h%d" % i for i in range(10)])
            await healthy.close()
            return lw.id, healthy.id, str(victim)

    damaged, healthy, victim = trio.run(write)
    ledgers = f"{damaged},{healthy}"
    problems, summary = audit.audit(spark, url, ledgers, chunk=4)
    # An append returns at the ack quorum, so the last entries before the kill may not have
    # reached the victim either: its missing copies are a tail that holds all of 5-14.
    assert len(problems) == 1
    missing = problems[0].pop("entries")
    first = missing[0]
    assert first <= 5 and missing == list(range(first, 15))
    n = len(missing)
    assert problems == [{"ledger_id": damaged, "bookie": victim, "state": "missing", "copies": n}]
    # 15 entries x 3 copies + 10 entries x 2 copies were asked for.
    assert summary == {
        "ledgers": 2,
        "entries": 25,
        "copies": 65,
        "missing": n,
        "corrupt": 0,
        "unreachable": 0,
    }
    # The command: a table, a summary, and exit status 1.
    assert audit.main(["--metadata", url, "--ledgers", ledgers]) == 1
    out = capsys.readouterr().out
    assert f"{victim:<22} missing      {n:>7}  {first}-14" in out
    assert f"audited 2 ledgers, 25 entries, 65 copies: {n} missing, 0 corrupt" in out


async def append_records(
    url: str, name: str, payloads: list[bytes], roll: int = 7, batch_bytes: int | None = None
) -> None:
    """Append one by one (an entry each), or with ``batch_bytes`` in one batch (record sets of
    up to that many bytes)."""
    async with Client.connect(url) as client:
        if batch_bytes is not None:
            owner = await Log.open(client, name, roll_entries=roll, batch_bytes=batch_bytes)
            async with owner.writer() as w:
                await w.append_batch(payloads)
            return
        owner = await Log.open(client, name, roll_entries=roll)
        async with owner.writer() as w:
            for payload in payloads:
                await w.append(payload)


def read_records(url: str, name: str) -> list[tuple[str, bytes]]:
    async def main() -> list[tuple[str, bytes]]:
        async with Client.connect(url) as client:
            owner = await Log.open(client, name, create=False)
            return [(str(r.position), r.payload) async for r in owner.reader(follow=False)]

    return trio.run(main)


def parquet_records(path: Path) -> list[tuple[str, bytes]]:
    import pyarrow.parquet as pq

    columns = ["position", "payload", "ledger_seq", "entry_id", "slot"]
    table = pq.read_table(str(path), columns=columns)
    rows = sorted(table.to_pylist(), key=lambda r: (r["ledger_seq"], r["entry_id"], r["slot"]))
    return [(r["position"], r["payload"]) for r in rows]


def test_export_to_parquet_batch_and_streaming(
    spark: Any, spark_metadata: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = example("export_parquet")
    url = spark_metadata
    name = "export-log"
    trio.run(append_records, url, name, [b"a%02d" % i for i in range(20)])
    out = tmp_path / "batch"
    assert export.main(["--metadata", url, "--log", name, "--out", str(out)]) == 0
    assert f"exported 20 records of log {name} to {out}" in capsys.readouterr().out
    assert parquet_records(out) == read_records(url, name)

    # Streaming: what is there, then (restarted from the checkpoint) only what came after.
    stream_out, checkpoint = tmp_path / "stream", tmp_path / "checkpoint"
    command = ["--metadata", url, "--log", name, "--out", str(stream_out)]
    command += ["--stream", "--checkpoint", str(checkpoint)]
    assert export.main(command) == 0
    assert (
        f"exported 20 new records of log {name}; {stream_out} holds 20" in capsys.readouterr().out
    )
    # A takeover, and record sets of three records (3 B + 4 B each, 10 B of header, and the
    # 8 B timestamp of an entry the client's wall clock stamps).
    trio.run(append_records, url, name, [b"b%02d" % i for i in range(9)], 7, 39)
    assert export.main(command) == 0
    assert f"exported 9 new records of log {name}; {stream_out} holds 29" in capsys.readouterr().out
    assert parquet_records(stream_out) == read_records(url, name)
    assert read_records(url, name)[-1][0].endswith(":2")  # records share entries


def test_kv_compaction_gives_the_store_a_snapshot_it_starts_from(
    spark: Any, spark_metadata: str, capsys: pytest.CaptureFixture[str]
) -> None:
    compact = example("kv_compact")
    kv_store = importlib.import_module("kv_store")  # examples/: on sys.path via the compaction
    url = spark_metadata
    name = "kv-compact"

    async def write(changes: Any) -> Any:
        async with Client.connect(url) as client:
            owner = await Log.open(client, name, roll_entries=9)
            store = kv_store.KVStore(owner, snapshot_every=1_000_000)  # no snapshot of its own
            async with store.primary() as primary:
                await changes(primary)
            return store.state.data

    async def restart() -> tuple[Any, int, str]:
        async with Client.connect(url) as client:
            store = kv_store.KVStore(await Log.open(client, name), snapshot_every=1_000_000)
            await store.recover()
            snap = await store.replica.log.latest_snapshot()
            return store.state.data, store.replica.applied_count, str(snap.position)

    async def first(primary: Any) -> None:
        for i in range(20):
            await primary.set(f"k{i}", f"v{i}")
        for i in range(0, 20, 3):
            await primary.delete(f"k{i}")
        for i in range(5):
            await primary.set(f"k{i}", f"w{i}")  # deleted ones come back

    expected = trio.run(write, first)
    assert compact.main(["--metadata", url, "--log", name]) == 0
    out = capsys.readouterr().out
    last = read_records(url, name)[-1][0]
    assert f"log {name}: snapshot at {last} with {len(expected)} keys, from 32 records" in out
    state, replayed, at = trio.run(restart)
    assert (state, replayed, at) == (expected, 0, last)  # nothing left to replay

    async def second(primary: Any) -> None:
        await primary.delete("k1")  # a key that only the snapshot holds
        await primary.set("k2", "x2")
        await primary.set("new", "n")

    expected = trio.run(write, second)
    assert compact.main(["--metadata", url, "--log", name]) == 0
    out = capsys.readouterr().out
    assert "from 3 records after " in out and "(3 keys changed, 1 deleted)" in out
    state, replayed, at = trio.run(restart)
    assert (state, replayed, at) == (expected, 0, read_records(url, name)[-1][0])
    assert compact.main(["--metadata", url, "--log", name]) == 0
    assert "nothing to compact" in capsys.readouterr().out
