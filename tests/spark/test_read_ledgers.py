"""Batch reads of raw ledgers, and how ``splitEntries`` and filters shape a log read."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
import trio

import walkit
from walkit._core.record_set import decode_record_set

_names = itertools.count()


async def collect(df: Any) -> list[Any]:
    return await trio.to_thread.run_sync(df.collect)


async def test_read_ledgers_by_id_with_state_and_custom_metadata(
    spark: Any, spark_metadata: str
) -> None:
    url = spark_metadata
    async with walkit.Client.connect(url) as client:
        closed = await client.create_ledger(
            3, 2, 2, password=b"pw", custom_metadata={"team": b"audit", "raw": b"\xff\x01"}
        )
        await closed.append_batch([b"c%d" % i for i in range(30)])
        await closed.close()
        opened = await client.create_ledger(3, 2, 2, password=b"pw")
        await opened.append_batch([b"o%d" % i for i in range(12)])
        await opened.append(b"o12")  # carries LAC 11 to the bookies
        ids = f"{closed.id},{opened.id}"

        def read() -> tuple[int, list[Any]]:
            df = (
                spark.read.format("walkit")
                .option("metadata", url)
                .option("password", "pw")
                .option("ledgers", ids)
                .option("splitEntries", "7")
                .load()
            )
            return df.rdd.getNumPartitions(), df.orderBy("ledger_id", "entry_id").collect()

        # Spark calls go to a thread: the client's metadata session keeps its heartbeat.
        partitions, rows = await trio.to_thread.run_sync(read)
        assert partitions >= 5  # 30 closed entries / 7, and the open ones
        # The open ledger's writer was not fenced by the read.
        await opened.append(b"o13")
        lac = opened.last_add_confirmed
        await opened.close()
    by_ledger: dict[int, list[Any]] = {}
    for row in rows:
        by_ledger.setdefault(row.ledger_id, []).append(row)
    assert [bytes(r.payload) for r in by_ledger[closed.id]] == [b"c%d" % i for i in range(30)]
    assert [r.entry_id for r in by_ledger[closed.id]] == list(range(30))
    assert {r.state for r in by_ledger[closed.id]} == {"CLOSED"}
    assert dict(by_ledger[closed.id][0].custom_metadata) == {"team": "audit", "raw": "\\xff\x01"}
    # An open ledger: up to the LAC a reader sees (every row it gives was acknowledged).
    open_rows = by_ledger[opened.id]
    assert 12 <= len(open_rows) <= 13 and lac == 13
    assert [bytes(r.payload) for r in open_rows] == [b"o%d" % i for i in range(len(open_rows))]
    assert {r.state for r in open_rows} == {"OPEN"}


async def test_read_all_ledgers_includes_a_log_and_refuses_a_wrong_password(
    spark: Any, spark_metadata: str
) -> None:
    url, name = spark_metadata, f"all-{next(_names)}"
    async with walkit.Client.connect(url) as client, walkit.Log.open(client, name) as log:
        async with log.writer() as w:
            positions = await w.append_batch([b"r%d" % i for i in range(5)])
        md = await log.metadata()
        secret = await client.create_ledger(3, 2, 2, password=b"secret")
        await secret.close()
    ledger_id = md.ledgers[0].ledger_id
    reader = spark.read.format("walkit").option("metadata", url).option("ledgers", "all")
    # A ledger with another password: "all" without it names the ledger.
    with pytest.raises(
        Exception, match=r"wrong password for the option .ledgers. \(ledger "
    ) as info:
        await collect(reader.load())
    assert "option 'password'" in str(info.value)
    rows = await collect(
        spark.read.format("walkit").option("metadata", url).option("ledgers", str(ledger_id)).load()
    )
    # Rows are entries, as stored: the log writer packed the batch into one record set.
    assert {p.entry_id for p in positions} == {0} and [p.slot for p in positions] == [0, 1, 2, 3, 4]
    assert [r.entry_id for r in rows] == [0]
    assert decode_record_set(bytes(rows[0].payload)).records == [b"r%d" % i for i in range(5)]
    custom = dict(rows[0].custom_metadata)
    assert custom["walkit.log"] == name and custom["walkit.format"] == "recordset-1"


async def test_split_entries_and_pushed_filters(spark: Any, spark_metadata: str) -> None:
    url, name = spark_metadata, f"split-{next(_names)}"
    async with walkit.Client.connect(url) as client:
        # batch_bytes=1: every record gets an entry of its own (a record set of one).
        log = await walkit.Log.open(client, name, roll_entries=100, batch_bytes=1)
        async with log.writer() as w:
            for start in range(0, 250, 50):
                await w.append_batch([b"%d" % i for i in range(start, start + 50)])

    def reader() -> Any:  # a new one each time: .option() changes a DataFrameReader in place
        return spark.read.format("walkit").option("metadata", url)

    whole = reader().option("splitEntries", "40").load(name)
    assert whole.rdd.getNumPartitions() == 7  # 250 entries / 40, ledgers split into ranges
    rows = await collect(whole)
    assert sorted(int(bytes(r.payload)) for r in rows) == list(range(250))
    assert len(rows) == 250
    seqs = sorted({r.ledger_seq for r in rows})
    assert len(seqs) == 3
    # Filters on ledger_seq and position reach the source: fewer partitions, same answer.
    one = reader().load(name).where(f"ledger_seq = {seqs[1]}")
    assert one.rdd.getNumPartitions() == 1
    assert await trio.to_thread.run_sync(one.count) == 100
    pos = f"{seqs[2]}:7:0"
    old = f"{seqs[2]}:8"  # the older two-part form: no row's position
    where = f"position = '{pos}' or position = '9:99999:0' or position = '{old}'"
    picked = await collect(reader().load(name).where(where))
    assert [(r.position, bytes(r.payload)) for r in picked] == [(pos, b"207")]
    ranged = (
        reader()
        .option("startingPosition", f"{seqs[0]}:95")
        .option("endingPosition", f"{seqs[1]}:3:0")
    )
    got = await collect(ranged.load(name).where(f"ledger_seq >= {seqs[0]}"))
    assert sorted(int(bytes(r.payload)) for r in got) == list(range(95, 103))
