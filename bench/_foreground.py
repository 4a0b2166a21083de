"""A foreground writer in its own process, as an application beside a healing cluster is.

    python bench/_foreground.py METADATA_URL OUT_FILE

Appends 1 KiB entries one at a time to a new ledger (E=Qw=3, Qa=2) until SIGTERM, then writes
the latency of each append after the first to OUT_FILE (ms, one per line). Prints "loaded"
once its imports are done, then waits for a line on stdin before it connects (so a benchmark
can start it ahead, and the interpreter's start-up is not timed), and prints "ready" once the
first append is durable.
"""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from walkit.client import Client


async def main(url: str) -> list[float]:
    samples: list[float] = []
    with trio.open_signal_receiver(signal.SIGTERM) as signals:
        async with Client.connect(url) as client:
            lw = await client.create_ledger(3, 3, 2)
            payload = b"f" * 1024
            await lw.append(payload)
            print("ready", flush=True)
            stopping = trio.Event()

            async def stop() -> None:
                async for _ in signals:
                    stopping.set()
                    return

            async with trio.open_nursery() as nursery:
                nursery.start_soon(stop)
                while not stopping.is_set():
                    t0 = time.perf_counter()
                    await lw.append(payload)
                    samples.append((time.perf_counter() - t0) * 1e3)
            await lw.close()
    return samples


if __name__ == "__main__":
    print("loaded", flush=True)
    sys.stdin.readline()
    appends = trio.run(main, sys.argv[1])
    Path(sys.argv[2]).write_text("".join(f"{ms:.4f}\n" for ms in appends))
