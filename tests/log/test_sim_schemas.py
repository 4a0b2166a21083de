"""Writers racing to register schema versions, in the simulator (walkit.testing.SimCluster on a
MockClock): four writers with four types take the log over one after another at random moments
and append, under ``backward_transitive``. Two of the types conflict (each adds the same field with another type): whichever
registers first wins, and the other's takeover fails with IncompatibleSchemaError having
written nothing. The log's versions end up one ordered list, each version compatible with the
ones before it; every ledger names the version of the writer that filled it; every
acknowledged value reads back at its position, under its writer's version. Seeds replay
(``WALKIT_SIM_SEED=<seed>``)."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import pytest
import trio

from walkit import Log, LogPosition
from walkit._core.schema import Compatibility, check_compatible
from walkit._core.schema_types import schema_of
from walkit.errors import IncompatibleSchemaError, WalkitError
from walkit.testing import SEED_ENV, SimCluster, replay_hint, run

OPTIONS = {"add_timeout": 1.0, "read_timeout": 1.0, "connect_timeout": 1.0}
SEEDS = [int(os.environ[SEED_ENV], 0)] if os.environ.get(SEED_ENV) else [1, 2, 3, 4, 5, 6, 7, 8]
RECORDS = 8
#: Transitive: a version must read what every earlier one wrote (under plain "backward", the
#: second of the conflicting types could follow a version without the field).
RULE = "backward_transitive"


@dataclasses.dataclass
class Base:
    writer: str
    n: int


@dataclasses.dataclass
class WithRegion:
    writer: str
    n: int
    region: str = "eu"


@dataclasses.dataclass
class WithScoreInt:
    writer: str
    n: int
    score: int = 0


@dataclasses.dataclass
class WithScoreStr:  # conflicts with WithScoreInt: `score` of another type
    writer: str
    n: int
    score: str = ""


@dataclasses.dataclass
class Everything:
    """A reader that reads every version: what it does not know it skips, what it lacks it
    defaults."""

    writer: str
    n: int


TYPES: dict[str, type[Any]] = {
    "base": Base,
    "region": WithRegion,
    "score-int": WithScoreInt,
    "score-str": WithScoreStr,
}


async def scenario(seed: int) -> dict[str, object]:
    async with SimCluster(bookies=3, seed=seed, client_options=OPTIONS, announce=False) as cluster:
        rng = cluster.rng
        acked: list[tuple[str, int, LogPosition]] = []
        refused: list[str] = []
        async with cluster.client("setup") as setup:
            await Log.open(setup, "typed", schema=Base)  # (version 1, before the race)

        async def write(name: str) -> None:
            await trio.sleep(rng.uniform(0, 0.5))
            async with cluster.client(name) as client:
                try:
                    log = await Log.open(
                        client, "typed", schema=TYPES[name], schema_compatibility=RULE
                    )
                    async with log.writer() as w:
                        for n in range(RECORDS):
                            pos = await w.append(TYPES[name](name, n))
                            acked.append((name, n, pos))
                            await trio.sleep(rng.uniform(0, 0.05))
                except IncompatibleSchemaError:
                    refused.append(name)
                except WalkitError:
                    pass  # fenced by the next writer: what it acknowledged is checked below

        with trio.fail_after(600):
            async with trio.open_nursery() as nursery:
                for name in TYPES:
                    nursery.start_soon(write, name)

        async with cluster.client("check") as client:
            log = await Log.open(client, "typed", schema=Everything)
            md = await log.metadata()
            records = [r async for r in log.reader(follow=False)]

    # One ordered list of versions, each compatible with those before it.
    assert [v.version for v in md.schemas] == list(range(1, len(md.schemas) + 1))
    for i, version in enumerate(md.schemas):
        check_compatible(version.schema, md.schemas[:i], Compatibility.BACKWARD_TRANSITIVE)
    by_schema = {v.schema.canonical(): v.version for v in md.schemas}
    registered = {name for name, tp in TYPES.items() if schema_of(tp).canonical() in by_schema}
    # Of the two conflicting types, exactly one got in; the other was refused.
    assert len({"score-int", "score-str"} & registered) == 1, (registered, refused)
    assert set(refused) == set(TYPES) - registered, (registered, refused)
    # Every acknowledged value reads back at its position, under its writer's version.
    at = {r.position: r for r in records}
    for name, n, pos in acked:
        record = at[pos]
        assert record.value == Everything(name, n)
        assert record.schema_version == by_schema[schema_of(TYPES[name]).canonical()]
    # Every ledger names the version of the one writer that filled it.
    versions_by_ledger: dict[int, set[int | None]] = {}
    for r in records:
        versions_by_ledger.setdefault(r.position.ledger_seq, set()).add(r.schema_version)
    listed = {lg.seq: lg.schema for lg in md.ledgers}
    for seq, seen in versions_by_ledger.items():
        assert seen == {listed[seq]}, (seq, seen, listed[seq])
    assert not {name for name, _, _ in acked} & set(refused)
    return {"versions": len(md.schemas), "acked": len(acked), "refused": refused}


@pytest.mark.parametrize("seed", SEEDS)
def test_writers_racing_to_register_versions_leave_one_ordered_list(seed: int) -> None:
    try:
        run(scenario, seed, seed=seed, announce=False)
    except BaseException as exc:
        exc.add_note(replay_hint(seed))
        raise
