"""Client options that can never work are configuration errors (ConfigurationError)
at connect or create time, not a misleading failure later."""

from __future__ import annotations

from pathlib import Path

import pytest

import walkit
from tests.client.conftest import cluster
from walkit.errors import ConfigurationError, InvalidArgumentError
from walkit_bookie import BookieConfig


@pytest.mark.parametrize("size", [10, 0, -1, 1024, 2047, 2**32, 1.5, "5MiB", True])
async def test_a_frame_size_without_room_for_a_frame_is_refused_at_connect(
    memory_url: str, size: object
) -> None:
    with pytest.raises(ConfigurationError, match="max_frame_size"):
        async with walkit.Client.connect(memory_url, max_frame_size=size):  # type: ignore[arg-type]
            pass  # pragma: no cover


async def test_the_smallest_frame_size_works(memory_url: str, tmp_path: Path) -> None:
    async with (
        cluster(memory_url, tmp_path, 3),
        walkit.Client.connect(memory_url, max_frame_size=2048) as client,
    ):
        assert client.options.max_entry_size == 1024
        lw = await client.create_ledger(3, 2, 2)
        assert await lw.append(b"x" * 1024) == 0
        with pytest.raises(InvalidArgumentError):
            await lw.append(b"x" * 1025)
        await lw.close()


async def test_digest_none_is_refused_at_create(memory_url: str, tmp_path: Path) -> None:
    async with cluster(memory_url, tmp_path, 3), walkit.Client.connect(memory_url) as client:
        with pytest.raises(ConfigurationError, match="'none'"):
            await client.create_ledger(3, 2, 2, digest=None)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            await client.create_ledger(3, 2, 2, digest=3)  # type: ignore[arg-type]
        lw = await client.create_ledger(3, 2, 2, digest="none")  # the explicit way
        assert lw.metadata.digest is walkit.DigestType.NONE
        await lw.close()
        assert await client.list_ledgers() == [lw.id]  # nothing half-made by the refusals


@pytest.mark.parametrize("size", [10, 2047, 2**32])
def test_bookie_frame_size_without_room_for_a_frame_is_refused(tmp_path: Path, size: int) -> None:
    with pytest.raises(ConfigurationError, match="max_frame_size"):
        BookieConfig(data_dirs=[str(tmp_path)], max_frame_size=size)
