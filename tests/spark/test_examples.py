"""The Spark example pipelines (examples/spark/) on small data, through their command-line
``main`` in this process: they pick up the shared SparkSession instead of starting one."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio

from tests._cluster import ProcessCluster
from walkit import Client

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
            finally:
                await trio.to_thread.run_sync(bookie.start)
            await lw.close()
            healthy = await client.create_ledger(3, 2, 2)
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
