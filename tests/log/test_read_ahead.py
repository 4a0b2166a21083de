"""Read-ahead in the log reader: ranges fetched ahead of the one being handed out, across
rolls, with a writer appending meanwhile; every acknowledged record read once, in order."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.client.conftest import cluster, connect
from walkit import Log
from walkit.errors import ConfigurationError


async def test_ranges_are_read_ahead_and_records_come_once_in_order(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "ahead", roll_entries=30, read_batch=4, read_ahead=3)
        async with log.writer() as w:
            acked = [await w.append(b"a%03d" % i) for i in range(70)]
            acked += await w.append_batch([b"b%03d" % i for i in range(50)])
            reader = log.reader(end=w.end_position)
            first = await reader.next()
            assert first is not None and first.position == acked[0]
            # The first range (4 entries) is being handed out; the next three are in flight
            # or read already, each a range of 4 entries right after the previous one.
            ahead = reader._ahead  # (white box: nothing public shows reads in flight)
            assert [(r.first, r.last) for r in ahead] == [(4, 7), (8, 11), (12, 15)]
            # Appends while the reader is in the middle of a ledger, and rolls.
            more = [await w.append(b"c%03d" % i) for i in range(20)]
            end = w.end_position
        got = [first.position]
        async for rec in log.reader(first.position.next(), end=end):
            got.append(rec.position)
        assert got == acked + more
        reader_rest = [rec.position async for rec in reader]
        assert [first.position, *reader_rest] == acked


async def test_no_read_ahead_when_switched_off(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "still", read_batch=4, read_ahead=0)
        async with log.writer() as w:
            acked = [await w.append(b"s%02d" % i) for i in range(20)]
            reader = log.reader(end=w.end_position)
            with trio.fail_after(30):
                got = [rec.position async for rec in reader]
            assert got == acked
            assert not reader._ahead
        with pytest.raises(ConfigurationError, match="read_ahead must be an int >= 0"):
            await Log.open(client, "bad", read_ahead=-1)
