"""The HTTP admin endpoint: /metrics in prometheus format, /health, and bad requests."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from tests.bookie._helpers import config, connect, running_bookie
from walkit._core.wire import StatusCode


async def _http(address: tuple[str, int], raw: bytes) -> tuple[int, bytes]:
    stream = await trio.open_tcp_stream(*address)
    async with stream:
        await stream.send_all(raw)
        data = b""
        with trio.fail_after(10):
            while chunk := await stream.receive_some(65536):
                data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def _get(address: tuple[str, int], path: str) -> tuple[int, bytes]:
    return await _http(address, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())


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


async def test_bad_http_requests_get_4xx_and_the_bookie_goes_on(tmp_path: Path) -> None:
    async with running_bookie(config([tmp_path / "d"], http_port=0)) as (bookie, bid):
        address = bookie.admin_address
        assert address is not None
        assert (await _get(address, "/nope"))[0] == 404
        assert (await _http(address, b"POST /metrics HTTP/1.1\r\n\r\n"))[0] == 405
        assert (await _http(address, b"\xff\xfe garbage\r\n\r\n"))[0] == 400
        try:  # an oversized request: a 400, or a reset if the server closed while we sent
            assert (await _http(address, b"A" * 20_000))[0] == 400
        except trio.BrokenResourceError:
            pass
        assert (await _get(address, "/health"))[0] == 200
        async with connect(bid) as c:
            assert (await c.add(1, 0, b"still serving")).status is StatusCode.OK


async def test_read_only_shows_in_health_and_metrics(tmp_path: Path) -> None:
    cfg = config([tmp_path / "d"], http_port=0, disk_usage_threshold=0.001)
    async with running_bookie(cfg) as (bookie, _):
        assert bookie.admin_address is not None
        status, body = await _get(bookie.admin_address, "/health")
        assert status == 200 and json.loads(body)["read_only"] is True
        assert b"walkit_bookie_read_only 1.0" in (await _get(bookie.admin_address, "/metrics"))[1]
