"""One way to close every async handle: ``async with``, or ``await handle.aclose()``
(idempotent); the old synchronous ``Log.close()`` still works, with a DeprecationWarning."""

from __future__ import annotations

from pathlib import Path

import pytest

import walkit
from tests.client.conftest import cluster, connect
from walkit import Log


async def test_every_handle_closes_with_aclose(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "handles")
        writer = await log.writer()
        first = await writer.append(b"a")
        await writer.aclose()
        await writer.aclose()  # idempotent
        assert writer.is_closed

        reader = log.reader(first)
        assert (await reader.next(timeout=5)) is not None
        await reader.aclose()
        assert [r async for r in reader] == []  # a closed reader yields nothing more
        async with log.reader(first, follow=False) as again:
            assert [r.payload async for r in again] == [b"a"]

        ledger = await client.create_ledger(3, 2, 2)
        await ledger.append(b"x")
        await ledger.aclose()
        assert ledger.is_closed
        async with await client.open_ledger(ledger.id) as ledger_reader:
            assert ledger_reader.is_closed
        await ledger_reader.aclose()

        await log.aclose()
        await log.aclose()
        with pytest.raises(walkit.ClientClosedError):
            log.writer()


async def test_log_close_is_deprecated_and_still_closes(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), connect(memory_url) as client:
        log = await Log.open(client, "deprecated")
        with pytest.warns(DeprecationWarning, match="aclose"):
            log.close()
        with pytest.raises(walkit.ClientClosedError):
            log.writer()
