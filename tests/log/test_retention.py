"""Retention, deletion and stalled-ledger options with in-process bookies: option validation,
a live writer whose old ledger a reader recovered (not a takeover), and a writer whose old
ledger another writer recovered (a takeover)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.client.conftest import cluster, connect
from walkit import Log, LogPosition
from walkit.errors import ConfigurationError, NoSuchLogError, WriterFencedError


@pytest.mark.parametrize(
    "options",
    [
        {"retain_records": -1},
        {"retain_records": 1.5},
        {"retain_bytes": True},
        {"retain_age": -3},
        {"retain_age": float("inf")},
        {"retain_age": "1h"},
        {"stalled_ledger_timeout": 0},
        {"stalled_ledger_timeout": -1.0},
        {"orphan_gc_grace": float("nan")},
    ],
)
async def test_bad_options_are_configuration_errors(
    memory_url: str, options: dict[str, Any]
) -> None:
    async with connect(memory_url) as client:
        with pytest.raises(ConfigurationError, match=next(iter(options))):
            await Log.open(client, "x", **options)


async def test_age_retention_and_gc_need_a_wall_clock(memory_url: str) -> None:
    """Only a client that turned stamping off (``wall_clock=None``) is refused."""
    async with connect(memory_url, wall_clock=None) as client:
        with pytest.raises(ConfigurationError, match="wall_clock"):
            await Log.open(client, "x", retain_age=60)
        log = await Log.open(client, "x")
        with pytest.raises(ConfigurationError, match="wall_clock"):
            await log.apply_retention(retain_age=60)
        with pytest.raises(ConfigurationError, match="wall_clock"):
            await Log.collect_orphans(client, grace=0)
        with pytest.raises(ConfigurationError):
            await log.apply_retention(retain_records=-2)
        with pytest.raises(NoSuchLogError):
            await Log.delete(client, "never-was")


async def test_a_reader_recovering_the_old_ledger_is_not_a_takeover(
    memory_url: str, tmp_path: Path
) -> None:
    """The writer's background close of its old ledger finds it recovered by someone: a
    reader (the log still lists the writer's ledger last, nothing acknowledged was cut) lets
    the writer go on; another writer's takeover fences it."""
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, wall_clock=time.time) as client,
    ):
        log = await Log.open(client, "live")
        async with log.writer() as w:
            first = await w.append(b"a")
            # A ledger written by this writer and recovered by a reader before the writer's
            # close (built by hand: the roll's background close is too quick to race).
            old = await log._create_ledger("data")
            await old.append_batch([b"x", b"y", b"z"])
            reader = await client.open_ledger(old.id, password=log.options.password, recovery=True)
            assert reader.last_add_confirmed == 2
            await w._roller.close_old(old, anyio.Event())
            assert w._state.error is None
            second = await w.append(b"b")  # still the writer
            assert second > first
        assert [r.payload async for r in log.reader(follow=False)] == [b"a", b"b"]

        async with log.writer() as w:
            old = await log._create_ledger("data")
            await old.append(b"x")
            async with log.writer() as thief:  # a takeover: w no longer owns the log
                await client.open_ledger(old.id, password=log.options.password, recovery=True)
                await w._roller.close_old(old, anyio.Event())
                with pytest.raises(WriterFencedError):
                    await w.append(b"lost")
                pos = await thief.append(b"c")
            await w.close()  # quiet: the append raised the fence already
        assert pos.ledger_seq > LogPosition.EARLIEST.ledger_seq
        assert [r.payload async for r in log.reader(follow=False)] == [b"a", b"b", b"c"]


async def test_an_idle_writer_of_a_deleted_log_gets_no_such_log(
    memory_url: str, tmp_path: Path
) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "idle")
        w = await log.writer()
        await w.append(b"a")
        await Log.delete(client, "idle")
        await w.close()  # quiet: closing a broken writer succeeds (nothing handed over failed)
        with pytest.raises(NoSuchLogError):  # but it says why it is broken
            await w.append(b"x")
        w = await (await Log.open(client, "idle")).writer()  # a new log of that name
        await w.append(b"b")
        await Log.delete(client, "idle")
        with pytest.raises(NoSuchLogError):
            await w.append(b"c")
        await w.close()  # quiet: the append said so
