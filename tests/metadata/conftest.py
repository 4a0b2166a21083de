from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from walkit.metadata import MetadataStore, open_metadata_store


@pytest.fixture
async def store(metadata_url: str) -> AsyncIterator[MetadataStore]:
    async with await open_metadata_store(metadata_url) as opened:
        yield opened


@pytest.fixture
async def other(metadata_url: str) -> AsyncIterator[MetadataStore]:
    """A second session on the same store."""
    async with await open_metadata_store(metadata_url) as opened:
        yield opened
