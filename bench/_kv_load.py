"""The Python load client of bench/kv.py: h11 on trio, one task per keep-alive connection,
in the benchmark's own process (``--load python``).

It costs ~180 µs of CPU per request, the same for every system it drives, so on a 2-core
machine it takes a large share of the CPU from the servers it measures; wrk (bench/_wrk.py)
is the light one. The modes and keys are those of bench/kv_wrk.lua: PUTs to distinct keys
``TAG-<connection>-<n>``, GETs of keys 1..KEYS of an earlier PUT run with the same tag.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable

import h11
import trio

#: Keys per connection that GETs read: each connection of a PUT run writes more than this.
GET_KEYS = 100

RequestMaker = Callable[[int, int], tuple[str, str, bytes]]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def maker(mode: str, tag: str, value: bytes) -> RequestMaker:
    """What connection ``c`` sends as its ``i``-th request (i from 1)."""

    def put_key(c: int, i: int) -> str:
        return f"{tag}-{c}-{i}"

    def get_key(c: int, i: int) -> str:
        return f"{tag}-{c}-{i % GET_KEYS + 1}"

    def make(c: int, i: int) -> tuple[str, str, bytes]:
        if mode == "kv-put":
            return "PUT", f"/v1/kv/{put_key(c, i)}", value
        if mode == "kv-get":
            return "GET", f"/v1/kv/{get_key(c, i)}", b""
        if mode == "etcd-put":
            body = {"key": _b64(put_key(c, i).encode()), "value": _b64(value)}
            return "POST", "/v3/kv/put", json.dumps(body).encode()
        body2: dict[str, object] = {"key": _b64(get_key(c, i).encode())}
        if mode == "etcd-get-serializable":
            body2["serializable"] = True
        elif mode != "etcd-get":
            raise ValueError(f"unknown mode {mode!r}")
        return "POST", "/v3/kv/range", json.dumps(body2).encode()

    return make


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


async def _connection(
    address: tuple[str, int],
    make: RequestMaker,
    client: int,
    stop_at: float,
    latencies: list[float],
    counts: dict[str, int],
    etcd_read: bool,
) -> None:
    host, port = address
    stream = await trio.open_tcp_stream(host, port)
    conn = h11.Connection(h11.CLIENT)
    i = 0
    try:
        while time.perf_counter() < stop_at:
            i += 1
            method, target, body = make(client, i)
            data = conn.send(
                h11.Request(
                    method=method,
                    target=target,
                    headers=[("host", f"{host}:{port}"), ("content-length", str(len(body)))],
                )
            )
            data += conn.send(h11.Data(data=body)) + conn.send(h11.EndOfMessage())
            t0 = time.perf_counter()
            await stream.send_all(data)
            status = 0
            answer = b""
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await stream.receive_some(65536))
                    continue
                if isinstance(event, h11.Response):
                    status = event.status_code
                elif isinstance(event, h11.Data):
                    answer += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    raise RuntimeError("server closed the connection")
            latencies.append(time.perf_counter() - t0)
            if not 200 <= status < 300:
                counts["non_2xx"] += 1
            elif etcd_read and b'"kvs"' not in answer:
                counts["misses"] += 1  # etcd answers a missing key with 200 and no kvs
            conn.start_next_cycle()
    finally:
        await stream.aclose()


async def _load(
    address: tuple[str, int], make: RequestMaker, seconds: float, connections: int, etcd: bool
) -> dict[str, float]:
    latencies: list[float] = []
    counts = {"non_2xx": 0, "misses": 0}
    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for c in range(connections):
            nursery.start_soon(
                _connection, address, make, c, start + seconds, latencies, counts, etcd
            )
    elapsed = time.perf_counter() - start
    ok = len(latencies) - counts["non_2xx"] - counts["misses"]
    return {
        "requests": float(len(latencies)),
        "ok": float(ok),
        "per_s": ok / elapsed,
        "p50_ms": _percentile(latencies, 0.5) * 1e3,
        "p99_ms": _percentile(latencies, 0.99) * 1e3,
        "max_ms": max(latencies, default=0.0) * 1e3,
        "non_2xx": float(counts["non_2xx"]),
        "errors": 0.0,
        "misses": float(counts["misses"]),
    }


def run(
    url: str,
    mode: str,
    *,
    seconds: float,
    connections: int,
    tag: str = "k",
    value_size: int = 100,
) -> dict[str, float]:
    """One run, in this process; the same result keys as bench/_wrk.py's ``run``."""
    host, _, port = url.removeprefix("http://").rpartition(":")
    make = maker(mode, tag, b"v" * value_size)
    cpu = time.process_time()
    result = trio.run(
        _load, (host, int(port)), make, seconds, connections, mode.startswith("etcd-get")
    )
    result["client_cpu_s"] = time.process_time() - cpu
    return result
