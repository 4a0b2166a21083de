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


async def plain_read(url: str, name: str) -> list[tuple[str, bytes]]:
    async with walkit.Client.connect(url) as client, walkit.Log.open(client, name) as log:
        return [(str(rec.position), rec.payload) async for rec in log.reader(follow=False)]


def load(spark: Any, url: str, name: str, **options: Any) -> Any:
    reader = spark.read.format("walkit").option("metadata", url)
    for key, value in options.items():
        reader = reader.option(key, str(value))
    return reader.load(name)


async def test_batch_read_equals_plain_reader_across_rolls_and_takeover(
    spark: Any, spark_metadata: str
) -> None:
    url, name = spark_metadata, unique("orders")
    async with walkit.Client.connect(url) as client:
        log = await walkit.Log.open(client, name, roll_entries=40)
        first = await log.writer()
        for i in range(100):
            await first.append(b"a%03d" % i)
        # A second writer takes the log over: the first is fenced, its ledger recovered.
        async with log.writer() as second:
            await second.append_batch([b"b%03d" % i for i in range(90)])
            expected = await plain_read(url, name)
            # Every Spark call runs on a thread (even building the DataFrame asks a Python
            # worker for the schema): the test's client keeps its metadata session alive.
            rows = await trio.to_thread.run_sync(
                lambda: (
                    load(spark, url, name, splitEntries=25)
                    .orderBy("ledger_seq", "entry_id")
                    .collect()
                )
            )
            # The read did not fence the writer: it keeps appending.
            await second.append_batch([b"after the read"] * 3)
        with trio.fail_after(10):
            try:
                await first.append(b"x")
            except walkit.WriterFencedError:
                pass
            else:
                raise AssertionError("the old writer was not fenced")
    assert len(expected) == 190
    assert [(r.position, bytes(r.payload)) for r in rows] == expected
    seqs = {r.ledger_seq for r in rows}
    assert len(seqs) >= 4, seqs  # rolled, and taken over
    for row in rows:
        pos = walkit.LogPosition.parse(row.position)
        assert (row.log, pos.ledger_seq, pos.entry_id) == (name, row.ledger_seq, row.entry_id)
