"""Fixtures for the log tests: in-process bookies (tests/client/conftest.py's ``cluster``), a
fresh memory metadata URL, and quiet logs (``WALKIT_LOG_TEST_LOG=debug`` to see them)."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest
import structlog

from tests._zookeeper import unique_root
from walkit.metadata import forget_memory_tree


@pytest.fixture
def memory_url(request: pytest.FixtureRequest) -> Iterator[str]:
    name = unique_root(request.node.name).lstrip("/")
    yield f"memory://{name}"
    forget_memory_tree(name)


@pytest.fixture(autouse=True)
def _quiet_structlog() -> Iterator[None]:
    level = logging.getLevelName(os.environ.get("WALKIT_LOG_TEST_LOG", "error").upper())
    if not isinstance(level, int):
        level = logging.ERROR
    saved = structlog.get_config()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level))
    try:
        yield
    finally:
        structlog.configure(**saved)
