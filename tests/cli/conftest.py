"""What the `walkit` command tests share: a cluster of bookie processes per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._cluster import ProcessCluster, process_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    """Three bookie processes on sqlite metadata, shared by one test module."""
    root = tmp_path_factory.mktemp("cli")
    with process_cluster(f"sqlite:///{root / 'metadata.db'}", root, 3) as c:
        yield c
