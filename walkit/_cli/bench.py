"""`walkit bench`: append load against a running cluster, with throughput and latency.

In the spirit of BookKeeper's `bookkeeper benchmark writes`: ``--in-flight`` tasks append
(one entry, or ``--batch`` entries, at a time, each awaited) until ``--entries`` are durable,
to a fresh ledger that is deleted afterwards, or with ``--log NAME`` to that log (kept).
"""

from __future__ import annotations

import argparse
import time
from typing import Any, TextIO

import anyio

from walkit._cli._connect import connect_options
from walkit._cli.output import emit_record

__all__ = ["add_parser", "bench"]


def add_parser(sub: Any, with_metadata: Any, positive: Any) -> None:
    p = with_metadata(
        sub.add_parser(
            "bench",
            help="append load: entries/s, MiB/s and latency percentiles",
            formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        )
    )
    p.add_argument("--entries", type=positive, default=10_000, help="entries to append in all")
    p.add_argument("--size", type=positive, default=100, help="entry size in bytes")
    p.add_argument("--in-flight", type=positive, default=16, help="concurrent appending tasks")
    p.add_argument("--batch", type=positive, default=1, help="entries per append call")
    p.add_argument("--ensemble", type=positive, default=3)
    p.add_argument("--write-quorum", type=positive, default=2)
    p.add_argument("--ack-quorum", type=positive, default=2)
    p.add_argument(
        "--log",
        default=None,
        metavar="NAME",
        help="append to this log (created if missing, kept) instead of a new ledger (deleted)",
    )


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, int(fraction * len(sorted_values)))
    return sorted_values[index]


async def bench(url: str, args: argparse.Namespace, out: TextIO) -> int:
    from walkit.client import Client
    from walkit.log import Log

    payload = (b"walkit-bench-" + b"x" * args.size)[: args.size]
    calls = -(-args.entries // args.batch)  # append calls in all
    latencies: list[float] = []
    next_call = 0

    async with Client.connect(url, **connect_options(args)) as client:
        quorums = {
            "ensemble_size": args.ensemble,
            "write_quorum": args.write_quorum,
            "ack_quorum": args.ack_quorum,
        }
        if args.log is None:
            target: Any = await client.create_ledger(**quorums, password=b"walkit-bench")
            writer_cm: Any = None
        else:
            log = await Log.open(client, args.log, **quorums)
            writer_cm = log.writer()
            target = await writer_cm.__aenter__()
        try:

            async def worker() -> None:
                nonlocal next_call
                while next_call < calls:
                    call = next_call
                    next_call += 1
                    count = min(args.batch, args.entries - call * args.batch)
                    # (not the loop's clock: uvloop's counts whole milliseconds)
                    t0 = time.perf_counter()
                    if count == 1:
                        await target.append(payload)
                    else:
                        await target.append_batch([payload] * count)
                    latencies.append(time.perf_counter() - t0)

            started = time.perf_counter()
            async with anyio.create_task_group() as nursery:
                for _ in range(min(args.in_flight, calls)):
                    nursery.start_soon(worker)
            elapsed = time.perf_counter() - started
        finally:
            if writer_cm is not None:
                await writer_cm.__aexit__(None, None, None)
            else:
                await target.close()
                await client.delete_ledger(target.id, password=b"walkit-bench")

    latencies.sort()
    record = {
        "target": f"log {args.log}" if args.log is not None else f"ledger {target.id} (deleted)",
        "entries": args.entries,
        "entry_size": args.size,
        "in_flight": args.in_flight,
        "batch": args.batch,
        "quorums": f"E={args.ensemble} Qw={args.write_quorum} Qa={args.ack_quorum}",
        "seconds": round(elapsed, 3),
        "entries_per_second": round(args.entries / elapsed) if elapsed > 0 else None,
        "mib_per_second": round(args.entries * args.size / elapsed / 2**20, 2)
        if elapsed > 0
        else None,
        "latency_p50_ms": round(_percentile(latencies, 0.50) * 1000, 3),
        "latency_p99_ms": round(_percentile(latencies, 0.99) * 1000, 3),
        "latency_max_ms": round(latencies[-1] * 1000, 3) if latencies else 0.0,
    }
    emit_record(record, as_json=args.json, out=out)
    return 0
