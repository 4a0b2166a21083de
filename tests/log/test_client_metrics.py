"""The client's metrics (``Client.connect(url, metrics_registry=...)``) with in-process bookies:
append latency, records and bytes, ensemble changes, recoveries and reader lag, served by
prometheus_client's own HTTP server and parsed back as a scraper would; clients that share a
registry add up; bad registries are refused."""

from __future__ import annotations

import urllib.request
from pathlib import Path

import pytest
import trio
from prometheus_client import CollectorRegistry, Counter, start_http_server
from prometheus_client.parser import text_string_to_metric_families

from tests.client.conftest import cluster, connect
from walkit import Log
from walkit.client import client_services
from walkit.errors import ConfigurationError
from walkit.ledger._metrics import APPEND_BUCKETS


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def test_append_figures_are_scraped(memory_url: str, tmp_path: Path) -> None:
    registry = CollectorRegistry()
    server, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    port = server.server_address[1]
    try:
        async with (
            cluster(memory_url, tmp_path, 3),
            connect(memory_url, metrics_registry=registry) as client,
        ):
            log = await Log.open(client, "orders")
            async with log.writer() as w:
                for i in range(10):
                    await w.append(b"%03d" % i)
                await w.append_batch([b"batch"] * 5)
            got = await trio.to_thread.run_sync(scrape, port)
    finally:
        server.shutdown()
        thread.join(10)
    orders = (("log", "orders"),)
    assert got[("walkit_log_appended_records_total", orders)] == 15
    assert got[("walkit_log_appended_bytes_total", orders)] == 10 * 3 + 5 * 5
    assert got[("walkit_log_append_seconds_count", orders)] == 15
    assert got[("walkit_log_append_seconds_bucket", (("le", "+Inf"), ("log", "orders")))] == 15
    assert 0 < got[("walkit_log_append_seconds_sum", orders)] < 15 * 10
    buckets = [
        got[("walkit_log_append_seconds_bucket", (("le", repr(b)), *orders))]
        for b in APPEND_BUCKETS
    ]
    assert buckets == sorted(buckets)  # cumulative
    assert 0.5 in APPEND_BUCKETS  # the alert rules' threshold is a bucket bound
    assert got[("walkit_ledger_ensemble_changes_total", ())] == 0
    # The log's appends are the log's: none is counted again as a ledger append.
    assert got[("walkit_ledger_append_seconds_count", ())] == 0


async def test_ledger_appends_are_scraped(memory_url: str, tmp_path: Path) -> None:
    """Ledger writers used directly (BookKeeper's ledger API) report their own latency."""
    registry = CollectorRegistry()
    async with (
        cluster(memory_url, tmp_path, 3),
        connect(memory_url, metrics_registry=registry) as client,
    ):
        lw = await client.create_ledger(3, 3, 2)
        for i in range(4):
            await lw.append(b"%02d" % i)
        await lw.append_batch([b"abc"] * 3)
        await lw.close()
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in registry.collect()
        for s in family.samples
    }
    assert got[("walkit_ledger_appended_entries_total", ())] == 7
    assert got[("walkit_ledger_appended_bytes_total", ())] == 4 * 2 + 3 * 3
    assert got[("walkit_ledger_append_seconds_count", ())] == 7
    assert got[("walkit_ledger_append_seconds_bucket", (("le", "+Inf"),))] == 7
    assert 0 < got[("walkit_ledger_append_seconds_sum", ())] < 7 * 10


async def test_ensemble_changes_recoveries_and_reader_lag(memory_url: str, tmp_path: Path) -> None:
    registry = CollectorRegistry()
    async with (
        cluster(memory_url, tmp_path, 4) as bookies,
        connect(memory_url, metrics_registry=registry, add_timeout=1.0) as client,
        connect(memory_url, metrics_registry=registry) as other,
    ):
        log = await Log.open(client, "changes", ensemble_size=3, write_quorum=3, ack_quorum=2)
        async with log.writer() as w:
            await w.append(b"before")
            md = await client.ledger_metadata(w.ledger_id)
            await bookies.stop(bookies.index_of(md.current_ensemble[0]))
            for i in range(5):
                await w.append(b"after %d" % i)
            assert registry.get_sample_value("walkit_ledger_ensemble_changes_total") == 1
            # A second client on the same registry takes the log over: it recovers (fences)
            # the writer's ledger, and the figures of both add up.
            again = await Log.open(other, "changes")
            async with again.writer() as w2:
                await w2.append(b"taken over")
        assert registry.get_sample_value("walkit_ledger_recoveries_total") == 1
        assert (
            registry.get_sample_value("walkit_log_appended_records_total", {"log": "changes"}) == 7
        )
        reader = log.reader(follow=False)
        first = await reader.next()
        assert first is not None
        lag = {"log": "changes", "consumer": ""}
        # (the rest of its ledger: the lag a reader knows of is in the ledger it reads)
        assert registry.get_sample_value("walkit_log_reader_lag_records", lag) == 5
        assert [r async for r in reader][-1].payload == b"taken over"
        assert registry.get_sample_value("walkit_log_reader_lag_records", lag) == 0
        del reader
        lagging = [log.reader(follow=False) for _ in range(2)]
        await lagging[0].next()
        await lagging[1].next()
        await lagging[1].next()
        assert registry.get_sample_value("walkit_log_reader_lag_records", lag) == 5  # the largest


async def test_no_registry_no_metrics_and_bad_registries(memory_url: str) -> None:
    async with connect(memory_url) as client:
        assert client_services(client).context.metrics is None
    for bad in ("registry", 7, object()):
        with pytest.raises(ConfigurationError, match="metrics_registry"):
            async with connect(memory_url, metrics_registry=bad):
                pass
    taken = CollectorRegistry()
    Counter("walkit_ledger_recoveries", "someone else's", registry=taken)
    with pytest.raises(ConfigurationError, match="metrics_registry"):
        async with connect(memory_url, metrics_registry=taken):
            pass
