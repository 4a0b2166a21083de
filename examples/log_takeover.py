"""The log's promise, shown: a writer dies mid-stream, a successor takes the log over, and no
acknowledged record is lost.

    python examples/log_takeover.py METADATA_URL      (or $WALKIT_METADATA)

1. A writer process appends records to a new log from several tasks at once and prints each
   position it was acknowledged (``append`` returns only once the record is durable on an ack
   quorum of bookies).
2. This program SIGKILLs that process in mid-stream, with appends still in flight.
3. A second writer opens the log: it fences the dead writer's ledger on the bookies, recovers
   exactly what that writer may have been acknowledged, and starts a ledger of its own.
4. Every record is read back and checked against what the first writer was told: the count of
   acknowledged records lost (0), the records recovered that were still in flight (a record
   whose append had not returned may or may not survive: the writer was never told), and the
   time the takeover took.

``python examples/log_takeover.py writer URL LOG`` is the first writer (started by the above).
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time

import trio

import walkit

#: Tasks appending at once in the first writer, so that appends are in flight when it dies.
TASKS = 16
#: Acknowledgements the first writer must have printed before it is killed.
KILL_AFTER = 3000


async def write_forever(url: str, name: str) -> None:
    """The first writer: append ``<task>-<n>`` records from TASKS tasks until killed, printing
    ``ACK <position> <payload>`` for each acknowledged one."""
    async with (
        walkit.Client.connect(url) as client,
        walkit.Log.open(client, name) as log,
        log.writer() as writer,
    ):

        async def task(t: int) -> None:
            n = 0
            while True:
                payload = f"{t}-{n}".encode()
                position = await writer.append(payload)
                # Printed after append returned: each line is an acknowledged record.
                print(f"ACK {position} {payload.decode()}", flush=True)
                n += 1

        async with trio.open_nursery() as nursery:
            for t in range(TASKS):
                nursery.start_soon(task, t)


def run_first_writer(url: str, name: str) -> tuple[dict[str, str], float]:
    """Start the first writer, collect its acknowledgements, SIGKILL it mid-stream. Returns
    {payload: position} of what it was told, and when it was killed (monotonic seconds)."""
    child = subprocess.Popen(
        [sys.executable, __file__, "writer", url, name],
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
    )
    assert child.stdout is not None
    acked: dict[str, str] = {}
    try:
        for line in child.stdout:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "ACK":
                acked[parts[2]] = parts[1]
            if len(acked) >= KILL_AFTER:
                break
        else:
            sys.exit(f"the first writer stopped by itself (exit status {child.wait()})")
        child.send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        # Lines it printed before it died are acknowledgements too.
        for line in child.stdout:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "ACK":
                acked[parts[2]] = parts[1]
    finally:
        child.kill()
        child.wait()
    return acked, killed_at


async def take_over(url: str, name: str, acked: dict[str, str], killed_at: float) -> int:
    async with walkit.Client.connect(url) as client, walkit.Log.open(client, name) as log:
        before = [ledger.ledger_id for ledger in (await log.metadata()).ledgers]
        async with log.writer() as writer:
            took = time.monotonic() - killed_at
            mine = await writer.append(b"successor-0")
        after = [ledger.ledger_id for ledger in (await log.metadata()).ledgers]
        print(
            f"2. a second writer took the log over {took:.2f} s after the kill: it fenced "
            f"ledger {before[-1]} on the bookies, recovered it, and wrote ledger {after[-1]} "
            f"(first record at {mine})"
        )
        records = [r async for r in log.reader(walkit.LogPosition.EARLIEST, follow=False)]

    read = {r.payload.decode(): str(r.position) for r in records}
    lost = [p for p in acked if p not in read]
    moved = [p for p, pos in acked.items() if p in read and read[p] != pos]
    in_order = all(a.position < b.position for a, b in itertools.pairwise(records))
    recovered = len(records) - len(acked) - 1  # in flight at the kill, kept by recovery
    print(f"3. read back {len(records)} records from the log, in order: {in_order}")
    print(f"   acknowledged to the first writer: {len(acked)}")
    print(f"   acknowledged records lost: {len(lost)}")
    print(f"   acknowledged records at another position: {len(moved)}")
    print(f"   records in flight at the kill that recovery kept: {recovered}")
    ok = not lost and not moved and in_order and recovered >= 0
    print("the log kept every acknowledged record." if ok else "RECORDS WERE LOST")
    return 0 if ok else 1


def main(url: str) -> int:
    name = f"demo-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    print(f"1. a writer process appends to log {name} from {TASKS} tasks ...")
    acked, killed_at = run_first_writer(url, name)
    print(f"   SIGKILLed it after {len(acked)} acknowledged records, with appends in flight")
    return trio.run(take_over, url, name, acked, killed_at)


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "writer":
        trio.run(write_forever, sys.argv[2], sys.argv[3])
        sys.exit(0)
    target = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("WALKIT_METADATA", "")
    if not target:
        sys.exit("usage: log_takeover.py METADATA_URL (or set WALKIT_METADATA)")
    sys.exit(main(target))
