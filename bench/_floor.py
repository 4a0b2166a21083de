"""The floor of one append in flight on this machine, measured in the same run as the log.

Three server processes stand in for the bookies, each as small as a Python server on uvloop
can be: a protocol callback that writes every message it receives into a 4 KiB block of a
preallocated file opened with ``O_DIRECT | O_DSYNC`` (what the journal does for a lone add),
then answers 32 bytes. A client on uvloop sends each message to all three and waits for two
answers (E=Qw=3, Qa=2 as ``bench/log.py`` runs the log), one message at a time. Its p50 is
what the disk, loopback TCP and the scheduling of four Python processes on this machine's
cores cost before any of walkit's own code: the log's one-in-flight p50 minus this one is
walkit's share.

    python -m bench._floor [DIR] [SECONDS]
"""

from __future__ import annotations

import asyncio
import mmap
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: Blocks the servers' files hold (written round-robin, never grown: no metadata updates).
_BLOCKS = 256
#: Bytes of a message: about a 100 B record's add request.
_MESSAGE = 160
#: Bytes of an answer: about an add response.
_ANSWER = 32


def _serve(path: str) -> None:
    """One server: print its port, then write and answer each message until killed."""
    import uvloop

    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DSYNC | getattr(os, "O_DIRECT", 0), 0o644)
    block = mmap.mmap(-1, 4096)  # page-aligned, as O_DIRECT needs
    for i in range(_BLOCKS):
        os.pwrite(fd, block, i * 4096)
    at = [0]

    class Server(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            self.transport = transport
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def data_received(self, data: bytes) -> None:
            block[: len(data)] = data
            os.pwrite(fd, block, at[0] * 4096)
            at[0] = (at[0] + 1) % _BLOCKS
            self.transport.write(data[:_ANSWER])

    async def main() -> None:
        server = await asyncio.get_running_loop().create_server(Server, "127.0.0.1", 0)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    uvloop.run(main())


async def _client(ports: list[int], seconds: float) -> list[float]:
    loop = asyncio.get_running_loop()
    state: dict[str, Any] = {}

    class Client(asyncio.Protocol):
        def connection_made(self, transport: Any) -> None:
            transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def data_received(self, data: bytes) -> None:
            state["answers"] += len(data) // _ANSWER
            for count, key in ((2, "quorum"), (3, "all")):
                if state["answers"] >= count and not state[key].done():
                    state[key].set_result(None)

    transports = [(await loop.create_connection(Client, "127.0.0.1", p))[0] for p in ports]
    message = b"m" * _MESSAGE
    latencies: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        state["answers"] = 0
        state["quorum"], state["all"] = loop.create_future(), loop.create_future()
        t0 = time.perf_counter()
        for transport in transports:
            transport.write(message)
        await state["quorum"]
        latencies.append(time.perf_counter() - t0)
        await state["all"]  # (the third answer is not counted for the next message)
    for transport in transports:
        transport.close()
    return latencies


def one_in_flight_floor(directory: str | Path, *, seconds: float = 3.0) -> dict[str, float]:
    """``floor_p50_ms``: the p50 of the stand-in above (needs uvloop); ``floor_per_s``."""
    import uvloop

    directory = Path(directory)
    servers = []
    try:
        for i in range(3):
            path = directory / f"floor-{i}.bin"
            servers.append(
                subprocess.Popen(
                    [sys.executable, "-m", "bench._floor", "--serve", str(path)],
                    cwd=Path(__file__).resolve().parent.parent,
                    stdout=subprocess.PIPE,
                    text=True,
                )
            )
        ports = [int(p.stdout.readline()) for p in servers if p.stdout is not None]
        latencies = uvloop.run(_client(ports, seconds))
    finally:
        for p in servers:
            p.kill()
            p.wait()
        for i in range(3):
            (directory / f"floor-{i}.bin").unlink(missing_ok=True)
    return {
        "floor_p50_ms": statistics.median(latencies) * 1e3,
        "floor_per_s": len(latencies) / seconds,
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        _serve(sys.argv[2])
    else:
        where = sys.argv[1] if len(sys.argv) > 1 else "."
        print(one_in_flight_floor(where, seconds=float(sys.argv[2]) if len(sys.argv) > 2 else 3))
