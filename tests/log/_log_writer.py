"""A log writer process for the takeover tests: takes the log over and appends.

    python _log_writer.py METADATA_URL LOG TAG [COUNT]

Prints ``FIRST <position>`` once it owns the log, then ``ACK <position> <payload>`` for every
acknowledged record (flushed, so the parent sees exactly what was acknowledged), ``DONE``
after COUNT records (then it closes the writer and exits 0), and ``FENCED`` (exit 3) when
another writer took over. Without COUNT it appends until killed.
"""

from __future__ import annotations

import itertools
import sys

import trio

import walkit

#: Small ledgers, so that rolls happen while the writer runs (each batch of 4 records below is
#: one record set, so 40 records per ledger).
ROLL_ENTRIES = 10


async def main(url: str, name: str, tag: str, count: int | None) -> None:
    async with walkit.Client.connect(url) as client:
        log = await walkit.Log.open(client, name, roll_entries=ROLL_ENTRIES)
        try:
            async with log.writer() as w:
                print(f"FIRST {w.first_position}", flush=True)
                numbers = itertools.count() if count is None else iter(range(count))
                while True:
                    batch = [f"{tag}-{n}".encode() for n in itertools.islice(numbers, 4)]
                    if not batch:
                        break
                    for pos, payload in zip(await w.append_batch(batch), batch, strict=True):
                        # One write, newline included: stderr shares the pipe.
                        print(f"ACK {pos} {payload.decode()}\n", end="", flush=True)
            print("DONE", flush=True)
        except walkit.errors.WriterFencedError as exc:
            print(f"FENCED {exc}", flush=True)
            sys.exit(3)


if __name__ == "__main__":
    trio.run(
        main, sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else None
    )
