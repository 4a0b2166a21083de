"""What a call costs across each way an asyncio program could reach walkit's event loop.

walkit had to choose how asyncio programs use it (docs/architecture.md, "One implementation for
trio and asyncio"): run the client's own code on the program's loop (the AnyIO port), or keep
it on trio and cross over for every call (a loop thread, or trio's guest mode). This measures
the crossing alone, with a call that does no work, in one run:

- ``direct``: an asyncio task awaits a future that the loop resolves (what an append's wait
  is on the port: the answer arrives in a reader callback);
- ``loop thread``: the task hands the call to a trio run in another thread
  (``TrioToken.run_sync_soon``) and awaits the answer (``call_soon_threadsafe``);
- ``guest mode``: trio runs as a guest on the asyncio loop (``start_guest_run``), and the task
  hands the call to it the same way, on one thread.

Each is timed one call at a time (p50 of the round trip) and with 64 tasks calling at once
(calls/s, and this process's CPU per call). ``python bench/bridge.py [--calls 20000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from collections.abc import Awaitable, Callable

import trio

TASKS = 64


async def _measure(call: Callable[[], Awaitable[None]], calls: int) -> dict[str, float]:
    lat = []
    for _ in range(min(calls, 5000)):
        t0 = time.perf_counter()
        await call()
        lat.append(time.perf_counter() - t0)
    per_task = calls // TASKS
    cpu0, t0 = time.process_time(), time.perf_counter()

    async def worker() -> None:
        for _ in range(per_task):
            await call()

    await asyncio.gather(*(worker() for _ in range(TASKS)))
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    done = per_task * TASKS
    return {
        "p50_us": statistics.median(lat) * 1e6,
        "calls_per_s": done / elapsed,
        "cpu_us": cpu / done * 1e6,
    }


async def direct(calls: int) -> dict[str, float]:
    loop = asyncio.get_running_loop()

    async def call() -> None:
        future = loop.create_future()
        loop.call_soon(future.set_result, None)
        await future

    return await _measure(call, calls)


async def _via_trio(token: trio.lowlevel.TrioToken, calls: int) -> dict[str, float]:
    loop = asyncio.get_running_loop()

    async def call() -> None:
        future = loop.create_future()

        def in_trio() -> None:  # the trio side answers at once
            loop.call_soon_threadsafe(future.set_result, None)

        token.run_sync_soon(in_trio)
        await future

    return await _measure(call, calls)


def loop_thread(calls: int) -> dict[str, float]:
    ready = threading.Event()
    tokens: list[trio.lowlevel.TrioToken] = []
    stops: list[trio.Event] = []

    async def trio_main() -> None:
        stops.append(trio.Event())
        tokens.append(trio.lowlevel.current_trio_token())
        ready.set()
        await stops[0].wait()

    thread = threading.Thread(target=trio.run, args=(trio_main,), daemon=True)
    thread.start()
    ready.wait()
    try:
        return asyncio.run(_via_trio(tokens[0], calls))
    finally:
        tokens[0].run_sync_soon(stops[0].set)
        thread.join()


async def guest_mode(calls: int) -> dict[str, float]:
    loop = asyncio.get_running_loop()
    started = loop.create_future()
    finished = loop.create_future()
    stop = trio.Event()

    async def trio_main() -> None:
        started.set_result(trio.lowlevel.current_trio_token())
        await stop.wait()

    trio.lowlevel.start_guest_run(
        trio_main,
        run_sync_soon_threadsafe=loop.call_soon_threadsafe,
        done_callback=lambda outcome: finished.set_result(outcome),
        host_uses_signal_set_wakeup_fd=True,
    )
    token = await started
    try:
        return await _via_trio(token, calls)
    finally:
        token.run_sync_soon(stop.set)
        await finished


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    results = {
        "direct (the AnyIO port)": asyncio.run(direct(args.calls)),
        "loop thread (trio in a thread)": loop_thread(args.calls),
        "guest mode (trio on the asyncio loop)": asyncio.run(guest_mode(args.calls)),
    }
    print("| way | p50 µs, one at a time | calls/s, 64 tasks | CPU µs per call |")
    print("|---|---|---|---|")
    for name, r in results.items():
        print(f"| {name} | {r['p50_us']:.1f} | {r['calls_per_s']:,.0f} | {r['cpu_us']:.1f} |")


if __name__ == "__main__":
    main()
