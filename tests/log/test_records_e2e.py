"""Records with a key, headers and a timestamp, end to end: appended alone, in batches and by
idempotent producers, read back by log readers; the writer's clock as the default timestamp;
bad input refused with the writer still usable; ``Log.position_at`` over several ledgers of
real bookie processes, checked against a scan."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from tests._cluster import process_cluster
from tests.client.conftest import cluster, connect
from walkit import Log, LogPosition, LogRecord, Record
from walkit.errors import InvalidArgumentError

T0 = 1_700_000_000_000


async def read_all(log: Log, start: LogPosition | str = "earliest") -> list[LogRecord]:
    return [rec async for rec in log.reader(start, follow=False)]


class FakeClock:
    """A wall clock the test moves (seconds since the epoch)."""

    def __init__(self, ms: int = T0) -> None:
        self.ms = ms

    def __call__(self) -> float:
        return self.ms / 1000


async def test_keys_headers_and_timestamps_read_back(memory_url: str, tmp_path: Path) -> None:
    clock = FakeClock()
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=clock) as client,
        Log.open(client, "stream") as log,
    ):
        async with log.writer() as w:
            plain = await w.append(b"plain")
            keyed = await w.append(b"keyed", key=b"user-7", headers={"kind": b"order"})
            dated = await w.append(b"dated", timestamp=T0 - 60_000, headers=[("a", b"1")])
            clock.ms += 5
            batch = await w.append_batch(
                [
                    b"b0",
                    Record(b"b1", key=b"", headers=[("h", b"x"), ("h", b"y")]),
                    Record(b"b2", timestamp=42),
                ]
            )
            tagged = await w.append(b"tagged", key=b"k", producer_id="p", sequence=0)
            tagged_batch = await w.append_batch(
                [Record(b"t1", key=b"k1"), b"t2"], producer_id="p", sequence=1
            )
        got = {rec.position: rec for rec in await read_all(log)}
    assert got[plain].timestamp == T0 and got[plain].key is None and got[plain].headers is None
    assert got[keyed].key == b"user-7" and got[keyed].headers == (("kind", b"order"),)
    assert got[keyed].timestamp == T0  # the writer's clock when it sent the entry
    assert got[dated].timestamp == T0 - 60_000 and got[dated].key is None
    b0, b1, b2 = (got[p] for p in batch)
    assert (b0.key, b0.headers, b0.timestamp) == (None, None, T0 + 5)
    assert (b1.key, b1.headers, b1.timestamp) == (b"", (("h", b"x"), ("h", b"y")), T0 + 5)
    assert (b2.key, b2.timestamp) == (None, 42)
    assert got[tagged].key == b"k" and got[tagged].producer is not None
    assert got[tagged_batch[0]].key == b"k1" and got[tagged_batch[1]].key is None
    assert got[tagged_batch[1]].producer is not None
    assert got[keyed] == LogRecord(
        keyed, b"keyed", key=b"user-7", headers=(("kind", b"order"),), timestamp=T0
    )
    assert "key=b'user-7'" in repr(got[keyed])


async def test_without_a_wall_clock_records_have_no_timestamp(
    memory_url: str, tmp_path: Path
) -> None:
    """A client connected with ``wall_clock=None`` stamps nothing: its entries are record sets
    of version 1, as before timestamps; a timestamp given to the append is kept."""
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=None) as client,
        Log.open(client, "unstamped") as log,
    ):
        async with log.writer() as w:
            plain = await w.append(b"plain")
            given = await w.append(b"given", timestamp=7)
        records = await read_all(log)
        assert [r.timestamp for r in records] == [None, 7]
        assert [r.position for r in records] == [plain, given]
        assert await log.position_at(0) == given  # the untimed record counts as older
        # The writer's close recorded the range of its ledger's timestamps.
        ledger = (await log.metadata()).ledgers[0]
        md = await client.ledger_metadata(ledger.ledger_id)
        assert md.custom_metadata["walkit.timestamps"] == b"7,7"


async def test_bad_records_are_refused_and_the_writer_goes_on(
    memory_url: str, tmp_path: Path
) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=FakeClock(), max_frame_size=64 * 1024) as client,
        Log.open(client, "refused") as log,
    ):
        async with log.writer() as w:
            for bad in (
                {"key": "text"},
                {"timestamp": -1},
                {"timestamp": 1.5},
                {"headers": [("a", "not bytes")]},
                {"headers": b"a=1"},
            ):
                with pytest.raises(InvalidArgumentError):
                    await w.append(b"x", **bad)
            with pytest.raises(InvalidArgumentError):
                await w.append_batch([b"ok", Record(b"x"), "text"])  # type: ignore[list-item]
            # The key and headers count toward the size limit.
            room = 64 * 1024 - 2048
            with pytest.raises(InvalidArgumentError, match="with its key and headers"):
                await w.append(b"x" * (room // 2), key=b"k" * (room // 2 + 1024))
            ok = await w.append(b"ok", key=b"k")
        assert [(r.position, r.payload) for r in await read_all(log)] == [(ok, b"ok")]


async def test_a_clock_that_steps_back_never_stamps_an_entry_earlier(
    memory_url: str, tmp_path: Path
) -> None:
    clock = FakeClock()
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=clock) as client,
        Log.open(client, "monotone") as log,
    ):
        async with log.writer() as w:
            await w.append(b"a")
            clock.ms -= 10_000  # NTP stepped the clock back
            await w.append(b"b")
            clock.ms += 20_000
            await w.append(b"c")
        assert [r.timestamp for r in await read_all(log)] == [T0, T0, T0 + 10_000]


# --- position_at over real bookie processes -------------------------------------------------


@pytest.fixture(scope="module")
def processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("position-at")
    url = f"sqlite:///{root / 'metadata.db'}"
    with process_cluster(url, root, 3):
        yield url


def first_at(records: list[LogRecord], at: int) -> LogPosition | None:
    """What a scan finds: the first record whose timestamp is ``at`` or later."""
    for record in records:
        if record.timestamp is not None and record.timestamp >= at:
            return record.position
    return None


@pytest.mark.processes
async def test_position_at_over_several_ledgers(processes: str) -> None:
    clock = FakeClock()
    async with (
        connect(processes, wall_clock=clock) as client,
        Log.open(client, "by-time", roll_entries=7) as log,
    ):
        assert await log.position_at(T0) == LogPosition(1, 0)  # empty: where the first goes
        async with log.writer() as w:
            for i in range(60):  # 10 ms apart, some entries with several records
                clock.ms += 10
                if i % 5 == 0:
                    await w.append_batch([b"%d-a" % i, b"%d-b" % i])
                else:
                    await w.append(b"%d" % i)
            records = await read_all(log)
            ledgers = (await log.metadata()).ledgers
            assert len(ledgers) >= 8  # several closed ledgers, the last one open
            for at in itertools.chain(
                (0, T0, T0 + 1, T0 + 10, T0 + 11, T0 + 595, T0 + 600),
                (r.timestamp for r in records if r.timestamp is not None),
            ):
                expected = first_at(records, at)
                assert expected is not None
                found = await log.position_at(at)
                assert found == expected, at
                got = [r async for r in log.reader(found, follow=False)]
                assert got[0].position == expected
            # Later than every record: the log's end, where the next record goes.
            end = await log.position_at(T0 + 10_000)
            clock.ms += 10_000
            later = await w.append(b"later")
        with trio.fail_after(30):
            async for record in log.reader(end):
                assert record.position == later
                break
        # Truncated records are not found: the truncation point instead.
        async with log.writer() as w:
            await w.truncate(records[20].position)
        assert await log.position_at(0) == records[20].position
        assert await log.position_at(records[30].timestamp or 0) == first_at(
            records, records[30].timestamp or 0
        )
