"""Shared fixtures: a real ZooKeeper server, and metadata URLs for every driver."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Property tests check logic, not speed: no per-example deadline, so a loaded 2-core CI machine
# cannot turn a slow example into a failure. HYPOTHESIS_PROFILE=thorough runs many more examples.
settings.register_profile(
    "walkit",
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("thorough", parent=settings.get_profile("walkit"), max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "walkit"))

# `from tests._zookeeper import ...` works whichever way pytest was started.
_REPO = str(Path(__file__).resolve().parent.parent)
if _REPO not in sys.path:
    sys.path.insert(0, _REPO)

from tests._sandbox import Sandbox, running_sandbox  # noqa: E402
from tests._zookeeper import (  # noqa: E402
    ZooKeeperServer,
    missing_zookeeper,
    running_zookeeper,
    unique_root,
)
from walkit.metadata import forget_memory_tree  # noqa: E402


@pytest.fixture(scope="session")
def zookeeper_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One standalone ZooKeeper for the whole test session (stopped at the end, always)."""
    problem = missing_zookeeper()
    if problem:
        pytest.fail(problem, pytrace=False)
    with running_zookeeper(tmp_path_factory.mktemp("zookeeper")) as server:
        yield server


@pytest.fixture
def zookeeper_url(zookeeper_server: ZooKeeperServer, request: pytest.FixtureRequest) -> str:
    """``zk://127.0.0.1:PORT/<root>`` with a root of this test's own."""
    return zookeeper_server.url(unique_root(request.node.name))


@pytest.fixture(params=["memory", "sqlite", pytest.param("zookeeper", marks=pytest.mark.zookeeper)])
def metadata_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh, empty metadata store URL, once per driver (memory, sqlite, zookeeper)."""
    if request.param == "memory":
        name = unique_root(request.node.name).lstrip("/")
        yield f"memory://{name}"
        forget_memory_tree(name)
    elif request.param == "sqlite":
        yield f"sqlite://{tmp_path / 'metadata.db'}"
    else:
        yield request.getfixturevalue("zookeeper_url")


@pytest.fixture(scope="session")
def walkit_sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Sandbox]:
    """One real ``walkit sandbox`` (3 bookie processes, sqlite metadata) for the whole session:
    the doc tests and the CLI logging tests share it. Its URL is ``walkit_sandbox.metadata_url``."""
    with running_sandbox(tmp_path_factory.mktemp("sandbox") / "data", bookies=3) as sandbox:
        yield sandbox
