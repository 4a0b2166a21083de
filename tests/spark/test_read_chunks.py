"""An executor's reading loop (an event loop on a thread of its own, feeding Spark's thread):
chunks come in order, a consumer that stops early stops the loop, and a deleted ledger is
reported or skipped."""

from __future__ import annotations

import threading
from collections.abc import Generator

import pytest
import trio

from tests.spark._spark import require_spark

require_spark(java=False)  # before importing walkit.spark

import walkit  # noqa: E402
from walkit.spark._connect import Connection  # noqa: E402
from walkit.spark._read_io import read_chunks  # noqa: E402
from walkit.spark._read_plan import Range  # noqa: E402


def reading_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "walkit-spark-read"]


async def test_chunks_in_order_early_stop_and_a_deleted_ledger(spark_metadata: str) -> None:
    url = spark_metadata
    async with walkit.Client.connect(url) as client:
        lw = await client.create_ledger(3, 2, 2, password=b"pw")
        await lw.append_batch([b"%d" % i for i in range(100)])
        await lw.close()
        gone = await client.create_ledger(3, 2, 2, password=b"pw")
        await gone.append(b"x")
        await gone.close()
        await client.delete_ledger(gone.id, password=b"pw")
    conn = Connection(url, b"pw")
    whole = Range(1, lw.id, 3, 99)

    def read_all() -> list[int]:
        return [
            e.entry_id
            for chunk in read_chunks(conn, [whole], chunk_entries=10)
            for e in chunk.entries
        ]

    assert await trio.to_thread.run_sync(read_all) == list(range(3, 100))

    def first_then_stop() -> list[int]:
        chunks = read_chunks(conn, [whole, whole, whole], chunk_entries=5)
        assert isinstance(chunks, Generator)  # closing it mid-way releases the client
        first = next(chunks)
        chunks.close()
        return [e.entry_id for e in first.entries]

    assert await trio.to_thread.run_sync(first_then_stop) == [3, 4, 5, 6, 7]
    assert reading_threads() == []  # the loop ended with the consumer

    missing = Range(2, gone.id, 0, 0)
    with pytest.raises(walkit.NoSuchLedgerError):
        await trio.to_thread.run_sync(lambda: list(read_chunks(conn, [missing, whole])))
    skipped: list[Range] = []
    got = await trio.to_thread.run_sync(
        lambda: [c.range for c in read_chunks(conn, [missing, whole], on_missing=skipped.append)]
    )
    assert skipped == [missing] and got == [whole]
    assert reading_threads() == []
