"""Compact the KV store's log into a snapshot with Spark: the last value of every key, with
deletes applied, saved as a snapshot of the log that the store loads on its next start.

    python examples/spark/kv_compact.py --metadata URL [--log kv] [--password PW]

The KV store (examples/kv_store.py) appends every change to its log as a JSON command
(``{"op": "set", "key": K, "value": V}``, optionally with ``"expect"``: a compare-and-set, or
``{"op": "delete", "key": K}``), and a replica starts from the latest snapshot of the log and
replays the records after it. This job:

1. reads the latest snapshot (its position P and its state: a JSON object keyed by key);
2. reads the records after P with the ``walkit`` Spark source (what is readable now; the
   store's writer is not fenced), groups them by key, and folds each key's commands in log
   order through the store's own state machine (``KVState.apply``, starting from the key's
   entry in the snapshot), so sets, compare-and-sets and deletes come out exactly as the store
   applies them;
3. on the driver, updates the snapshot's state with every key's result (deleted keys leave)
   and saves the machine's own ``snapshot()`` of it with ``log.save_snapshot(last position)``.

On its next start the store restores that snapshot and replays only what came after it. The
job never takes the log over; the store's leader truncates the log at its next snapshot.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import trio
from _session import by_value, cli_parse, cli_parser, session

import walkit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # examples/: the KV state machine
import kv_state


def _password(password: bytes | None) -> dict[str, Any]:
    """Log.open's password argument: only when given (else the log's stored one)."""
    return {} if password is None else {"password": password}


async def latest_snapshot(
    url: str, name: str, password: bytes | None
) -> tuple[walkit.LogPosition | None, dict[str, Any]]:
    """The latest snapshot's position and state (None and {} when there is none)."""
    async with walkit.Client.connect(url) as client:
        try:
            owner = await walkit.Log.open(client, name, create=False, **_password(password))
        except walkit.NoSuchLogError:
            raise SystemExit(f"there is no log named {name!r}") from None
        snap = await owner.latest_snapshot()
        if snap is None:
            return None, {}
        state = json.loads(await snap.read())
        if not isinstance(state, dict):
            raise SystemExit(f"the snapshot at {snap.position} is not a KV store snapshot")
        return snap.position, state


async def save_snapshot(
    url: str, name: str, password: bytes | None, position: walkit.LogPosition, data: bytes
) -> None:
    async with walkit.Client.connect(url) as client:
        owner = await walkit.Log.open(client, name, create=False, **_password(password))
        await owner.save_snapshot(position, data)


def fold_key(base: dict[str, Any], key: str | None, commands: list[Any]) -> str | None:
    """One key's entry after its commands (JSON), or None when it ends deleted. Runs on the
    executors, through the KV store's own state machine."""
    ordered = sorted(commands, key=lambda c: (c["ledger_seq"], c["entry_id"], c["slot"]))
    if key is None:
        where = ", ".join(f"{c['ledger_seq']}:{c['entry_id']}:{c['slot']}" for c in ordered[:5])
        raise ValueError(f"the record(s) at {where} are not KV store commands (no key)")
    machine = kv_state.KVState()
    machine.restore(json.dumps({key: base[key]} if key in base else {}).encode())
    for c in ordered:
        position = walkit.LogPosition(c["ledger_seq"], c["entry_id"], c["slot"])
        machine.apply(bytes(c["payload"]), position)
    final = json.loads(machine.snapshot_bytes())
    return json.dumps(final[key]) if key in final else None


def compact(spark: Any, url: str, name: str, password: str | None = None) -> dict[str, Any]:
    """Run the compaction; returns what it did (``position`` None: nothing new to compact)."""
    from pyspark.sql import functions as F

    by_value(__name__, "kv_state")
    pw = None if password is None else password.encode()
    since, base = trio.run(latest_snapshot, url, name, pw)
    start = "earliest" if since is None else str(since.next())
    records = (
        spark.read.format("walkit")
        .option("metadata", url)
        .options(**({} if password is None else {"password": password}))
        .option("startingPosition", start)
        .load(name)
    )
    keyed = records.select(
        "ledger_seq",
        "entry_id",
        "slot",
        "payload",
        F.get_json_object(F.col("payload").cast("string"), "$.key").alias("key"),
    )
    shared = spark.sparkContext.broadcast(base)
    fold = F.udf(
        lambda key, commands: fold_key(shared.value, key, commands), "string", useArrow=False
    )
    per_key = (
        keyed.groupBy("key")
        .agg(
            F.collect_list(F.struct("ledger_seq", "entry_id", "slot", "payload")).alias("commands"),
            F.count("*").alias("records"),
            F.max(F.struct("ledger_seq", "entry_id", "slot")).alias("last"),
        )
        .select("key", fold("key", "commands").alias("entry"), "records", "last")
        .collect()
    )
    report: dict[str, Any] = {
        "previous": since,
        "records": sum(row["records"] for row in per_key),
        "changed": len(per_key),
        "deleted": 0,
        "position": None,
        "keys": len(base),
    }
    if not per_key:
        return report
    state = dict(base)
    for row in per_key:
        if row["entry"] is None:
            report["deleted"] += 1
            state.pop(row["key"], None)
        else:
            state[row["key"]] = json.loads(row["entry"])
    last = max(
        (row["last"]["ledger_seq"], row["last"]["entry_id"], row["last"]["slot"]) for row in per_key
    )
    position = walkit.LogPosition(*last)
    machine = kv_state.KVState()
    machine.restore(json.dumps(state).encode())
    trio.run(save_snapshot, url, name, pw, position, machine.snapshot_bytes())
    report.update(position=position, keys=len(state))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = cli_parser(__doc__, "the log's password (default: the one stored with it)")
    parser.add_argument("--log", default="kv", help="the KV store's log (default kv)")
    args = cli_parse(parser, argv)
    spark, own = session(args.master, "walkit-kv-compact")
    try:
        report = compact(spark, args.metadata, args.log, args.password)
    finally:
        if own:
            spark.stop()
    after = report["previous"] or "the start"
    if report["position"] is None:
        print(f"log {args.log}: no records after {after}; nothing to compact")
        return 0
    print(
        f"log {args.log}: snapshot at {report['position']} with {report['keys']} keys, from "
        f"{report['records']} records after {after} ({report['changed']} keys changed, "
        f"{report['deleted']} deleted)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
