"""The web examples as real services: FastAPI under uvicorn (asyncio) and Flask under waitress
(walkit.sync), two instances on one log, real HTTP, the leader SIGKILLed mid-stream. Every
order that got a 2xx is still there afterwards, on the instance that took the log over."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests._cluster import ChildProcess, ProcessCluster, free_port, process_cluster
from walkit import LogPosition

pytestmark = pytest.mark.processes

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
#: How long a test waits for the survivor to lead, and for its state to catch up.
PATIENCE = 60.0


class OrdersProcess(ChildProcess):
    kind = "orders service"

    def __init__(self, script: str, ready_text: str, metadata_url: str, log: str) -> None:
        super().__init__(free_port())
        self.script = script
        self.ready_text = ready_text
        self.metadata_url = metadata_url
        self.log = log

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            sys.executable,
            str(EXAMPLES / self.script),
            "--metadata",
            self.metadata_url,
            "--http",
            f"127.0.0.1:{self.port}",
            "--log",
            self.log,
            "--lease-timeout",
            "1.0",
        ]


SERVICES = {
    "fastapi": ("fastapi_orders.py", "Uvicorn running on"),
    "flask": ("flask_orders.py", "orders: serving http://"),
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessCluster]:
    root = tmp_path_factory.mktemp("orders")
    with process_cluster(f"sqlite:///{root / 'metadata.db'}", root, 3) as c:
        yield c


def _status(http: httpx.Client, service: OrdersProcess) -> dict[str, object]:
    answer = http.get(f"{service.base}/status")
    answer.raise_for_status()
    doc = answer.json()
    assert isinstance(doc, dict)
    return doc


def _until(what: str, check: object) -> None:
    """Poll ``check()`` until true (no event crosses the HTTP boundary)."""
    deadline = time.monotonic() + PATIENCE
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _place(http: httpx.Client, base: str, n: int) -> tuple[str, str] | None:
    """One order; (id, position) on a 201, None when no instance could take it now."""
    try:
        answer = http.post(f"{base}/orders", json={"item": f"widget-{n}", "qty": n})
    except httpx.TransportError:
        return None
    if answer.status_code == 201:
        doc = answer.json()
        return doc["id"], doc["position"]
    assert answer.status_code in (307, 503), answer.text
    return None


@pytest.mark.parametrize("kind", sorted(SERVICES))
def test_orders_survive_a_sigkilled_leader(cluster: ProcessCluster, kind: str) -> None:
    script, ready = SERVICES[kind]
    services = [OrdersProcess(script, ready, cluster.metadata_url, f"orders-{kind}") for _ in "ab"]
    for service in services:
        service.start(timeout=60)
    try:
        with httpx.Client(follow_redirects=True, timeout=30) as http:
            _until("a writing leader", lambda: any(_status(http, s)["writing"] for s in services))
            leader = next(s for s in services if _status(http, s)["writing"])
            survivor = next(s for s in services if s is not leader)
            acked: dict[str, str] = {}
            # Orders sent to the follower are redirected to the leader (307).
            for n in range(40):
                placed = _place(http, survivor.base if n % 2 else leader.base, n)
                assert placed is not None, "the leader refused an order"
                acked[placed[0]] = placed[1]
            leader.kill()  # SIGKILL, mid-stream: no goodbye to the metadata store
            n = 40
            while len(acked) < 80:
                placed = _place(http, survivor.base, n)
                if placed is not None:
                    acked[placed[0]] = placed[1]
                n += 1
                if placed is None:
                    time.sleep(0.05)  # the survivor is taking over: its lease comes first
            assert _status(http, survivor)["writing"]
            last = max(LogPosition.parse(p) for p in acked.values())

            def caught_up() -> bool:
                applied = _status(http, survivor)["applied"]
                return applied is not None and LogPosition.parse(str(applied)) >= last

            _until("the survivor to apply every acked order", caught_up)
            for order_id in acked:
                answer = http.get(f"{survivor.base}/orders/{order_id}")
                assert answer.status_code == 200, (order_id, answer.text)
            assert _status(http, survivor)["orders"] == len(acked)
    finally:
        for service in services:
            service.stop()
