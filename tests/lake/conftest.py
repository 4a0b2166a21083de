"""Fixtures for the log tests: in-process bookies (tests/client/conftest.py's ``cluster``) and a
fresh memory metadata URL. walkit logs through ``logging``: ``pytest --log-level=DEBUG`` shows
its events with a failed test's output."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._zookeeper import unique_root
from walkit.metadata import forget_memory_tree


@pytest.fixture
def memory_url(request: pytest.FixtureRequest) -> Iterator[str]:
    name = unique_root(request.node.name).lstrip("/")
    yield f"memory://{name}"
    forget_memory_tree(name)


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """moto's S3 server process, with test credentials in the environment (the AWS chain)."""
    import os

    from tests.lake._s3 import CREDENTIALS, s3_server

    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    try:
        with s3_server() as url:
            yield url
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(params=["file", "s3"])
def lake_opts(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The log options of a lake on local files, or on the S3 server."""
    from tests.lake._s3 import lake_options

    if request.param == "file":
        return lake_options("file", tmp_path, None)
    endpoint = request.getfixturevalue("s3_endpoint")
    return lake_options("s3", tmp_path, endpoint)
