"""Spark fixtures: ONE local SparkSession for the whole test session, and a real cluster
(bookie processes on loopback, sqlite metadata) that the Spark tests share.

Every test under ``tests/spark`` is marked ``spark``. Without pyspark/pyarrow or a Java that
Spark accepts they are skipped with the reason, except in CI (``CI=true``), where that is a
failure: the test script installs both.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._cluster import ProcessCluster, process_cluster
from tests.spark._spark import require_spark as _require_spark

SPARK_DIR = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SPARK_DIR in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="session")
def spark_event_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The directory of the shared session's event log: every listener event as JSON lines,
    uncompressed, which is what Spark's UI (and its history server) shows."""
    return tmp_path_factory.mktemp("spark-events")


@pytest.fixture(scope="session")
def spark(spark_event_log: Path) -> Iterator[Any]:
    """The SparkSession every Spark test shares (local[2], loopback, UI off, event log on),
    with the ``walkit`` format registered (filter pushdown on)."""
    _require_spark()
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import walkit.spark

    session = (
        SparkSession.builder.master("local[2]")
        .appName("walkit-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.python.filterPushdown.enabled", "true")
        .config("spark.sql.streaming.stopTimeout", "30s")
        .config("spark.eventLog.enabled", "true")
        .config("spark.eventLog.dir", spark_event_log.as_uri())
        .config("spark.eventLog.compress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    walkit.spark.register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    """Three real bookie processes on loopback with sqlite metadata, for the Spark tests."""
    _require_spark()
    root = tmp_path_factory.mktemp("spark-cluster")
    # A generous session timeout: Spark's JVM and workers share the 2 cores with the bookies.
    url = f"sqlite://{root / 'metadata.db'}?session_timeout=30"
    with process_cluster(url, root, 3) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark_metadata(spark_cluster: ProcessCluster) -> str:
    """The metadata URL of the shared cluster (``sqlite:///...``)."""
    return spark_cluster.metadata_url
