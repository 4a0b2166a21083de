"""The HTTP admin endpoint: /metrics in prometheus format, /health, and bad requests."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio
from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from tests.bookie._helpers import (
    config,
    connect,
    http_raw,
    http_request,
    running_bookie,
)
from walkit._core.wire import StatusCode

TOKEN = "test-admin-token-0123456789"
AUTH = f"Authorization: Bearer {TOKEN}\r\n".encode()


async def _get(address: tuple[str, int], path: str) -> tuple[int, bytes]:
    return await http_request(address, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())


async def test_metrics_and_health(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"], http_port=0)) as (bookie, bid):
        assert bookie.admin_address is not None
        async with connect(bid) as c:
            answers = await c.call_many([c.add_request(1, e, b"x") for e in range(10)])
            assert all(a.status is StatusCode.OK for a in answers)  # type: ignore[union-attr]
            await c.read(1, 3)
            status, body = await _get(bookie.admin_address, "/metrics")
        assert status == 200
        text = body.decode()
        assert "walkit_bookie_adds_answered_total 10.0" in text
        assert "walkit_bookie_reads_answered_total 1.0" in text
        assert "walkit_bookie_read_only 0.0" in text
        assert "walkit_bookie_connections 1.0" in text
        assert "walkit_bookie_journal_syncs_total" in text
        status, body = await _get(bookie.admin_address, "/health")
        assert status == 200
        assert json.loads(body) == {"status": "ok", "bookie_id": str(bid), "read_only": False}


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        (b"GET /metrics/../etc/passwd HTTP/1.1\r\nHost: x\r\n\r\n", 404),
        (b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", 405),
        (b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (b"DELETE /admin/gc HTTP/1.1\r\nHost: x\r\n\r\n", 405),
        (b"\xff\xfe garbage\r\n\r\n", 400),
        (b"\x00\x01\x02\x03\n\n", 400),
        (b"GET\r\n\r\n", 400),
        (b"get /health HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET  /health HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET health HTTP/1.1\r\nHost: x\r\n\r\n", 400),
        (b"GET /health HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n", 400),
        (b"GET /health HTTP/1.1\r\nHost: \xe9\r\n\r\n", 400),
        (b"GET /health HTTP/2.0\r\n\r\n", 505),
        (b"GET /health SMTP/1.0\r\n\r\n", 400),  # not HTTP at all
        (b"GET /health HTTP/1.1\r\n\r\n", 400),  # HTTP/1.1 without Host (RFC 9112)
        (b"POST /admin/gc HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999\r\n\r\n", 413),
        (b"POST /admin/gc HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n", 400),
        (b"POST /admin/gc HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        (b"POST /admin/gc?compact=everything HTTP/1.1\r\nHost: x\r\n" + AUTH + b"\r\n", 400),
        (
            b"POST /admin/gc?compact=minor&compact=major HTTP/1.1\r\nHost: x\r\n" + AUTH + b"\r\n",
            400,
        ),
        (b"POST /admin/gc?=&&= HTTP/1.1\r\nHost: x\r\n" + AUTH + b"\r\n", 400),
        (b"POST /admin/gc HTTP/1.1\r\nHost: x\r\n\r\n", 401),
        (b"POST /admin/gc HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer nope\r\n\r\n", 401),
        (b"POST /admin/gc HTTP/1.1\r\nHost: x\r\n" + AUTH + AUTH + b"\r\n", 400),
        (b"GET /health HTTP/1.1\r\nHost: x\r\nX: " + b"A" * 20_000 + b"\r\n\r\n", 431),
        (b"A" * 100_000, 431),
        (b"GET /health HTTP/1.1\r\nHost: x\r\n", 400),  # then EOF: incomplete
    ],
)
async def test_bad_http_requests_get_a_clear_4xx_and_the_bookie_goes_on(
    tmp_path: Path, raw: bytes, status: int
) -> None:
    cfg = config([tmp_path / "d"], http_port=0, admin_token=TOKEN)
    async with running_bookie(cfg) as (bookie, bid):
        address = bookie.admin_address
        assert address is not None
        got, body = await http_request(address, raw, half_close=True)
        assert got == status, body
        assert body or raw.startswith(b"HEAD ")  # says why (a HEAD's answer has no body)
        assert (await _get(address, "/health"))[0] == 200
        async with connect(bid) as c:
            assert (await c.add(1, 0, b"still serving")).status is StatusCode.OK


async def test_http_1_0_needs_no_host(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"], http_port=0)) as (bookie, _):
        assert bookie.admin_address is not None
        status, body = await http_request(bookie.admin_address, b"GET /health HTTP/1.0\r\n\r\n")
        assert status == 200 and json.loads(body)["status"] == "ok"


async def test_slow_partial_requests_get_408_and_the_bookie_goes_on(tmp_path: Path) -> None:
    """Slowloris: heads that never end hold a slot for 5 s at most, then get a 408."""
    async with running_bookie(config([tmp_path / "d"], http_port=0)) as (bookie, bid):
        address = bookie.admin_address
        assert address is not None
        answers: list[bytes] = []

        async def slow(part: bytes) -> None:
            stream = await trio.open_tcp_stream(*address)
            async with stream:
                await stream.send_all(part)  # and nothing more, never EOF
                data = b""
                while chunk := await stream.receive_some(65536):
                    data += chunk
                answers.append(data)

        with trio.fail_after(15):
            async with trio.open_nursery() as nursery:
                for part in (b"GET /hea", b"GET /health HTTP/1.1\r\nHost: x\r\nX-A", b""):
                    nursery.start_soon(slow, part)
                # Meanwhile the endpoint answers others at once.
                assert (await _get(address, "/health"))[0] == 200
        assert len(answers) == 3
        for answer in answers:
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408 ") and body == b"request not received in time\n"
        async with connect(bid) as c:
            assert (await c.add(1, 0, b"still serving")).status is StatusCode.OK


async def test_wrong_method_names_the_allowed_ones(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"], http_port=0)) as (bookie, _):
        assert bookie.admin_address is not None
        head = await http_raw(bookie.admin_address, b"PUT /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 405 ")
        assert b"\r\nAllow: GET\r\n" in head


async def test_a_connection_that_sends_nothing_gets_no_answer_and_costs_nothing(
    tmp_path: Path,
) -> None:
    async with running_bookie(config([tmp_path / "d"], http_port=0)) as (bookie, _):
        assert bookie.admin_address is not None
        assert await http_raw(bookie.admin_address, b"") == b""
        assert (await _get(bookie.admin_address, "/health"))[0] == 200


async def test_connections_trickling_their_requests_cannot_hold_the_slots(
    tmp_path: Path,
) -> None:
    """Re-attacks kept /health at 503 with ~40 connections sending a byte a second, and then
    with such connections reconnecting as soon as they were closed. At the cap a newcomer now
    closes the oldest connection whose answer is not being made, so it is answered."""
    async with running_bookie(config([tmp_path / "d"], http_port=0)) as (bookie, _):
        address = bookie.admin_address
        assert address is not None
        request = b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"
        closed = 0

        async def trickle() -> None:
            nonlocal closed
            while True:  # reconnect at once when closed
                stream = await trio.open_tcp_stream(*address)
                try:
                    for i in range(len(request) - 1):  # never the whole request
                        await stream.send_all(request[i : i + 1])
                        await trio.sleep(0.3)
                except trio.BrokenResourceError:
                    closed += 1
                finally:
                    await stream.aclose()

        async with trio.open_nursery() as nursery:
            for _ in range(40):
                nursery.start_soon(trickle)
            await trio.sleep(1)
            statuses = []
            for _ in range(20):
                statuses.append((await _get(address, "/health"))[0])
                await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
        assert statuses.count(200) >= 19, statuses
        assert closed >= 8  # 8 over the cap, closed for each other and for the probes


async def test_a_failing_collector_gives_500_and_the_bookie_goes_on(tmp_path: Path) -> None:
    class Broken(Collector):
        def collect(self) -> Iterator[Metric]:
            raise RuntimeError("collector bug")

    registry = CollectorRegistry()
    registry.register(Broken())
    cfg = config([tmp_path / "d"], http_port=0)
    async with running_bookie(cfg, registry=registry) as (bookie, bid):
        assert bookie.admin_address is not None
        status, body = await _get(bookie.admin_address, "/metrics")
        assert status == 500 and b"collector bug" in body
        assert (await _get(bookie.admin_address, "/health"))[0] == 200
        async with connect(bid) as c:
            assert (await c.add(1, 0, b"still serving")).status is StatusCode.OK


async def test_read_only_shows_in_health_and_metrics(tmp_path: Path) -> None:
    cfg = config([tmp_path / "d"], http_port=0, disk_usage_threshold=0.001)
    async with running_bookie(cfg) as (bookie, _):
        assert bookie.admin_address is not None
        status, body = await _get(bookie.admin_address, "/health")
        assert status == 200 and json.loads(body)["read_only"] is True
        assert b"walkit_bookie_read_only 1.0" in (await _get(bookie.admin_address, "/metrics"))[1]
