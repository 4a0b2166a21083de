"""A writer process for the takeover tests: appends until killed or fenced.

    python _writer.py METADATA_URL [LEDGER_ID]

Prints ``LEDGER <id>`` once, then ``ACK <entry_id>`` for every acknowledged entry (flushed, so
the parent sees exactly what was acknowledged), and ``FENCED`` when it is fenced out.
"""

from __future__ import annotations

import sys

import trio

import walkit

PASSWORD = b"takeover"


def payload(entry_id: int) -> bytes:
    return (f"entry-{entry_id}-".encode() * 20)[:100]


async def main(url: str) -> None:
    async with walkit.Client.connect(url) as client:
        writer = await client.create_ledger(
            ensemble_size=3, write_quorum=2, ack_quorum=2, password=PASSWORD
        )
        print(f"LEDGER {writer.id}", flush=True)
        next_id = 0
        try:
            while True:
                ids = await writer.append_batch([payload(next_id + i) for i in range(8)])
                for eid in ids:
                    assert eid == next_id, (eid, next_id)
                    # One write, newline included: stderr shares the pipe.
                    print(f"ACK {eid}\n", end="", flush=True)
                    next_id += 1
        except walkit.WriterFencedError as exc:
            print(f"FENCED {type(exc).__name__}", flush=True)
            sys.exit(3)
        except walkit.WalkitError as exc:
            print(f"ERROR {type(exc).__name__}: {exc}", flush=True)
            sys.exit(4)


if __name__ == "__main__":
    trio.run(main, sys.argv[1])
