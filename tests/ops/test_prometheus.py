"""The alert rules and the Grafana dashboard of docs/operations, against Debian's Prometheus:

- ``promtool check rules`` and ``promtool test rules`` (the test series in alerts.test.yml)
  pass, ``promtool check config`` accepts the example configuration, and the unit tests fail
  when a rule is changed (they bite);
- a real Prometheus scrapes real bookie processes: every target is up, every rule evaluates,
  a killed bookie makes ``WalkitBookieDown`` pending, and every query of every dashboard panel
  (and of its variables) returns data (Grafana is not in the package registries: its panels'
  PromQL is checked against Prometheus itself).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import trio

import walkit
from tests.ops._ops import AdminBookie, wait_for
from tests.ops._prometheus import OPERATIONS, PrometheusServer, need, running_prometheus

#: What the test puts for the dashboard's variables (Grafana would).
VARIABLES = {"job": "walkit-bookie", "instance": ".+", "__rate_interval": "10s"}


def _promtool(*args: str, cwd: Path = OPERATIONS) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [need("promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_the_rules_and_the_example_config_pass_promtool() -> None:
    checked = _promtool("check", "rules", "alerts.yml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 11 rules found" in checked.stdout
    tested = _promtool("test", "rules", "alerts.test.yml")
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "SUCCESS" in tested.stdout
    config = _promtool("check", "config", "prometheus.yml")
    assert config.returncode == 0, config.stdout + config.stderr


@pytest.mark.parametrize(
    ("change", "alert"),
    [
        (("walkit_bookie_disk_usage_ratio > 0.85", "walkit_bookie_disk_usage_ratio > 0.95"),
         "WalkitBookieDiskNearlyFull"),
        (("expr: up{job=\"walkit-bookie\"} == 0\n        for: 1m",
          "expr: up{job=\"walkit-bookie\"} == 0\n        for: 5m"), "WalkitBookieDown"),
        (("histogram_quantile(0.99,\n            sum by (job, instance, le) "
          "(rate(walkit_bookie_journal_write_seconds_bucket[5m]))\n          ) > 0.1",
          "histogram_quantile(0.99,\n            sum by (job, instance, le) "
          "(rate(walkit_bookie_journal_write_seconds_bucket[5m]))\n          ) > 0.3"),
         "WalkitBookieJournalSlow"),
        (("[30m])) or vector(0)) == 0\n          and on ()",
          "[30m])) or vector(1)) == 0\n          and on ()"), "WalkitAutorecoveryStalled"),
    ],
)  # fmt: skip
def test_the_rule_unit_tests_fail_when_a_rule_changes(
    tmp_path: Path, change: tuple[str, str], alert: str
) -> None:
    rules = (OPERATIONS / "alerts.yml").read_text()
    assert change[0] in rules, change[0]
    (tmp_path / "alerts.yml").write_text(rules.replace(change[0], change[1], 1))
    shutil.copy(OPERATIONS / "alerts.test.yml", tmp_path)
    tested = _promtool("test", "rules", "alerts.test.yml", cwd=tmp_path)
    assert tested.returncode != 0, tested.stdout
    assert f"alertname: {alert}" in tested.stdout + tested.stderr


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((OPERATIONS / "grafana-dashboard.json").read_text())
    return loaded


def _substitute(expr: str) -> str:
    return re.sub(r"\$\{?(\w+)\}?", lambda m: VARIABLES.get(m.group(1), m.group(0)), expr)


#: Metrics of an application's client (its ``metrics_registry``), not of a bookie: the
#: scrape test below runs bookies only, so their panels are checked against the client's own
#: registry instead (``test_the_client_panels_query_metrics_the_client_exports``).
CLIENT_METRICS = re.compile(r"\bwalkit_lake_\w+")


def _panel_queries(*, client: bool = False) -> list[tuple[str, str]]:
    """(panel title and target, PromQL with the variables put in) of every panel: those on
    bookies' metrics, or (``client``) those on an application client's."""
    queries = []
    for panel in _dashboard()["panels"]:
        if panel["type"] == "row":
            continue
        for target in panel["targets"]:
            if bool(CLIENT_METRICS.search(target["expr"])) != client:
                continue
            queries.append((f"{panel['title']} [{target['refId']}]", _substitute(target["expr"])))
    return queries


def test_the_client_panels_query_metrics_the_client_exports() -> None:
    from prometheus_client import CollectorRegistry

    from walkit.ledger._metrics import client_metrics

    registry = CollectorRegistry()
    assert client_metrics(registry) is not None
    exported = {sample.name for family in registry.collect() for sample in family.samples} | {
        family.name for family in registry.collect()
    }
    wanted = {
        name
        for _title, expr in _panel_queries(client=True)
        for name in CLIENT_METRICS.findall(expr)
    }
    assert wanted, "no client panels found"
    # A histogram's _bucket and a counter's _total are exported from the family's name.
    stems = {re.sub(r"_(bucket|total|count|sum)$", "", name) for name in wanted}
    assert stems <= exported, sorted(stems - exported)


def test_the_dashboard_is_well_formed() -> None:
    dashboard = _dashboard()
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    assert len(panels) >= 15
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in panels:
        assert panel["title"] and panel["description"] and panel["targets"], panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            assert "$" not in _substitute(target["expr"]), target["expr"]
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names == ["datasource", "job", "instance"]


def _has_data(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(sample["value"][1])) for sample in result)


async def _traffic(client: walkit.Client, stop: trio.Event) -> None:
    """Ledgers written and read back until ``stop``: rates and latencies to show."""
    n = 0
    while not stop.is_set():
        try:
            writer = await client.create_ledger(3, 2, 2)
            await writer.append_batch([b"traffic-%d-%d" % (n, i) for i in range(100)])
            await writer.close()
            reader = await client.open_ledger(writer.id)
            await reader.read(0, 99)
        except walkit.errors.WalkitError:
            await trio.sleep(0.2)  # the killed bookie, until the client stops choosing it
        n += 1


def _config(path: Path, bookies: list[AdminBookie]) -> Path:
    targets = ", ".join(f'"127.0.0.1:{b.admin_port}"' for b in bookies)
    path.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {OPERATIONS / 'alerts.yml'}\n"
        "scrape_configs:\n  - job_name: walkit-bookie\n"
        f"    static_configs:\n      - targets: [{targets}]\n"
    )
    return path


@pytest.mark.processes
async def test_prometheus_scrapes_real_bookies_and_every_panel_has_data(tmp_path: Path) -> None:
    need("prometheus")
    url = f"sqlite:///{tmp_path / 'metadata.db'}"
    bookies = [
        AdminBookie(url, tmp_path / f"bookie-{i}", extra_args=["--lost-bookie-delay", "1"])
        for i in range(4)
    ]
    try:
        for bookie in bookies:
            await trio.to_thread.run_sync(bookie.start)
        config = _config(tmp_path / "prometheus.yml", bookies)
        with running_prometheus(config, tmp_path / "prometheus-data") as prometheus:
            await trio.to_thread.run_sync(_every_target_up, prometheus, len(bookies))
            await trio.to_thread.run_sync(_every_rule_evaluated, prometheus)
            async with walkit.Client.connect(url) as client, trio.open_nursery() as nursery:
                ledgers = []
                for n in range(4):
                    writer = await client.create_ledger(3, 2, 2)
                    await writer.append_batch([b"before-%d-%d" % (n, i) for i in range(200)])
                    await writer.close()
                    ledgers.append(writer.metadata)
                victim = next(b for b in bookies if b.address == ledgers[0].current_ensemble[0])
                await trio.to_thread.run_sync(victim.kill)  # autorecovery heals its ledgers
                stop = trio.Event()
                nursery.start_soon(_traffic, client, stop)
                await _bad_input(next(b for b in bookies if b is not victim))
                await trio.to_thread.run_sync(_victim_alerted, prometheus, victim)
                await trio.to_thread.run_sync(
                    wait_for,
                    lambda: _has_data(
                        prometheus.query("sum(walkit_autorecovery_heal_seconds_count) > 0")
                    ),
                    120,
                    "autorecovery to heal a ledger of the killed bookie",
                )
                missing = await trio.to_thread.run_sync(_queries_without_data, prometheus)
                stop.set()
            assert not missing, f"panels whose query returned no data: {missing}"
            for label, metric in (
                ("job", "walkit_bookie_requests_total"),
                ("instance", 'walkit_bookie_requests_total{job="walkit-bookie"}'),
            ):
                values = prometheus.api(f"label/{label}/values", **{"match[]": metric})
                assert values, (label, metric)
    finally:
        for bookie in bookies:
            bookie.stop()


def _every_target_up(prometheus: PrometheusServer, count: int) -> None:
    def up() -> bool:
        targets = prometheus.api("targets")["activeTargets"]
        return len(targets) == count and all(t["health"] == "up" for t in targets)

    wait_for(up, 60, f"{count} scrape targets up")


def _every_rule_evaluated(prometheus: PrometheusServer) -> None:
    def evaluated() -> list[dict[str, Any]] | None:
        rules = [r for g in prometheus.api("rules")["groups"] for r in g["rules"]]
        return rules if all(r["health"] != "unknown" for r in rules) else None

    rules = wait_for(evaluated, 60, "every rule evaluated once")
    assert len(rules) == 11
    broken = {r["name"]: r.get("lastError") for r in rules if r["health"] != "ok"}
    assert not broken, broken


def _victim_alerted(prometheus: PrometheusServer, victim: AdminBookie) -> None:
    instance = f"127.0.0.1:{victim.admin_port}"

    def alerted() -> bool:
        alerts = prometheus.api("alerts")["alerts"]
        return any(
            a["labels"]["alertname"] == "WalkitBookieDown"
            and a["labels"]["instance"] == instance
            and a["state"] in ("pending", "firing")
            for a in alerts
        )

    wait_for(alerted, 60, "WalkitBookieDown for the killed bookie")
    down = prometheus.query(f'up{{instance="{instance}"}}')
    assert [s["value"][1] for s in down] == ["0"]


def _queries_without_data(prometheus: PrometheusServer) -> list[str]:
    """The panel queries that still return no finite sample after a while (rates need a few
    scrapes: each is asked again until it answers, or the deadline)."""
    waiting = dict(_panel_queries())
    with_data: set[str] = set()

    def done() -> bool:
        for name, expr in waiting.items():
            if name not in with_data and _has_data(prometheus.query(expr)):
                with_data.add(name)
        return len(with_data) == len(waiting)

    try:
        wait_for(done, 90, "every panel's query to return data")
    except AssertionError:
        pass
    return sorted(f"{name}: {expr}" for name, expr in waiting.items() if name not in with_data)


async def _bad_input(bookie: AdminBookie) -> None:
    """A frame the bookie refuses (counted in walkit_bookie_bad_input_total)."""
    stream = await trio.open_tcp_stream("127.0.0.1", bookie.port)
    async with stream:
        await stream.send_all(b"\x00\x00\x00\x08garbage!")
        with trio.move_on_after(5):
            while await stream.receive_some(4096):
                pass
