"""A log writer process that stops in the middle of a roll, for the stalled-reader tests.

    python _midroll_writer.py METADATA_URL LOG COUNT

Takes the log over, appends COUNT records (printing ``ACK <position> <payload>`` for each, once
acknowledged), then does the first half of a roll exactly as ``LogWriter`` does (create the next
ledger, list it last with a compare-and-set) and prints ``ROLLED <ledger id>`` without closing
the old ledger: the state a writer SIGKILLed between the two halves leaves. It then waits to be
killed, its old ledger still open (its last acknowledged entry beyond the bookies' LAC).
"""

from __future__ import annotations

import sys

import trio

import walkit
from walkit._core.log_metadata import LogLedger, LogMetadata
from walkit.client import client_services
from walkit.log._store import update_log


async def main(url: str, name: str, count: int) -> None:
    # No explicit LAC writes: the last acknowledged entry stays beyond the LAC the bookies
    # know, as when a writer dies within moments of its last append.
    async with walkit.Client.connect(url, explicit_lac_interval=None) as client:
        log = await walkit.Log.open(client, name)
        w = await log.writer()
        for n in range(count):
            payload = f"r-{n}".encode()
            pos = await w.append(payload)
            # One write, newline included: stderr shares the pipe.
            print(f"ACK {pos} {payload.decode()}\n", end="", flush=True)
        current = LogLedger(w.ledger_seq, w.ledger_id)
        new_lw = await log._create_ledger("data")

        def change(md: LogMetadata) -> tuple[LogMetadata, LogLedger]:
            return md.after_roll(current, new_lw.id)

        await update_log(client_services(client).context, name, change)
        print(f"ROLLED {new_lw.id}", flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
