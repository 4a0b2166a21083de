"""The KV service's HTTP front, server against server, same run: the hand-written server
(examples/kv_http.py on httptools), uvicorn on httptools and uvicorn on h11 with
``h11_max_incomplete_event_size``. Each serves the same handler (a 100 B answer from a dict,
what a serializable GET costs beside the parsing) in a process of its own on uvloop; wrk
loads each in turn (``kv-get``), and each is then sent an unfinished header line (the first of
the hostile-client probes) while its resident memory is read.

    python bench/_kv_servers.py [--seconds 3] [--connections 32] [--runs 2]

The HTTP server alone, not the replicated service: what the choice of server changes."""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

VARIANTS = ("kv_http", "uvicorn-httptools", "uvicorn-h11")
_VALUE = b"v" * 100
#: h11's limit on an incomplete head, set as the service's own (kv_http.MAX_HEAD).
H11_LIMIT = 16 * 1024


def _serve(variant: str, port: int) -> None:
    import asyncio

    import uvloop

    if variant == "kv_http":
        import anyio
        from kv_http import Request, Response, serve

        def handler(request: Request) -> Response:
            return Response(200, _VALUE, content_type="application/octet-stream")

        async def run() -> None:
            print("ready", flush=True)
            await serve(handler, "127.0.0.1", port, max_body=65536)

        anyio.run(run, backend="asyncio", backend_options={"use_uvloop": True})
        return
    import uvicorn

    async def app(scope: dict[str, object], receive: object, send: object) -> None:
        assert scope["type"] == "http"
        await send(  # type: ignore[operator]
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/octet-stream")],
            }
        )
        await send({"type": "http.response.body", "body": _VALUE})  # type: ignore[operator]

    http = "httptools" if variant == "uvicorn-httptools" else "h11"
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        http=http,
        loop="uvloop",
        lifespan="off",
        access_log=False,
        log_level="warning",
        h11_max_incomplete_event_size=H11_LIMIT,
    )
    print("ready", flush=True)
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    uvicorn.Server(config).run()


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _wait_port(port: int) -> None:
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def _unfinished_header(
    port: int, pid: int, connections: int = 8, size: int = 8 << 20
) -> dict[str, float]:
    """Send ``size`` bytes of one header line on each of ``connections``: the server's RSS
    growth, and how much each took before it answered or closed."""
    before = _rss(pid)
    peak = before
    taken = []
    socks = []
    for _ in range(connections):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET / HTTP/1.1\r\nHost: h\r\nX-Big: ")
        s.settimeout(2)
        socks.append(s)
    chunk = b"a" * 65536
    for s in socks:
        sent = 0
        try:
            while sent < size:
                s.sendall(chunk)
                sent += len(chunk)
                peak = max(peak, _rss(pid))
        except OSError:
            pass
        taken.append(sent)
    peak = max(peak, _rss(pid))
    for s in socks:
        s.close()
    return {"rss_growth_mib": (peak - before) / 2**20, "max_taken_mib": max(taken) / 2**20}


def main() -> None:
    from bench import _wrk

    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    _wrk.ensure_installed()
    rows: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    probes: dict[str, dict[str, float]] = {}
    for run in range(args.runs):
        for variant in VARIANTS:
            port = free_port()
            proc = subprocess.Popen([sys.executable, __file__, "--serve", variant, str(port)])
            try:
                _wait_port(port)
                result = _wrk.run(
                    f"http://127.0.0.1:{port}",
                    "kv-get",
                    seconds=args.seconds,
                    connections=args.connections,
                    threads=1,
                )
                rows[variant].append(result)
                if run == 0:
                    probes[variant] = _unfinished_header(port, proc.pid)
            finally:
                proc.terminate()
                proc.wait(10)
    for variant in VARIANTS:
        rates = ", ".join(f"{r['per_s']:.0f}" for r in rows[variant])
        p99 = ", ".join(f"{r['p99_ms']:.2f}" for r in rows[variant])
        probe = probes[variant]
        print(
            f"{variant:18} req/s {rates:20} p99 ms {p99:14} unfinished header: RSS +"
            f"{probe['rss_growth_mib']:.0f} MiB, up to {probe['max_taken_mib']:.1f} MiB taken"
        )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--serve":
        _serve(sys.argv[2], int(sys.argv[3]))
    else:
        main()
