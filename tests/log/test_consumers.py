"""Durable named consumers with in-process bookies: commits kept across restarts, retention
held back by what a consumer has not committed, the backlog quota, lags, deletion, and bad
input at every edge."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio
from prometheus_client import CollectorRegistry

from tests._log_events import log_event
from tests.client.conftest import cluster, connect
from walkit import Client, Log, LogPosition, LogRecord
from walkit.errors import (
    ConfigurationError,
    ConsumerBackloggedError,
    InvalidArgumentError,
    InvalidMetadataError,
    LogTruncatedError,
    NoSuchConsumerError,
    NoSuchLogError,
)
from walkit.log import log_path
from walkit.metadata import export_metadata, import_metadata, open_metadata_store


@asynccontextmanager
async def bookies_and_client(url: str, root: Path, **options: object) -> AsyncIterator[Client]:
    async with cluster(url, root, 3), connect(url, wall_clock=time.time, **options) as client:
        yield client


async def take(consumer: object, n: int) -> list[LogRecord]:
    out = []
    async for record in consumer:  # type: ignore[attr-defined]
        out.append(record)
        if len(out) == n:
            break
    return out


async def fill(log: Log, n: int, prefix: bytes = b"r") -> list[LogPosition]:
    async with log.writer() as w:
        return [await w.append(prefix + b"%d" % i) for i in range(n)]


async def test_a_restarted_consumer_starts_after_its_commit(
    memory_url: str, tmp_path: Path
) -> None:
    async with bookies_and_client(memory_url, tmp_path) as client:
        log = await Log.open(client, "orders", roll_entries=4)
        acked = await fill(log, 10)
        first = log.consumer("indexer", follow=False)
        got = await take(first, 4)
        assert [r.position for r in got] == acked[:4]
        await first.commit(got[2].position)  # the fourth is read, not committed
        assert first.committed == acked[2].next()
        again = log.consumer("indexer", follow=False)
        rest = [r async for r in again]
        assert [r.position for r in rest] == acked[3:]
        # Commits only move forward: an earlier position changes nothing.
        await again.commit(acked[9])
        await again.commit(acked[1])
        assert (await log.consumers())[0].position == acked[9].next()
        assert [r async for r in log.consumer("indexer", follow=False)] == []
        # A consumer that exists ignores ``start``; a new one starts there.
        assert [r async for r in log.consumer("indexer", start=acked[0], follow=False)] == []
        late = log.consumer("late", start=acked[7], follow=False)
        assert [r.position async for r in late] == acked[7:]
        latest = log.consumer("tail", start=LogPosition.LATEST)
        assert await latest.register() == LogPosition(acked[9].ledger_seq, acked[9].entry_id + 1)


async def test_consumers_hold_retention_back(memory_url: str, tmp_path: Path) -> None:
    async with bookies_and_client(memory_url, tmp_path) as client:
        log = await Log.open(client, "held", retain_records=0)
        consumer = log.consumer("slow", follow=False)
        await consumer.register()
        # Ledgers of 3, from a handle without retention (its writer would run it meanwhile).
        acked = await fill(await Log.open(client, "held", roll_entries=3), 12)
        result = await log.apply_retention()
        assert result.truncated is None
        assert [r.position async for r in log.reader(follow=False)] == acked
        got = await take(consumer, 7)
        await consumer.commit(got[-1].position)  # into the third ledger
        result = await log.apply_retention()
        assert result.truncated == LogPosition(acked[6].ledger_seq, 0)
        assert [r.position async for r in consumer] == acked[7:]
        # Without the consumer, the same limits drop everything but the last ledger.
        await log.delete_consumer("slow")
        result = await log.apply_retention()
        assert result.truncated is not None
        assert result.truncated.ledger_seq == (await log.metadata()).ledgers[-1].seq


async def test_a_consumer_over_the_quota_is_released_and_told(
    memory_url: str, tmp_path: Path
) -> None:
    registry = CollectorRegistry()
    async with bookies_and_client(memory_url, tmp_path, metrics_registry=registry) as client:
        log = await Log.open(client, "quota", retain_records=0, max_backlog_records=4)
        stuck = log.consumer("stuck", follow=False)
        await stuck.register()
        acked = await fill(await Log.open(client, "quota", roll_entries=3), 12)
        with log_event("walkit.log", "log_consumer_backlogged") as seen:
            result = await log.apply_retention()
            await seen.wait()
        assert result.backlogged == ("stuck",)
        assert result.truncated is not None and result.truncated > acked[0]
        released = registry.get_sample_value(
            "walkit_log_consumer_released_total", {"log": "quota", "consumer": "stuck"}
        )
        assert released == 1
        with pytest.raises(ConsumerBackloggedError) as caught:
            await stuck.next()
        assert isinstance(caught.value, LogTruncatedError)
        assert caught.value.truncated == result.truncated
        assert caught.value.position == LogPosition.EARLIEST
        info = (await log.consumers())[0]
        assert info.behind and info.position == LogPosition.EARLIEST
        assert registry.get_sample_value(
            "walkit_log_consumer_behind_total", {"log": "quota", "consumer": "stuck"}
        )
        assert await stuck.skip_lost() == result.truncated
        kept = [r.position async for r in log.reader(follow=False)]
        assert [r.position async for r in stuck] == kept
        assert not (await log.consumers())[0].behind


async def test_lag_in_records_and_bytes(memory_url: str, tmp_path: Path) -> None:
    async with bookies_and_client(memory_url, tmp_path) as client:
        log = await Log.open(client, "lag", roll_entries=5)
        async with log.writer() as w:
            acked = await w.append_batch([b"x" * 10] * 7)  # record sets: one entry
            acked += [await w.append(b"y" * 20) for _ in range(8)]
            fresh = log.consumer("fresh")
            await fresh.register()
            mid = log.consumer("mid", follow=False)
            got = await take(mid, 3)
            await mid.commit(got[-1].position)  # inside the first entry (a record set)
            # Once a tailing reader has every record, the bookies know the open ledger's LAC.
            with trio.fail_after(30):
                await take(log.reader(), 15)
            infos = {i.name: i for i in await log.consumers()}
        everything = [r async for r in log.reader(follow=False)]
        assert len(everything) == 15
        full = infos["fresh"].lag
        assert (full.records, full.exact) == (15, True)
        part = infos["mid"].lag
        assert (part.records, part.exact) == (12, True)
        # Its first entry is partly committed: its bytes count pro rata.
        assert 0 < full.size - part.size < len(everything[0].payload) * 7
        assert full.entries == infos["mid"].lag.entries
        lmds = [await client.ledger_metadata(lg.ledger_id) for lg in (await log.metadata()).ledgers]
        assert full.size == sum(lmd.length for lmd in lmds)


async def test_delete_a_consumer_and_a_log_with_consumers(
    metadata_url: str, tmp_path: Path
) -> None:
    """On every metadata driver: consumers are children of the log's node, exported with it,
    deleted with it."""
    async with bookies_and_client(metadata_url, tmp_path) as client:
        log = await Log.open(client, "gone")
        acked = await fill(log, 3)
        keeper = log.consumer("keeper", follow=False)
        await keeper.commit(acked[0])
        await log.consumer("other").register()
        dump = await export_metadata(client.metadata_store)
        paths = dict(dump.dump.nodes)
        node = json.loads(paths[f"{log_path('gone')}/consumers/keeper"])
        assert node["position"] == str(acked[0].next()) and node["format"] == 1
        # ... and come back with an import.
        copy = tmp_path / "copy.db"
        async with await open_metadata_store(f"sqlite:///{copy}") as destination:
            await import_metadata(destination, dump.dump)
            got = await destination.get(f"{log_path('gone')}/consumers/keeper")
            assert json.loads(got.value) == node
        await log.delete_consumer("other")
        with pytest.raises(NoSuchConsumerError):
            await log.delete_consumer("other")
        assert [i.name for i in await log.consumers()] == ["keeper"]
        await Log.delete(client, "gone")
        with pytest.raises(NoSuchLogError):
            await keeper.commit(acked[1])
        with pytest.raises(NoSuchLogError):
            await log.consumer("late").register()
        again = await Log.open(client, "gone")
        assert await again.consumers() == []


async def test_bad_input(memory_url: str, tmp_path: Path) -> None:
    async with bookies_and_client(memory_url, tmp_path) as client:
        log = await Log.open(client, "bad")
        acked = await fill(log, 2)
        for name in ("", "a/b", "..", ".hidden", 7, "x" * 201):
            with pytest.raises(InvalidArgumentError):
                log.consumer(name)  # type: ignore[arg-type]
        consumer = log.consumer("c", follow=False)
        for pos in (LogPosition.EARLIEST, LogPosition.LATEST, "nonsense", LogPosition(99, 0)):
            with pytest.raises(InvalidArgumentError):
                await consumer.commit(pos)
        with pytest.raises(InvalidArgumentError):
            await log.consumer("future", start=LogPosition(99, 0)).register()
        with pytest.raises(ConfigurationError, match="max_backlog_bytes"):
            await Log.open(client, "bad", max_backlog_bytes=-1)
        # A malformed node: listed with its error, refused where it is used.
        path = f"{log_path('bad')}/consumers/broken"
        await client.metadata_store.create(path, b"{not json")
        infos = {i.name: i for i in await log.consumers()}
        assert infos["broken"].error and infos["broken"].position is None
        assert infos["c"].error is None
        with pytest.raises(InvalidMetadataError):
            await log.consumer("broken").register()
        # Retention refuses to guess what a consumer it cannot read still needs.
        with pytest.raises(InvalidMetadataError):
            await log.apply_retention(retain_records=0)
        assert [r.position async for r in log.reader(follow=False)] == acked
        with pytest.raises(NoSuchConsumerError):
            await log.delete_consumer("never")


async def test_consumer_metrics(memory_url: str, tmp_path: Path) -> None:
    registry = CollectorRegistry()
    async with bookies_and_client(memory_url, tmp_path, metrics_registry=registry) as client:
        log = await Log.open(client, "m")
        await fill(log, 10)
        consumer = log.consumer("c", follow=False)
        got = await take(consumer, 6)
        await consumer.commit(got[1].position)
        labels = {"log": "m", "consumer": "c"}
        assert registry.get_sample_value("walkit_log_consumer_commit_lag_records", labels) == 4
        assert registry.get_sample_value("walkit_log_reader_lag_records", labels) == 4
        await consumer.commit(got[5].position)
        assert registry.get_sample_value("walkit_log_consumer_commit_lag_records", labels) == 0
        with trio.fail_after(10):
            assert len([r async for r in consumer]) == 4
