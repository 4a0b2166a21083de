"""Batch reads of a log through Spark, against real bookie processes: the rows equal what a
plain ``log.reader()`` reads (across rolls and a writer takeover), the writer is never fenced,
``splitEntries`` splits, positions and filters select."""

from __future__ import annotations

import itertools
from typing import Any

import trio

import walkit

_names = itertools.count()


def unique(prefix: str) -> str:
    return f"{prefix}-{next(_names)}"


async def plain_read(
    url: str, name: str, start: str = "earliest", end: str | None = None
) -> list[tuple[str, bytes]]:
    async with walkit.Client.connect(url) as client, walkit.Log.open(client, name) as log:
        return [
            (str(rec.position), rec.payload)
            async for rec in log.reader(start, end=end, follow=False)
        ]


def load(spark: Any, url: str, name: str, **options: Any) -> Any:
    reader = spark.read.format("walkit").option("metadata", url)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(name)


def quoted(texts: list[str]) -> str:
    return ", ".join(f"'{t}'" for t in texts)


def rows_of(frame: Any) -> list[tuple[str, bytes]]:
    rows = frame.orderBy("ledger_seq", "entry_id", "slot").collect()
    for row in rows:
        pos = walkit.LogPosition.parse(row.position)
        assert (pos.ledger_seq, pos.entry_id, pos.slot) == (row.ledger_seq, row.entry_id, row.slot)
    return [(r.position, bytes(r.payload)) for r in rows]


async def test_batch_read_equals_plain_reader_across_rolls_and_takeover(
    spark: Any, spark_metadata: str
) -> None:
    url, name = spark_metadata, unique("orders")
    async with walkit.Client.connect(url) as client:
        # Small record sets: a batch of 90 records of 4 bytes fills several entries.
        log = await walkit.Log.open(client, name, roll_entries=40, batch_bytes=200)
        first = await log.writer()
        for i in range(100):
            await first.append(b"a%03d" % i)
        # A second writer takes the log over: the first is fenced, its ledger recovered.
        async with log.writer() as second:
            await second.append_batch([b"b%03d" % i for i in range(90)])
        # A ledger in the format of before record sets (one record per entry) joins the log.
        old = await log.stage_ledger("old-format", 0)
        await old.append_batch([b"c%03d" % i for i in range(7)])
        await old.close()
        await log.link_ledgers([old.id], job="old-format")
        async with log.writer() as third:
            await third.append_batch([b"d%03d" % i for i in range(60)])
            expected = await plain_read(url, name)
            # Every Spark call runs on a thread (even building the DataFrame asks a Python
            # worker for the schema): the test's client keeps its metadata session alive.
            rows = await trio.to_thread.run_sync(
                lambda: rows_of(load(spark, url, name, splitEntries=3))
            )
            # The read did not fence the writer: it keeps appending.
            await third.append_batch([b"after the read"] * 3)
        with trio.fail_after(10):
            try:
                await first.append(b"x")
            except walkit.WriterFencedError:
                pass
            else:
                raise AssertionError("the old writer was not fenced")
    assert len(expected) == 257
    assert rows == expected
    positions = [walkit.LogPosition.parse(p) for p, _ in rows]
    assert len({p.ledger_seq for p in positions}) >= 4, positions  # rolled, and taken over
    assert max(p.slot for p in positions) >= 10  # several records per entry
    old_rows = [p for p, payload in rows if payload.startswith(b"c")]
    assert [p.split(":")[1:] for p in old_rows] == [[str(i), "0"] for i in range(7)]

    # A start and an end in the middle of entries: the same records as the plain reader.
    middles = [p for p, _ in expected if p.endswith(":2") or p.endswith(":5")]
    start, end = middles[0], middles[-1]
    assert start.endswith(":2") and end.endswith(":5")
    cut = await plain_read(url, name, start, end)
    assert len(cut) > 100 and cut[0][0] == start and cut[-1][0] != end
    got = await trio.to_thread.run_sync(
        lambda: rows_of(
            load(spark, url, name, startingPosition=start, endingPosition=end, splitEntries=2)
        )
    )
    assert got == cut

    # Pushed-down position filters return exactly the rows that hold those strings; the
    # older SEQ:ENTRY form names no row (a row's position always has a slot).
    picked = [expected[1][0], expected[150][0], expected[200][0], expected[-1][0]]
    seq, entry, _slot = expected[150][0].split(":")
    asked = [*picked, f"{seq}:{entry}", "1:999999:0", "not a position"]
    filtered = await trio.to_thread.run_sync(
        lambda: rows_of(load(spark, url, name).where("position IN (" + quoted(asked) + ")"))
    )
    assert [p for p, _ in filtered] == picked
    one = await trio.to_thread.run_sync(
        lambda: rows_of(load(spark, url, name).where(f"position = '{picked[1]}'"))
    )
    assert one == [expected[150]]
