"""Fixtures for the log tests: in-process bookies (tests/client/conftest.py's ``cluster``) and a
fresh memory metadata URL. walkit logs through ``logging``: ``pytest --log-level=DEBUG`` shows
its events with a failed test's output."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._zookeeper import unique_root
from walkit.metadata import forget_memory_tree


@pytest.fixture
def memory_url(request: pytest.FixtureRequest) -> Iterator[str]:
    name = unique_root(request.node.name).lstrip("/")
    yield f"memory://{name}"
    forget_memory_tree(name)
