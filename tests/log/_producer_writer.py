"""An idempotent producer's writer process for the takeover tests: takes the log over and
appends tagged batches, as a producer retrying after a crash would.

    python _producer_writer.py METADATA_URL LOG PRODUCER START [COUNT]

Appends batches of ``BATCH`` records ``p-<n>`` with sequence numbers ``n`` from START. Prints
``FIRST <position>`` once it owns the log, ``ACK <position> <n>`` for every record of a batch
once ``append_batch`` returned (flushed), ``DONE`` after COUNT records (then it closes the
writer and exits 0). Without COUNT it appends until killed.
"""

from __future__ import annotations

import itertools
import sys

import trio

import walkit

BATCH = 7
#: Small entries and ledgers: a batch spans several entries, and rolls come mid-batch.
BATCH_BYTES = 40
ROLL_ENTRIES = 12


async def main(url: str, name: str, producer: str, start: int, count: int | None) -> None:
    async with walkit.Client.connect(url) as client:
        log = await walkit.Log.open(
            client, name, batch_bytes=BATCH_BYTES, roll_entries=ROLL_ENTRIES
        )
        async with log.writer() as w:
            print(f"FIRST {w.first_position}", flush=True)
            end = None if count is None else start + count
            for first in itertools.count(start, BATCH):
                last = first + BATCH if end is None else min(first + BATCH, end)
                if last <= first:
                    break
                numbers = range(first, last)
                payloads = [b"p-%d" % n for n in numbers]
                positions = await w.append_batch(payloads, producer_id=producer, sequence=first)
                for pos, n in zip(positions, numbers, strict=True):
                    # One write, newline included: stderr shares the pipe.
                    print(f"ACK {pos} {n}\n", end="", flush=True)
        print("DONE", flush=True)


if __name__ == "__main__":
    trio.run(
        main,
        sys.argv[1],
        sys.argv[2],
        sys.argv[3],
        int(sys.argv[4]),
        int(sys.argv[5]) if len(sys.argv) > 5 else None,
    )
