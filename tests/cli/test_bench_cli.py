"""`walkit bench`, run as a user would against real bookie processes."""

from __future__ import annotations

import json

import pytest

from tests._cluster import ProcessCluster
from tests.cli._run import walkit

pytestmark = pytest.mark.processes


def test_bench_on_a_ledger_reports_and_deletes_it(cluster: ProcessCluster) -> None:
    url = cluster.metadata_url
    before = json.loads(walkit("ledgers", "--metadata", url, "--json").stdout)
    result = walkit("bench", "--metadata", url, "--entries", "2000", "--in-flight", "8", "--json")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["entries"] == 2000 and record["entry_size"] == 100
    assert record["entries_per_second"] > 0
    assert 0 < record["latency_p50_ms"] <= record["latency_p99_ms"] <= record["latency_max_ms"]
    assert record["target"].endswith("(deleted)")
    assert json.loads(walkit("ledgers", "--metadata", url, "--json").stdout) == before
    table = walkit("bench", "--metadata", url, "--entries", "10").stdout
    assert "entries_per_second" in table


def test_bench_on_a_log_appends_every_entry_in_batches(cluster: ProcessCluster) -> None:
    url = cluster.metadata_url
    result = walkit(
        "bench",
        "--metadata",
        url,
        "--log",
        "bench",
        "--entries",
        "1001",
        "--batch",
        "100",
        "--size",
        "64",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["target"] == "log bench"
    tail = walkit("log", "tail", "bench", "--metadata", url, "--json")
    assert tail.returncode == 0, tail.stderr
    assert len(tail.stdout.splitlines()) == 1001
    # The log exists with E=3 Qw=2 Qa=2: other quorums are a clear error.
    other = walkit("bench", "--metadata", url, "--log", "bench", "--write-quorum", "3")
    assert other.returncode == 1 and "ConfigurationError" in other.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--entries", "0"], "must be an int >= 1"),
        (["--in-flight", "-2"], "must be an int >= 1"),
        (["--size", "x"], "is not an integer"),
    ],
)
def test_bench_bad_arguments(args: list[str], message: str) -> None:
    result = walkit("bench", "--metadata", "memory://x", *args)
    assert result.returncode == 2 and message in result.stderr


def test_bench_with_impossible_quorums_is_a_clear_error(cluster: ProcessCluster) -> None:
    result = walkit("bench", "--metadata", cluster.metadata_url, "--write-quorum", "4")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and "error" in result.stderr
